//! A store written the way the node writes it: lines mined by the real miner, records and
//! audit events encoded by the sinks' encoders, put at the node's object paths.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use ourios_miner::{FixedClock, MinerConfig, TenantMiner};
use ourios_sinks::{AuditEvent, AuditKind, LogRecord, RecordId, Tenant};

pub(crate) const HOUR: i64 = 3_600_000_000_000;
/// 2026-12-01T00:00:00Z.
pub(crate) const DAY0: i64 = 1_764_547_200_000_000_000;

/// One line to store: (time ns, severity number, line, attributes).
#[derive(Debug, Clone)]
pub(crate) struct Line {
    pub(crate) time: i64,
    pub(crate) severity: i32,
    pub(crate) severity_text: String,
    pub(crate) text: String,
    pub(crate) attributes: Vec<(String, String)>,
    pub(crate) service: String,
}

pub(crate) fn line(time: i64, text: &str) -> Line {
    Line {
        time,
        severity: 9,
        severity_text: String::new(),
        text: text.to_owned(),
        attributes: Vec::new(),
        service: "api".into(),
    }
}

/// A tenant's miner and the next record id.
pub(crate) struct Writer {
    pub(crate) store: Arc<InMemory>,
    miners: HashMap<String, TenantMiner>,
    next_lsn: u64,
    names: AtomicUsize,
    /// Every stored record's line by (tenant, id): what a reader must give back.
    pub(crate) expected: BTreeMap<(String, RecordId), String>,
}

impl Writer {
    pub(crate) fn new() -> Self {
        Self {
            store: Arc::new(InMemory::new()),
            miners: HashMap::new(),
            next_lsn: 1,
            names: AtomicUsize::new(0),
            expected: BTreeMap::new(),
        }
    }

    fn name(&self) -> String {
        format!("{:08}.parquet", self.names.fetch_add(1, Ordering::Relaxed))
    }

    /// Mine `lines` for `tenant`; returns the records and the audit events defining their keys.
    pub(crate) fn mine(
        &mut self,
        tenant: &str,
        lines: &[Line],
    ) -> (Vec<LogRecord>, Vec<(u64, AuditEvent)>) {
        let miner = self.miners.entry(tenant.to_owned()).or_insert_with(|| {
            TenantMiner::new(
                tenant,
                MinerConfig::default(),
                Arc::new(FixedClock::new(DAY0.into())),
            )
        });
        let lsn = self.next_lsn;
        self.next_lsn += 1;
        let mut records = Vec::new();
        let mut events = Vec::new();
        for (index, l) in lines.iter().enumerate() {
            let mined = miner.ingest(&l.text);
            if let Some(e) = mined.event {
                events.push((
                    miner.next_event_seq(),
                    AuditEvent {
                        tenant: Tenant::new(tenant),
                        timestamp_unix_nanos: DAY0.into(),
                        kind: AuditKind::TemplateDefined {
                            template_key: e.template_key().0,
                            template_id: e.template_id(),
                            version: e.version(),
                            template: e.template().to_owned(),
                        },
                    },
                ));
            }
            let id = RecordId {
                lsn,
                index: index as u32,
            };
            self.expected
                .insert((tenant.to_owned(), id), l.text.clone());
            let resource: Vec<(String, String)> = vec![("service.name".into(), l.service.clone())];
            records.push(LogRecord {
                wal_id: [3; 16],
                id,
                tenant: Tenant::new(tenant),
                time_unix_nano: l.time as u64,
                observed_time_unix_nano: l.time as u64,
                severity_number: l.severity,
                severity_text: l.severity_text.clone(),
                template_key: mined.record.template_key.0,
                template_id: mined.record.template_id,
                template_version: mined.record.template_version,
                params: mined.record.params.iter().collect(),
                body: mined.record.body,
                attributes: l.attributes.clone().into(),
                resource_attributes: resource.into(),
                trace_id: None,
                span_id: None,
                audit_watermark: 0,
            });
        }
        (records, events)
    }

    /// Put records, one object per (date, hour) partition; returns the object paths.
    pub(crate) async fn put_records(&self, tenant: &str, records: &[LogRecord]) -> Vec<Path> {
        let mut by_partition: BTreeMap<String, Vec<LogRecord>> = BTreeMap::new();
        for r in records {
            let key = ourios_sinks::PartitionKey::derive(r).unwrap();
            by_partition
                .entry(key.to_string())
                .or_default()
                .push(r.clone());
        }
        let mut paths = Vec::new();
        for (partition, records) in by_partition {
            let bytes = ourios_sinks::encode_records(&records, true).unwrap();
            let path = Path::from(format!("records/{partition}/{}", self.name()));
            self.store
                .put(&path, PutPayload::from(bytes))
                .await
                .unwrap();
            paths.push(path);
        }
        let _ = tenant;
        paths
    }

    pub(crate) async fn put_audit(
        &self,
        tenant: &str,
        events: &[(u64, AuditEvent)],
    ) -> Option<Path> {
        if events.is_empty() {
            return None;
        }
        let bytes = ourios_sinks::encode_audit(events, true).unwrap();
        let path = Path::from(format!(
            "audit/tenant={tenant}/date=2026-12-01/{}",
            self.name()
        ));
        self.store
            .put(&path, PutPayload::from(bytes))
            .await
            .unwrap();
        Some(path)
    }

    /// Mine and store `lines` the way the node publishes: audit first (I3), then records.
    pub(crate) async fn write(&mut self, tenant: &str, lines: &[Line]) -> Vec<Path> {
        let (records, events) = self.mine(tenant, lines);
        self.put_audit(tenant, &events).await;
        self.put_records(tenant, &records).await
    }

    pub(crate) fn reader(&self) -> ourios_query::Reader {
        ourios_query::Reader::new(self.store.clone() as Arc<dyn ObjectStore>, "")
    }
}

pub(crate) fn tenant(name: &str) -> ourios_wal::TenantId {
    ourios_wal::TenantId::new(name).unwrap()
}

/// (lsn, index) -> line of `SELECT record_lsn, record_index, line FROM logs ...` rows, panicking
/// on an id seen twice.
pub(crate) async fn ids_and_lines(
    scope: &ourios_query::TenantScope,
    sql: &str,
) -> BTreeMap<RecordId, String> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{UInt32Type, UInt64Type};
    let batches = scope.sql(sql).await.unwrap().collect().await.unwrap();
    let mut out = BTreeMap::new();
    for b in batches {
        let lsn = b.column(0).as_primitive::<UInt64Type>();
        let index = b.column(1).as_primitive::<UInt32Type>();
        let line =
            datafusion::arrow::compute::cast(b.column(2), &arrow_schema::DataType::Utf8).unwrap();
        let line = line.as_string::<i32>();
        for i in 0..b.num_rows() {
            let id = RecordId {
                lsn: lsn.value(i),
                index: index.value(i),
            };
            let prev = out.insert(id, line.value(i).to_owned());
            assert!(prev.is_none(), "record {id:?} read twice");
        }
    }
    out
}
