//! Parquet encoding of record partitions and audit groups, and finding poisoned records.
//!
//! A record partition is written by one synchronous `ArrowWriter` into a `Vec<u8>`, then stored
//! with one put. The writer is fed consecutive Arrow `RecordBatch`es of at most
//! [`ENCODE_CHUNK_BYTES`] of strings each, so no partition, however large, reaches the i32
//! offset limit of Arrow's string and list arrays. The record schema is readable by any Parquet
//! reader; the stable record id is (`wal_id`, `record_lsn`, `record_index`).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use arrow_array::builder::{
    FixedSizeBinaryBuilder, ListBuilder, MapBuilder, StringBuilder, TimestampNanosecondBuilder,
};
use arrow_array::{
    ArrayRef, Int32Array, RecordBatch, StringArray, TimestampNanosecondArray, UInt32Array,
    UInt64Array,
};
use arrow_schema::{ArrowError, Field, Schema, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::errors::ParquetError;
use parquet::file::properties::{EnabledStatistics, WriterProperties, WriterPropertiesBuilder};
use parquet::schema::types::ColumnPath;

use crate::audit::{AuditEvent, AuditKind};
use crate::types::{LogRecord, RecordId};

/// Record schema column names (any Parquet reader sees these).
pub mod columns {
    /// Tenant name (Utf8).
    pub const TENANT: &str = "tenant";
    /// Identity of the WAL that holds the record's frame (FixedSizeBinary(16)): the record id
    /// is (`wal_id`, `record_lsn`, `record_index`), unique across nodes sharing a store.
    pub const WAL_ID: &str = "wal_id";
    /// WAL frame lsn of the record id (UInt64).
    pub const RECORD_LSN: &str = "record_lsn";
    /// Index within the frame of the record id (UInt32).
    pub const RECORD_INDEX: &str = "record_index";
    /// Event time (Timestamp ns, UTC).
    pub const TIME: &str = "time";
    /// Observation time (Timestamp ns, UTC).
    pub const OBSERVED_TIME: &str = "observed_time";
    /// OTLP severity number (Int32).
    pub const SEVERITY_NUMBER: &str = "severity_number";
    /// OTLP severity text (Utf8).
    pub const SEVERITY_TEXT: &str = "severity_text";
    /// Content-addressed key of the record's template text (FixedSizeBinary(16)): join it to
    /// the audit series' `template_key` of the same tenant.
    pub const TEMPLATE_KEY: &str = "template_key";
    /// Template id (UInt64, lineage).
    pub const TEMPLATE_ID: &str = "template_id";
    /// Template version (UInt32, lineage).
    pub const TEMPLATE_VERSION: &str = "template_version";
    /// Template parameters (`List<Utf8>`).
    pub const PARAMS: &str = "params";
    /// Original body, when kept (nullable Utf8).
    pub const BODY: &str = "body";
    /// Log attributes (`Map<Utf8, Utf8>`).
    pub const ATTRIBUTES: &str = "attributes";
    /// Resource attributes (`Map<Utf8, Utf8>`).
    pub const RESOURCE_ATTRIBUTES: &str = "resource_attributes";
    /// Trace id (nullable FixedSizeBinary(16)).
    pub const TRACE_ID: &str = "trace_id";
    /// Span id (nullable FixedSizeBinary(8)).
    pub const SPAN_ID: &str = "span_id";
}

/// Why the encoder rejected content.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    /// The observed time does not fit the nanosecond timestamp column.
    #[error("observed time overflow: record {id} observed_time_unix_nano {nanos} is past i64::MAX")]
    ObservedTimeOverflow {
        /// The record.
        id: RecordId,
        /// The value that did not fit.
        nanos: u64,
    },
    /// The event time does not fit the nanosecond timestamp column (normally caught earlier by
    /// [`PartitionKey::derive`](crate::PartitionKey::derive)).
    #[error("time overflow: record {id} time_unix_nano {nanos} is past i64::MAX")]
    TimeOverflow {
        /// The record.
        id: RecordId,
        /// The value that did not fit.
        nanos: u64,
    },
    /// One record's string data exceeds what a Utf8 column chunk can address (i32 offsets).
    #[error(
        "value too large: record {id} carries {bytes} bytes of strings, over the i32 offset range"
    )]
    ValueTooLarge {
        /// The record.
        id: RecordId,
        /// Its string bytes.
        bytes: usize,
    },
    /// Arrow refused to build a column or batch. (The cause is in the message, not a `source`:
    /// encode errors are kept as text in quarantine events.)
    #[error("arrow rejected the batch: {0}")]
    Arrow(ArrowError),
    /// The Parquet writer failed.
    #[error("parquet rejected the batch: {0}")]
    Parquet(ParquetError),
    /// Arrow or the Parquet writer panicked; the panic is contained here and the records are
    /// handled like any other encode failure (bisected, the culprits quarantined).
    #[error("the encoder panicked: {message}")]
    Panicked {
        /// The panic's message, when it had one.
        message: String,
    },
}

impl From<ArrowError> for EncodeError {
    fn from(e: ArrowError) -> Self {
        EncodeError::Arrow(e)
    }
}

impl From<ParquetError> for EncodeError {
    fn from(e: ParquetError) -> Self {
        EncodeError::Parquet(e)
    }
}

impl EncodeError {
    /// The `error.type` label a quarantine for this reason is counted under.
    pub fn error_type(&self) -> &'static str {
        match self {
            Self::ObservedTimeOverflow { .. } => "observed_time_overflow",
            Self::TimeOverflow { .. } => "time_overflow",
            Self::ValueTooLarge { .. } => "value_too_large",
            Self::Arrow(_) => "arrow",
            Self::Parquet(_) => "parquet",
            Self::Panicked { .. } => "encoder_panic",
        }
    }
}

/// Record columns whose values are (nearly) unique per row, written without a dictionary.
///
/// A dictionary pays off where values repeat (tenant, severity, template id, attribute keys);
/// on a column of unique values the writer hashes and compares every value for nothing until
/// its dictionary page outgrows its limit and it falls back to plain encoding anyway. A kept
/// body (a low-confidence line) costs most per row: hundreds of bytes, all distinct. The
/// fixed-size binary columns (WAL id, template key, trace and span ids) are written without a
/// dictionary already.
pub const PLAIN_COLUMNS: [&str; 5] = [
    columns::BODY,
    columns::TIME,
    columns::OBSERVED_TIME,
    columns::RECORD_LSN,
    columns::RECORD_INDEX,
];

/// Record columns whose values repeat in some traffic and not in other, written with a small
/// dictionary ([`MIXED_DICTIONARY_BYTES`]): a file whose values repeat keeps it, one whose
/// dictionary outgrows it falls back to plain encoding for the rest of the column.
///
/// Parameters and attribute values are status codes, methods and host names in one service's
/// logs and request ids, addresses and durations in another's. Under Parquet's own limit (1 MiB)
/// the writer hashes and compares every value of a partition of mostly unique ones into a
/// dictionary it hardly uses; plain, ZSTD still finds their repeats.
/// `ourios-loadgen encode --plain COLUMN` measures either choice against this one.
pub const MIXED_DICTIONARY_COLUMNS: [&str; 2] = ["params.list.item", "attributes.entries.values"];

/// The dictionary page size past which a [`MIXED_DICTIONARY_COLUMNS`] column falls back to
/// plain encoding. A few thousand distinct short values fit: the repeating values of one
/// service's logs keep their dictionary.
pub const MIXED_DICTIONARY_BYTES: usize = 64 << 10;

/// Record columns written without min/max statistics: no reader prunes on them.
///
/// Statistics pay off on the columns a scan filters by (`time`, `severity_number`, the tenant
/// and template columns): a row group or page whose range misses the filter is skipped. On a
/// string column nobody prunes by, the writer compares every value against the running minimum
/// and maximum of its page and chunk for nothing; on a map or list it cannot even be used (no
/// reader prunes on a nested column's leaves). A record's attributes are most of its strings.
pub const UNPRUNED_COLUMNS: [&str; 6] = [
    "params.list.item",
    columns::BODY,
    "attributes.entries.keys",
    "attributes.entries.values",
    "resource_attributes.entries.keys",
    "resource_attributes.entries.values",
];

/// The properties record files are written with: ZSTD (default level) or uncompressed, no
/// dictionary on [`PLAIN_COLUMNS`], a small one on [`MIXED_DICTIONARY_COLUMNS`] and no
/// statistics on [`UNPRUNED_COLUMNS`].
pub fn record_writer_properties(zstd: bool) -> WriterProperties {
    let mut builder = properties_builder(zstd);
    for column in PLAIN_COLUMNS {
        builder = builder.set_column_dictionary_enabled(leaf_path(column), false);
    }
    for column in MIXED_DICTIONARY_COLUMNS {
        builder = builder
            .set_column_dictionary_page_size_limit(leaf_path(column), MIXED_DICTIONARY_BYTES);
    }
    for column in UNPRUNED_COLUMNS {
        builder = builder.set_column_statistics_enabled(leaf_path(column), EnabledStatistics::None);
    }
    builder.build()
}

/// A leaf column's path from its dotted name (`attributes.entries.values`).
fn leaf_path(name: &str) -> ColumnPath {
    ColumnPath::from(name.split('.').map(str::to_owned).collect::<Vec<_>>())
}

/// Writer properties: ZSTD (default level) or uncompressed.
fn properties_builder(zstd: bool) -> WriterPropertiesBuilder {
    let compression = if zstd {
        Compression::ZSTD(ZstdLevel::default())
    } else {
        Compression::UNCOMPRESSED
    };
    WriterProperties::builder().set_compression(compression)
}

fn nanos_i64(nanos: u64) -> Option<i64> {
    i64::try_from(nanos).ok()
}

/// Check one record against everything the encoder requires of a single row.
///
/// A record that passes can still be rejected as part of a batch only by a failure that is not
/// its own (which [`find_poisoned`] tells apart by bisecting).
pub fn validate_record(record: &LogRecord) -> Result<(), EncodeError> {
    if nanos_i64(record.time_unix_nano).is_none() {
        return Err(EncodeError::TimeOverflow {
            id: record.id,
            nanos: record.time_unix_nano,
        });
    }
    if nanos_i64(record.observed_time_unix_nano).is_none() {
        return Err(EncodeError::ObservedTimeOverflow {
            id: record.id,
            nanos: record.observed_time_unix_nano,
        });
    }
    let bytes = record.estimated_bytes();
    if i32::try_from(bytes).is_err() {
        return Err(EncodeError::ValueTooLarge {
            id: record.id,
            bytes,
        });
    }
    Ok(())
}

fn string_map<'a, P: IntoIterator<Item = (&'a str, &'a str)>>(
    rows: impl Iterator<Item = P>,
) -> Result<ArrayRef, ArrowError> {
    let mut b = MapBuilder::new(None, StringBuilder::new(), StringBuilder::new());
    for pairs in rows {
        for (k, v) in pairs {
            b.keys().append_value(k);
            b.values().append_value(v);
        }
        b.append(true)?;
    }
    Ok(Arc::new(b.finish()))
}

fn batch_of(columns: Vec<(&str, ArrayRef, bool)>) -> Result<RecordBatch, ArrowError> {
    let fields: Vec<Field> = columns
        .iter()
        .map(|(name, array, nullable)| Field::new(*name, array.data_type().clone(), *nullable))
        .collect();
    let schema = Arc::new(Schema::new(fields));
    RecordBatch::try_new(schema, columns.into_iter().map(|(_, a, _)| a).collect())
}

/// Build the Arrow batch of `records` in the record schema.
pub(crate) fn record_batch(records: &[LogRecord]) -> Result<RecordBatch, EncodeError> {
    for r in records {
        validate_record(r)?;
    }
    let mut time = TimestampNanosecondBuilder::with_capacity(records.len());
    let mut observed = TimestampNanosecondBuilder::with_capacity(records.len());
    for r in records {
        // Validated above: both fit an i64.
        time.append_option(nanos_i64(r.time_unix_nano));
        observed.append_option(nanos_i64(r.observed_time_unix_nano));
    }
    let mut params = ListBuilder::new(StringBuilder::new());
    for r in records {
        for p in &r.params {
            params.values().append_value(p);
        }
        params.append(true);
    }
    let mut wal_id = FixedSizeBinaryBuilder::with_capacity(records.len(), 16);
    let mut template_key = FixedSizeBinaryBuilder::with_capacity(records.len(), 16);
    let mut trace = FixedSizeBinaryBuilder::new(16);
    let mut span = FixedSizeBinaryBuilder::new(8);
    for r in records {
        wal_id.append_value(r.wal_id)?;
        template_key.append_value(r.template_key)?;
        match &r.trace_id {
            Some(id) => trace.append_value(id)?,
            None => trace.append_null(),
        }
        match &r.span_id {
            Some(id) => span.append_value(id)?,
            None => span.append_null(),
        }
    }
    let columns: Vec<(&str, ArrayRef, bool)> = vec![
        (
            columns::TENANT,
            Arc::new(StringArray::from_iter_values(
                records.iter().map(|r| r.tenant.as_str()),
            )),
            false,
        ),
        (columns::WAL_ID, Arc::new(wal_id.finish()), false),
        (
            columns::RECORD_LSN,
            Arc::new(UInt64Array::from_iter_values(
                records.iter().map(|r| r.id.lsn),
            )),
            false,
        ),
        (
            columns::RECORD_INDEX,
            Arc::new(UInt32Array::from_iter_values(
                records.iter().map(|r| r.id.index),
            )),
            false,
        ),
        (
            columns::TIME,
            Arc::new(time.finish().with_timezone_utc()),
            false,
        ),
        (
            columns::OBSERVED_TIME,
            Arc::new(observed.finish().with_timezone_utc()),
            false,
        ),
        (
            columns::SEVERITY_NUMBER,
            Arc::new(Int32Array::from_iter_values(
                records.iter().map(|r| r.severity_number),
            )),
            false,
        ),
        (
            columns::SEVERITY_TEXT,
            Arc::new(StringArray::from_iter_values(
                records.iter().map(|r| r.severity_text.as_str()),
            )),
            false,
        ),
        (
            columns::TEMPLATE_KEY,
            Arc::new(template_key.finish()),
            false,
        ),
        (
            columns::TEMPLATE_ID,
            Arc::new(UInt64Array::from_iter_values(
                records.iter().map(|r| r.template_id),
            )),
            false,
        ),
        (
            columns::TEMPLATE_VERSION,
            Arc::new(UInt32Array::from_iter_values(
                records.iter().map(|r| r.template_version),
            )),
            false,
        ),
        (columns::PARAMS, Arc::new(params.finish()), false),
        (
            columns::BODY,
            Arc::new(StringArray::from_iter(
                records.iter().map(|r| r.body.as_deref()),
            )),
            true,
        ),
        (
            columns::ATTRIBUTES,
            string_map(records.iter().map(|r| &r.attributes))?,
            false,
        ),
        (
            columns::RESOURCE_ATTRIBUTES,
            string_map(records.iter().map(|r| {
                r.resource_attributes
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
            }))?,
            false,
        ),
        (columns::TRACE_ID, Arc::new(trace.finish()), true),
        (columns::SPAN_ID, Arc::new(span.finish()), true),
    ];
    Ok(batch_of(columns)?)
}

/// Writes the audit series' batch (dictionaries on every column: its rows are few).
fn write_parquet(batch: &RecordBatch, zstd: bool) -> Result<Vec<u8>, EncodeError> {
    let properties = properties_builder(zstd).build();
    let mut writer = ArrowWriter::try_new(Vec::new(), batch.schema(), Some(properties))?;
    writer.write(batch)?;
    Ok(writer.into_inner()?)
}

/// The most record bytes (by [`LogRecord::estimated_bytes`], strings included) one Arrow batch
/// of a partition's encode holds; a batch holds one record at least. Far below the 2 GiB an
/// Arrow string or list array can address, so a partition of any size encodes, and the Arrow
/// memory of an encode beside its records and output stays bounded.
pub const ENCODE_CHUNK_BYTES: usize = 64 << 20;

/// `records` cut into consecutive runs of at most `limit` estimated bytes (one record at least).
fn chunks(records: &[LogRecord], limit: usize) -> impl Iterator<Item = &[LogRecord]> {
    let mut rest = records;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut bytes = 0usize;
        let mut n = 0;
        for r in rest {
            bytes = bytes.saturating_add(r.estimated_bytes());
            if n > 0 && bytes > limit {
                break;
            }
            n += 1;
        }
        let (chunk, tail) = rest.split_at(n);
        rest = tail;
        Some(chunk)
    })
}

/// Encode `records` as one Parquet file (ZSTD unless `zstd` is false), fed to the writer in
/// batches of at most [`ENCODE_CHUNK_BYTES`]. A panic in Arrow or the writer is contained and
/// returned as [`EncodeError::Panicked`].
pub fn encode_records(records: &[LogRecord], zstd: bool) -> Result<Vec<u8>, EncodeError> {
    encode_records_in(records, record_writer_properties(zstd), ENCODE_CHUNK_BYTES)
}

/// [`encode_records`] with other writer properties than [`record_writer_properties`]: what a
/// benchmark compares the node's choices against.
pub fn encode_records_with(
    records: &[LogRecord],
    properties: WriterProperties,
) -> Result<Vec<u8>, EncodeError> {
    encode_records_in(records, properties, ENCODE_CHUNK_BYTES)
}

/// [`encode_records_with`] with batches of at most `chunk_bytes`.
fn encode_records_in(
    records: &[LogRecord],
    properties: WriterProperties,
    chunk_bytes: usize,
) -> Result<Vec<u8>, EncodeError> {
    // Everything the closure touches is its own or read-only: nothing is left half-changed.
    catch_unwind(AssertUnwindSafe(|| {
        // Test hook (compiled out unless `failpoints`): Arrow or the writer panics.
        fail::fail_point!("sinks::encode::records", |_| panic!(
            "encoder panic injected by failpoint"
        ));
        let mut batches = chunks(records, chunk_bytes);
        let first = record_batch(batches.next().unwrap_or_default())?;
        let mut writer = ArrowWriter::try_new(Vec::new(), first.schema(), Some(properties))?;
        writer.write(&first)?;
        drop(first);
        for chunk in batches {
            writer.write(&record_batch(chunk)?)?;
        }
        Ok(writer.into_inner()?)
    }))
    .unwrap_or_else(|panic| {
        Err(EncodeError::Panicked {
            message: ourios_recoverable::panic_message(panic.as_ref()).to_owned(),
        })
    })
}

/// Find the records the encoder rejects: each per-record check first, then, if the rest still
/// fails as a batch, bisection down to single records. Returns `(index, error)` pairs in index
/// order; an empty result means `records` encodes as a whole.
pub fn find_poisoned(records: &[LogRecord], zstd: bool) -> Vec<(usize, EncodeError)> {
    let mut poisoned: Vec<(usize, EncodeError)> = Vec::new();
    let mut clean: Vec<usize> = Vec::new();
    for (i, r) in records.iter().enumerate() {
        match validate_record(r) {
            Ok(()) => clean.push(i),
            Err(e) => poisoned.push((i, e)),
        }
    }
    bisect(records, &clean, zstd, &mut poisoned);
    poisoned.sort_by_key(|(i, _)| *i);
    poisoned
}

fn bisect(records: &[LogRecord], idx: &[usize], zstd: bool, out: &mut Vec<(usize, EncodeError)>) {
    if idx.is_empty() {
        return;
    }
    let subset: Vec<LogRecord> = idx.iter().map(|&i| records[i].clone()).collect();
    match encode_records(&subset, zstd) {
        Ok(_) => {}
        Err(e) if idx.len() == 1 => out.push((idx[0], e)),
        Err(_) => {
            let (left, right) = idx.split_at(idx.len() / 2);
            bisect(records, left, zstd, out);
            bisect(records, right, zstd, out);
        }
    }
}

/// Audit schema column names.
pub mod audit_columns {
    /// Audit-sink sequence number (UInt64).
    pub const SEQ: &str = "seq";
    /// Tenant (Utf8).
    pub const TENANT: &str = "tenant";
    /// Event time (Timestamp ns, UTC).
    pub const TIMESTAMP: &str = "timestamp";
    /// `template_created`, `template_widened`, `template_defined` or `record_quarantined`
    /// (Utf8).
    pub const KIND: &str = "kind";
    /// The key of the template text the event defines (nullable FixedSizeBinary(16); null for
    /// a quarantine). A key names one text forever: readers take distinct (tenant, key) rows.
    pub const TEMPLATE_KEY: &str = "template_key";
    /// Template id (nullable UInt64).
    pub const TEMPLATE_ID: &str = "template_id";
    /// Template version created, or the new version of a widening (nullable UInt32).
    pub const TEMPLATE_VERSION: &str = "template_version";
    /// The old version of a widening (nullable UInt32).
    pub const OLD_TEMPLATE_VERSION: &str = "old_template_version";
    /// Template text created, or the new text of a widening (nullable Utf8).
    pub const TEMPLATE: &str = "template";
    /// The old text of a widening (nullable Utf8).
    pub const OLD_TEMPLATE: &str = "old_template";
    /// Quarantined record's frame lsn (nullable UInt64).
    pub const RECORD_LSN: &str = "record_lsn";
    /// Quarantined record's index (nullable UInt32).
    pub const RECORD_INDEX: &str = "record_index";
    /// Quarantined record's partition key text (nullable Utf8).
    pub const PARTITION_KEY: &str = "partition_key";
    /// Quarantine error text (nullable Utf8).
    pub const ERROR: &str = "error";
}

/// Encode audit events (with their sequence numbers) as one Parquet file.
///
/// The caller derived the group's partition, so every timestamp fits `0..=i64::MAX`.
pub fn encode_audit(events: &[(u64, AuditEvent)], zstd: bool) -> Result<Vec<u8>, EncodeError> {
    write_parquet(&audit_batch(events)?, zstd)
}

/// The Arrow schema of every record object (what a reader registers its tables with, so an
/// empty store or a tenant without objects still has a table). The same builder as the
/// encoder's: the two cannot drift.
pub fn record_schema() -> SchemaRef {
    match record_batch(&[]) {
        Ok(batch) => batch.schema(),
        // An empty batch has no row to refuse; a failure here is a change to the builder.
        Err(e) => unreachable!("the empty record batch is valid: {e}"),
    }
}

/// The Arrow schema of every audit object (see [`record_schema`]).
pub fn audit_schema() -> SchemaRef {
    match audit_batch(&[]) {
        Ok(batch) => batch.schema(),
        Err(e) => unreachable!("the empty audit batch is valid: {e}"),
    }
}

fn audit_batch(events: &[(u64, AuditEvent)]) -> Result<RecordBatch, EncodeError> {
    let n = events.len();
    let mut ts = Vec::with_capacity(n);
    let mut kind = Vec::with_capacity(n);
    let mut template_key = FixedSizeBinaryBuilder::with_capacity(n, 16);
    let mut template_id = Vec::with_capacity(n);
    let mut version = Vec::with_capacity(n);
    let mut old_version = Vec::with_capacity(n);
    let mut template: Vec<Option<&str>> = Vec::with_capacity(n);
    let mut old_template: Vec<Option<&str>> = Vec::with_capacity(n);
    let mut lsn = Vec::with_capacity(n);
    let mut index = Vec::with_capacity(n);
    let mut key: Vec<Option<&str>> = Vec::with_capacity(n);
    let mut error: Vec<Option<&str>> = Vec::with_capacity(n);
    for (_, e) in events {
        ts.push(i64::try_from(e.timestamp_unix_nanos).ok());
        kind.push(e.kind.name());
        match e.kind.definition() {
            Some((k, _)) => template_key.append_value(k)?,
            None => template_key.append_null(),
        }
        match &e.kind {
            AuditKind::TemplateCreated {
                template_id: id,
                version: v,
                template: t,
                ..
            }
            | AuditKind::TemplateDefined {
                template_id: id,
                version: v,
                template: t,
                ..
            } => {
                template_id.push(Some(*id));
                version.push(Some(*v));
                old_version.push(None);
                template.push(Some(t.as_str()));
                old_template.push(None);
                lsn.push(None);
                index.push(None);
                key.push(None);
                error.push(None);
            }
            AuditKind::TemplateWidened {
                template_id: id,
                old_version: ov,
                new_version: nv,
                old_template: ot,
                new_template: nt,
                ..
            } => {
                template_id.push(Some(*id));
                version.push(Some(*nv));
                old_version.push(Some(*ov));
                template.push(Some(nt.as_str()));
                old_template.push(Some(ot.as_str()));
                lsn.push(None);
                index.push(None);
                key.push(None);
                error.push(None);
            }
            AuditKind::RecordQuarantined {
                record_id,
                partition_key,
                error: err,
            } => {
                template_id.push(None);
                version.push(None);
                old_version.push(None);
                template.push(None);
                old_template.push(None);
                lsn.push(Some(record_id.lsn));
                index.push(Some(record_id.index));
                key.push(Some(partition_key.as_str()));
                error.push(Some(err.as_str()));
            }
        }
    }
    let columns: Vec<(&str, ArrayRef, bool)> = vec![
        (
            audit_columns::SEQ,
            Arc::new(UInt64Array::from_iter_values(
                events.iter().map(|(s, _)| *s),
            )),
            false,
        ),
        (
            audit_columns::TENANT,
            Arc::new(StringArray::from_iter_values(
                events.iter().map(|(_, e)| e.tenant.as_str()),
            )),
            false,
        ),
        (
            audit_columns::TIMESTAMP,
            Arc::new(TimestampNanosecondArray::from(ts).with_timezone_utc()),
            true,
        ),
        (
            audit_columns::KIND,
            Arc::new(StringArray::from_iter_values(kind)),
            false,
        ),
        (
            audit_columns::TEMPLATE_KEY,
            Arc::new(template_key.finish()),
            true,
        ),
        (
            audit_columns::TEMPLATE_ID,
            Arc::new(UInt64Array::from(template_id)),
            true,
        ),
        (
            audit_columns::TEMPLATE_VERSION,
            Arc::new(UInt32Array::from(version)),
            true,
        ),
        (
            audit_columns::OLD_TEMPLATE_VERSION,
            Arc::new(UInt32Array::from(old_version)),
            true,
        ),
        (
            audit_columns::TEMPLATE,
            Arc::new(StringArray::from(template)),
            true,
        ),
        (
            audit_columns::OLD_TEMPLATE,
            Arc::new(StringArray::from(old_template)),
            true,
        ),
        (
            audit_columns::RECORD_LSN,
            Arc::new(UInt64Array::from(lsn)),
            true,
        ),
        (
            audit_columns::RECORD_INDEX,
            Arc::new(UInt32Array::from(index)),
            true,
        ),
        (
            audit_columns::PARTITION_KEY,
            Arc::new(StringArray::from(key)),
            true,
        ),
        (
            audit_columns::ERROR,
            Arc::new(StringArray::from(error)),
            true,
        ),
    ];
    Ok(batch_of(columns)?)
}

#[cfg(test)]
pub(crate) mod tests {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::file::reader::{FileReader, SerializedFileReader};

    use super::*;
    use crate::types::{SharedAttributes, Tenant};

    /// A record of tenant `t` with `lsn` in its id, its params and its one attribute.
    pub(crate) fn record(lsn: u64, body: String) -> LogRecord {
        LogRecord {
            wal_id: [7; 16],
            id: RecordId { lsn, index: 0 },
            tenant: Tenant::new("t"),
            time_unix_nano: 1_700_000_000_000_000_000,
            observed_time_unix_nano: 0,
            severity_number: 9,
            severity_text: "INFO".to_owned(),
            template_key: [1; 16],
            template_id: 0,
            template_version: 0,
            params: vec![format!("p{lsn}")].into(),
            body: Some(body),
            attributes: [("k".to_owned(), lsn.to_string())].into_iter().collect(),
            resource_attributes: Default::default(),
            trace_id: None,
            span_id: None,
            audit_watermark: 0,
        }
    }

    /// The record lsns of an encoded file, in row order, and its row-group count.
    fn lsns_of(bytes: Vec<u8>) -> (Vec<u64>, usize) {
        let bytes = bytes::Bytes::from(bytes);
        let groups = SerializedFileReader::new(bytes.clone())
            .unwrap()
            .metadata()
            .num_row_groups();
        let builder = ParquetRecordBatchReaderBuilder::try_new(bytes).unwrap();
        let mask = parquet::arrow::ProjectionMask::columns(
            builder.parquet_schema(),
            [columns::RECORD_LSN],
        );
        let mut lsns = Vec::new();
        for batch in builder.with_projection(mask).build().unwrap() {
            let batch = batch.unwrap();
            let col = batch
                .column(0)
                .as_any()
                .downcast_ref::<UInt64Array>()
                .unwrap();
            lsns.extend(col.values().iter().copied());
        }
        (lsns, groups)
    }

    /// A record file's records, read back through the store's reader from an in-memory store.
    fn read_back(file: bytes::Bytes) -> Vec<LogRecord> {
        let store = object_store::memory::InMemory::new();
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(async {
                let path = crate::store::object_path("", ["records", "t.parquet"]);
                use object_store::ObjectStoreExt as _;
                store.put(&path, file.into()).await.unwrap();
                crate::read::read_records(&store, "").await.unwrap()
            })
    }

    /// The unique-per-row columns are written without a dictionary, the repeating ones with one;
    /// every name in `PLAIN_COLUMNS` is a leaf column of the record file (a renamed column
    /// would otherwise silently get its dictionary back). Read back, the rows are the same.
    /// Mutation check (by hand): with the loop in `record_writer_properties` emptied, this
    /// fails on `body` carrying a dictionary.
    #[test]
    fn unique_columns_are_written_without_a_dictionary() {
        let records: Vec<LogRecord> = (1..=200)
            .map(|i| record(i, format!("request {i} served in {} ms", i * 7)))
            .collect();
        let bytes = bytes::Bytes::from(encode_records(&records, true).unwrap());
        let reader = SerializedFileReader::new(bytes.clone()).unwrap();
        let group = reader.metadata().row_group(0);
        let dictionary_of = |name: &str| {
            let chunk = group
                .columns()
                .iter()
                .find(|c| c.column_path().string() == name)
                .unwrap_or_else(|| panic!("no leaf column `{name}` in the record file"));
            chunk.dictionary_page_offset().is_some()
        };
        for name in PLAIN_COLUMNS {
            assert!(
                !dictionary_of(name),
                "`{name}` was written with a dictionary"
            );
        }
        for name in [
            columns::TENANT,
            columns::SEVERITY_TEXT,
            columns::SEVERITY_NUMBER,
        ] {
            assert!(dictionary_of(name), "`{name}` lost its dictionary");
        }
        // Read back through the store's reader: every record, every column, as written.
        assert_eq!(
            read_back(bytes),
            records,
            "the records read back byte for byte"
        );
    }

    /// A partition whose parameters and attribute values repeat keeps their dictionaries; one
    /// whose values are all distinct falls back to plain pages once the dictionary passes
    /// `MIXED_DICTIONARY_BYTES`, long before Parquet's own 1 MiB. Read back, both are the
    /// records written, byte for byte.
    /// Mutation check (by hand): with the `MIXED_DICTIONARY_COLUMNS` loop in
    /// `record_writer_properties` emptied, the distinct partition keeps a dictionary on every
    /// page and this fails.
    #[test]
    fn mixed_columns_keep_a_dictionary_only_while_values_repeat() {
        let partition = |value: &dyn Fn(u64) -> String| -> Vec<LogRecord> {
            (1..=4_000)
                .map(|i| {
                    let mut r = record(i, String::new());
                    r.body = None;
                    r.params = vec![value(i)].into();
                    r.attributes = [("request.id".to_owned(), value(i))].into_iter().collect();
                    r
                })
                .collect()
        };
        // 40 bytes a value in the dictionary page: 4 000 distinct ones are 160 KB.
        let distinct = partition(&|i| format!("{:036x}", u128::from(i) * 0x9e37_79b9_7f4a_7c15));
        let repeating = partition(&|i| format!("{:036x}", i % 50));
        let plain_pages_of = |records: &[LogRecord], column: &str| {
            let bytes = bytes::Bytes::from(encode_records(records, true).unwrap());
            let reader = SerializedFileReader::new(bytes.clone()).unwrap();
            // Every data page of the column, read back: how many are plain.
            let mut plain = 0;
            for g in 0..reader.num_row_groups() {
                let group = reader.get_row_group(g).unwrap();
                let index = (0..group.num_columns())
                    .find(|&c| group.metadata().column(c).column_path().string() == column)
                    .unwrap_or_else(|| panic!("no leaf column `{column}`"));
                for page in group.get_column_page_reader(index).unwrap() {
                    let page = page.unwrap();
                    if page.page_type() != parquet::basic::PageType::DICTIONARY_PAGE
                        && page.encoding() == parquet::basic::Encoding::PLAIN
                    {
                        plain += 1;
                    }
                }
            }
            assert_eq!(
                read_back(bytes),
                records,
                "the records read back byte for byte"
            );
            plain
        };
        for column in MIXED_DICTIONARY_COLUMNS {
            assert!(
                plain_pages_of(&distinct, column) > 0,
                "`{column}` of distinct values kept its dictionary on every page"
            );
            assert_eq!(
                plain_pages_of(&repeating, column),
                0,
                "`{column}` of repeating values lost its dictionary"
            );
        }
    }

    /// The columns no reader prunes on are written without statistics, the ones a scan filters
    /// by keep theirs; every name in `UNPRUNED_COLUMNS` is a leaf column of the record file (a
    /// renamed column would otherwise silently get its statistics back).
    /// Mutation check (by hand): with the statistics loop in `record_writer_properties`
    /// emptied, this fails on `params.list.item` carrying statistics.
    #[test]
    fn unpruned_columns_are_written_without_statistics() {
        let shared: SharedAttributes =
            Arc::from(vec![("service.name".to_owned(), "api".to_owned())]);
        let records: Vec<LogRecord> = (1..=50)
            .map(|i| LogRecord {
                resource_attributes: Arc::clone(&shared),
                time_unix_nano: 1_700_000_000_000_000_000 + i,
                ..record(i, format!("request {i}"))
            })
            .collect();
        let bytes = bytes::Bytes::from(encode_records(&records, true).unwrap());
        let reader = SerializedFileReader::new(bytes).unwrap();
        let group = reader.metadata().row_group(0);
        let statistics_of = |name: &str| {
            group
                .columns()
                .iter()
                .find(|c| c.column_path().string() == name)
                .unwrap_or_else(|| panic!("no leaf column `{name}` in the record file"))
                .statistics()
                .is_some()
        };
        for name in UNPRUNED_COLUMNS {
            assert!(!statistics_of(name), "`{name}` was written with statistics");
        }
        for name in [
            columns::TIME,
            columns::OBSERVED_TIME,
            columns::SEVERITY_NUMBER,
            columns::TENANT,
            columns::TEMPLATE_ID,
        ] {
            assert!(statistics_of(name), "`{name}` lost its statistics");
        }
    }

    /// Chunks cover the records in order, each within the limit unless it is one record.
    /// Proves the schema readers register (`record_schema`, `audit_schema`) is the one the
    /// encoder writes, field for field (name, type, nullability).
    #[test]
    fn published_schemas_are_the_written_ones() {
        let records = vec![record(1, "a".into()), record(2, "b".into())];
        let bytes = encode_records(&records, true).unwrap();
        let written = ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(bytes))
            .unwrap()
            .schema()
            .clone();
        assert_eq!(written.fields(), record_schema().fields());
        let events = vec![(
            1,
            AuditEvent {
                tenant: Tenant::new("t"),
                timestamp_unix_nanos: 5,
                kind: AuditKind::TemplateCreated {
                    template_key: [1; 16],
                    template_id: 1,
                    version: 1,
                    template: "a <*>".into(),
                },
            },
        )];
        let bytes = encode_audit(&events, true).unwrap();
        let written = ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(bytes))
            .unwrap()
            .schema()
            .clone();
        assert_eq!(written.fields(), audit_schema().fields());
    }

    #[test]
    fn chunks_cover_in_order_within_the_limit() {
        let records: Vec<LogRecord> = (1..=40)
            .map(|i| record(i, "x".repeat((i as usize * 37) % 300)))
            .collect();
        for limit in [0, 1, 500, 2_000, usize::MAX] {
            let parts: Vec<&[LogRecord]> = chunks(&records, limit).collect();
            let flat: Vec<u64> = parts
                .iter()
                .flat_map(|c| c.iter().map(|r| r.id.lsn))
                .collect();
            assert_eq!(flat, (1..=40).collect::<Vec<_>>(), "limit {limit}");
            for c in &parts {
                let bytes: usize = c.iter().map(LogRecord::estimated_bytes).sum();
                assert!(
                    c.len() == 1 || bytes <= limit,
                    "limit {limit}: {bytes} in {}",
                    c.len()
                );
            }
            if limit == usize::MAX {
                assert_eq!(parts.len(), 1);
            }
            if limit <= 1 {
                assert_eq!(parts.len(), 40, "one record per chunk");
            }
        }
        assert_eq!(chunks(&[], 10).count(), 0);
    }

    /// A partition fed in many batches is the same rows, in order, as one fed in one.
    #[test]
    fn a_chunked_encode_holds_every_record_in_order() {
        let records: Vec<LogRecord> = (1..=50).map(|i| record(i, format!("line {i}"))).collect();
        let (one, _) = lsns_of(
            encode_records_in(&records, record_writer_properties(true), usize::MAX).unwrap(),
        );
        let (many, _) =
            lsns_of(encode_records_in(&records, record_writer_properties(true), 1).unwrap());
        assert_eq!(one, (1..=50).collect::<Vec<_>>());
        assert_eq!(many, one);
    }

    /// A partition whose body column alone holds more than 2 GiB (what an Arrow string array's
    /// i32 offsets can address) encodes, and every record is in the file. Fed as one batch,
    /// Arrow's builder overflows its offsets (a panic, or an error) on every try.
    #[test]
    fn a_partition_past_two_gib_of_strings_encodes() {
        let body = "y".repeat(1 << 20);
        let n = 2_100u64; // 2 100 MiB of bodies: past i32::MAX bytes
        let records: Vec<LogRecord> = (1..=n).map(|i| record(i, body.clone())).collect();
        let total: usize = records
            .iter()
            .map(|r| r.body.as_ref().map_or(0, String::len))
            .sum();
        assert!(
            i32::try_from(total).is_err(),
            "the bodies pass the i32 offset range"
        );
        let bytes = encode_records(&records, true).expect("a partition of any size encodes");
        drop(records);
        let (lsns, groups) = lsns_of(bytes);
        assert_eq!(lsns, (1..=n).collect::<Vec<_>>());
        assert!(groups >= 1);
    }
}
