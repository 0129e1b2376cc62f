//! Reading what the sinks wrote back from a store: record ids, records and audit events.
//!
//! Used by every test that counts by record id, and by operators checking a store. It shares
//! the parquet crate with the writer, so it proves round-trips, not independent readability.

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, TimestampNanosecondType, UInt32Type, UInt64Type};
use arrow_array::{Array, RecordBatch};
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::errors::ParquetError;

use crate::audit::{AuditEvent, AuditKind};
use crate::encode::{audit_columns as ac, columns as rc};
use crate::types::{Attributes, LogRecord, RecordId, Tenant};

/// Why reading a store back failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Listing or getting an object failed.
    #[error("store read failed")]
    Store(#[from] object_store::Error),
    /// An object is not valid Parquet.
    #[error("object {path} is not readable parquet")]
    Parquet {
        /// The object.
        path: String,
        /// The reader's error.
        source: ParquetError,
    },
    /// An object lacks a column or has it with another type.
    #[error("object {path} has no column {column} of the expected type")]
    Column {
        /// The object.
        path: String,
        /// The column.
        column: &'static str,
    },
}

/// Every object below `<prefix>/<kind>/`, sorted by path.
pub async fn list_objects(
    store: &dyn ObjectStore,
    prefix: &str,
    kind: &str,
) -> Result<Vec<Path>, ReadError> {
    let root = crate::store::object_path(prefix, [kind]);
    let mut paths: Vec<Path> = store
        .list(Some(&root))
        .map_ok(|m| m.location)
        .try_collect()
        .await?;
    paths.sort();
    Ok(paths)
}

async fn batches(store: &dyn ObjectStore, path: &Path) -> Result<Vec<RecordBatch>, ReadError> {
    let bytes = store.get(path).await?.bytes().await?;
    let perr = |source| ReadError::Parquet {
        path: path.to_string(),
        source,
    };
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .map_err(perr)?
        .build()
        .map_err(perr)?;
    reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| perr(ParquetError::ArrowError(e.to_string())))
}

struct Cols<'a> {
    batch: &'a RecordBatch,
    path: &'a Path,
}

impl<'a> Cols<'a> {
    fn get(&self, column: &'static str) -> Result<&'a dyn Array, ReadError> {
        self.batch
            .column_by_name(column)
            .map(|c| c.as_ref())
            .ok_or_else(|| self.err(column))
    }

    fn err(&self, column: &'static str) -> ReadError {
        ReadError::Column {
            path: self.path.to_string(),
            column,
        }
    }

    fn u64(&self, c: &'static str) -> Result<&'a arrow_array::UInt64Array, ReadError> {
        self.get(c)?
            .as_primitive_opt::<UInt64Type>()
            .ok_or_else(|| self.err(c))
    }

    fn u32(&self, c: &'static str) -> Result<&'a arrow_array::UInt32Array, ReadError> {
        self.get(c)?
            .as_primitive_opt::<UInt32Type>()
            .ok_or_else(|| self.err(c))
    }

    fn ts(&self, c: &'static str) -> Result<&'a arrow_array::TimestampNanosecondArray, ReadError> {
        self.get(c)?
            .as_primitive_opt::<TimestampNanosecondType>()
            .ok_or_else(|| self.err(c))
    }

    fn fixed(&self, c: &'static str) -> Result<&'a arrow_array::FixedSizeBinaryArray, ReadError> {
        self.get(c)?
            .as_fixed_size_binary_opt()
            .ok_or_else(|| self.err(c))
    }

    fn str(&self, c: &'static str) -> Result<&'a arrow_array::StringArray, ReadError> {
        self.get(c)?
            .as_string_opt::<i32>()
            .ok_or_else(|| self.err(c))
    }
}

fn opt<T>(present: bool, value: T) -> Option<T> {
    present.then_some(value)
}

/// The record ids of every row below `<prefix>/records/` (duplicates included, so a caller
/// can count them).
pub async fn read_record_ids(
    store: &dyn ObjectStore,
    prefix: &str,
) -> Result<Vec<RecordId>, ReadError> {
    let mut ids = Vec::new();
    for path in list_objects(store, prefix, "records").await? {
        for batch in batches(store, &path).await? {
            let cols = Cols {
                batch: &batch,
                path: &path,
            };
            let lsn = cols.u64(rc::RECORD_LSN)?;
            let index = cols.u32(rc::RECORD_INDEX)?;
            for i in 0..batch.num_rows() {
                ids.push(RecordId {
                    lsn: lsn.value(i),
                    index: index.value(i),
                });
            }
        }
    }
    Ok(ids)
}

/// The key and value pairs of `map`'s row `row`, copied from its arrays once.
fn string_pairs(map: &arrow_array::MapArray, row: usize) -> Attributes {
    let entries = map.value(row);
    let keys = entries.column(0).as_string::<i32>();
    let values = entries.column(1).as_string::<i32>();
    (0..entries.len())
        .map(|i| (keys.value(i), values.value(i)))
        .collect()
}

/// Every record below `<prefix>/records/`, decoded back into [`LogRecord`]s.
pub async fn read_records(
    store: &dyn ObjectStore,
    prefix: &str,
) -> Result<Vec<LogRecord>, ReadError> {
    let mut out = Vec::new();
    for path in list_objects(store, prefix, "records").await? {
        for batch in batches(store, &path).await? {
            let c = Cols {
                batch: &batch,
                path: &path,
            };
            let tenant = c.str(rc::TENANT)?;
            let lsn = c.u64(rc::RECORD_LSN)?;
            let index = c.u32(rc::RECORD_INDEX)?;
            let time = c.ts(rc::TIME)?;
            let observed = c.ts(rc::OBSERVED_TIME)?;
            let sev = c
                .get(rc::SEVERITY_NUMBER)?
                .as_primitive_opt::<Int32Type>()
                .ok_or_else(|| c.err(rc::SEVERITY_NUMBER))?;
            let sev_text = c.str(rc::SEVERITY_TEXT)?;
            let wal = c.fixed(rc::WAL_ID)?;
            let tkey = c.fixed(rc::TEMPLATE_KEY)?;
            let tid = c.u64(rc::TEMPLATE_ID)?;
            let tver = c.u32(rc::TEMPLATE_VERSION)?;
            let params = c
                .get(rc::PARAMS)?
                .as_list_opt::<i32>()
                .ok_or_else(|| c.err(rc::PARAMS))?;
            let body = c.str(rc::BODY)?;
            let attrs = c
                .get(rc::ATTRIBUTES)?
                .as_map_opt()
                .ok_or_else(|| c.err(rc::ATTRIBUTES))?;
            let rattrs = c
                .get(rc::RESOURCE_ATTRIBUTES)?
                .as_map_opt()
                .ok_or_else(|| c.err(rc::RESOURCE_ATTRIBUTES))?;
            let trace = c.fixed(rc::TRACE_ID)?;
            let span = c.fixed(rc::SPAN_ID)?;
            for i in 0..batch.num_rows() {
                let p = params.value(i);
                let p = p.as_string::<i32>();
                out.push(LogRecord {
                    wal_id: wal.value(i).try_into().unwrap_or([0; 16]),
                    id: RecordId {
                        lsn: lsn.value(i),
                        index: index.value(i),
                    },
                    tenant: Tenant::new(tenant.value(i)),
                    time_unix_nano: u64::try_from(time.value(i)).unwrap_or(0),
                    observed_time_unix_nano: u64::try_from(observed.value(i)).unwrap_or(0),
                    severity_number: sev.value(i),
                    severity_text: sev_text.value(i).to_owned(),
                    template_key: tkey.value(i).try_into().unwrap_or([0; 16]),
                    template_id: tid.value(i),
                    template_version: tver.value(i),
                    params: (0..p.len()).map(|j| p.value(j)).collect(),
                    body: opt(body.is_valid(i), body.value(i).to_owned()),
                    attributes: string_pairs(attrs, i),
                    resource_attributes: string_pairs(rattrs, i)
                        .iter()
                        .map(|(k, v)| (k.to_owned(), v.to_owned()))
                        .collect(),
                    trace_id: if trace.is_valid(i) {
                        trace.value(i).try_into().ok()
                    } else {
                        None
                    },
                    span_id: if span.is_valid(i) {
                        span.value(i).try_into().ok()
                    } else {
                        None
                    },
                    // Not stored: a property of the buffer, not of the record.
                    audit_watermark: 0,
                });
            }
        }
    }
    Ok(out)
}

/// Every audit event below `<prefix>/audit/`, with its sequence number (duplicates included).
pub async fn read_audit_events(
    store: &dyn ObjectStore,
    prefix: &str,
) -> Result<Vec<(u64, AuditEvent)>, ReadError> {
    let mut out = Vec::new();
    for path in list_objects(store, prefix, "audit").await? {
        out.extend(read_audit_object(store, &path).await?);
    }
    Ok(out)
}

/// The audit events of one audit object, with their sequence numbers (what a reader that
/// follows the series object by object, such as the query crate's template registry, reads).
pub async fn read_audit_object(
    store: &dyn ObjectStore,
    path: &Path,
) -> Result<Vec<(u64, AuditEvent)>, ReadError> {
    let mut out = Vec::new();
    {
        let path = path.clone();
        for batch in batches(store, &path).await? {
            let c = Cols {
                batch: &batch,
                path: &path,
            };
            let seq = c.u64(ac::SEQ)?;
            let tenant = c.str(ac::TENANT)?;
            let ts = c.ts(ac::TIMESTAMP)?;
            let kind = c.str(ac::KIND)?;
            let tkey = c.fixed(ac::TEMPLATE_KEY)?;
            let tid = c.u64(ac::TEMPLATE_ID)?;
            let ver = c.u32(ac::TEMPLATE_VERSION)?;
            let old_ver = c.u32(ac::OLD_TEMPLATE_VERSION)?;
            let tmpl = c.str(ac::TEMPLATE)?;
            let old_tmpl = c.str(ac::OLD_TEMPLATE)?;
            let lsn = c.u64(ac::RECORD_LSN)?;
            let index = c.u32(ac::RECORD_INDEX)?;
            let key = c.str(ac::PARTITION_KEY)?;
            let error = c.str(ac::ERROR)?;
            for i in 0..batch.num_rows() {
                let template_key: [u8; 16] = if tkey.is_valid(i) {
                    tkey.value(i).try_into().unwrap_or([0; 16])
                } else {
                    [0; 16]
                };
                let kind = match kind.value(i) {
                    "template_created" => AuditKind::TemplateCreated {
                        template_key,
                        template_id: tid.value(i),
                        version: ver.value(i),
                        template: tmpl.value(i).to_owned(),
                    },
                    "template_defined" => AuditKind::TemplateDefined {
                        template_key,
                        template_id: tid.value(i),
                        version: ver.value(i),
                        template: tmpl.value(i).to_owned(),
                    },
                    "template_widened" => AuditKind::TemplateWidened {
                        template_key,
                        template_id: tid.value(i),
                        old_version: old_ver.value(i),
                        new_version: ver.value(i),
                        old_template: old_tmpl.value(i).to_owned(),
                        new_template: tmpl.value(i).to_owned(),
                    },
                    _ => AuditKind::RecordQuarantined {
                        record_id: RecordId {
                            lsn: lsn.value(i),
                            index: index.value(i),
                        },
                        partition_key: key.value(i).to_owned(),
                        error: error.value(i).to_owned(),
                    },
                };
                out.push((
                    seq.value(i),
                    AuditEvent {
                        tenant: Tenant::new(tenant.value(i)),
                        timestamp_unix_nanos: i128::from(ts.value(i)),
                        kind,
                    },
                ));
            }
        }
    }
    Ok(out)
}

/// A tenant's template texts by key, read from the audit series.
pub type TemplateTexts = std::collections::BTreeMap<(Tenant, [u8; 16]), String>;

/// How a reader joins records to their templates: every (tenant, key) the audit `events` define,
/// with its text. A key defined twice with the same text (a replayed definition) counts once;
/// a key defined with two different texts is returned in the error with both texts, since no
/// record naming it could be rebuilt with confidence (it never happens unless a store mixes in
/// objects written under another key scheme).
pub fn template_texts<'e>(
    events: impl IntoIterator<Item = &'e AuditEvent>,
) -> Result<TemplateTexts, Vec<String>> {
    let mut texts = TemplateTexts::new();
    let mut conflicts = Vec::new();
    for event in events {
        let Some((key, text)) = event.kind.definition() else {
            continue;
        };
        match texts.entry((event.tenant.clone(), key)) {
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(text.to_owned());
            }
            std::collections::btree_map::Entry::Occupied(o) if o.get() != text => {
                conflicts.push(format!(
                    "tenant {} key {}: `{}` and `{text}`",
                    event.tenant,
                    hex(&key),
                    o.get()
                ));
            }
            std::collections::btree_map::Entry::Occupied(_) => {}
        }
    }
    if conflicts.is_empty() {
        Ok(texts)
    } else {
        Err(conflicts)
    }
}

/// Lower-case hex of a key, as operators see it.
pub fn hex(key: &[u8; 16]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}
