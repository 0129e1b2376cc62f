//! The cost of unwind safety: one drain of N buffered partitions written through the protocol
//! (`drain_all` + `write_ordered`: the audit write, the per-tenant decision, `publish_owned`
//! with its `RecoverableBatch`, the I3 check, the unpublished-floor accounting) against the same
//! store I/O done directly (the audit event and each partition encoded and put, nothing else),
//! in the same run, into the same kind of in-memory store. Filling the buffers is setup for
//! the protocol side and is not measured.
//!
//! Criterion measures both; a closing section times them alternately with `Instant` (median
//! of several rounds) and prints the ratio. Goal: within 1% (ratio <= 1.01).
//! `cargo xtask bench protocol` (about a minute after the release build).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use ourios_barrier::Barrier;
use ourios_publisher::{PublishCoordinator, PublisherConfig};
use ourios_sinks::{
    AuditEvent, AuditKind, AuditSinkConfig, LogRecord, RecordId, RecordSinkConfig,
    SharedParquetAuditSink, SharedParquetSink, Tenant,
};

const PARTITIONS: u64 = 32;
const RECORDS: u32 = 500;
const T0: u64 = 1_700_000_000_000_000_000;
const HOUR: u64 = 3_600_000_000_000;

fn records(watermark: u64) -> Vec<Vec<LogRecord>> {
    (0..PARTITIONS)
        .map(|p| {
            (0..RECORDS)
                .map(|i| LogRecord {
                    id: RecordId {
                        lsn: p + 1,
                        index: i,
                    },
                    tenant: Tenant::new("bench"),
                    time_unix_nano: T0 + p * HOUR,
                    observed_time_unix_nano: T0 + p * HOUR,
                    severity_number: 9,
                    severity_text: "INFO".into(),
                    wal_id: [0; 16],
                    template_key: [1; 16],
                    template_id: 1,
                    template_version: 1,
                    params: vec![format!("{i}"), format!("10.0.{}.{}", p, i % 250)].into(),
                    body: None,
                    attributes: Default::default(),
                    resource_attributes: Default::default(),
                    trace_id: None,
                    span_id: None,
                    audit_watermark: watermark,
                })
                .collect()
        })
        .collect()
}

struct Protocol {
    rt: tokio::runtime::Runtime,
    records: SharedParquetSink,
    coord: PublishCoordinator,
}

impl Protocol {
    fn new() -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let audit = SharedParquetAuditSink::new(Arc::clone(&store), AuditSinkConfig::default());
        let records = SharedParquetSink::new(
            store,
            audit,
            RecordSinkConfig {
                target_partition_bytes: 1 << 30,
                ceiling_bytes: 1 << 31,
                ..Default::default()
            },
        );
        let coord = PublishCoordinator::new(
            records.clone(),
            Arc::new(Barrier::new()),
            rt.handle().clone(),
            PublisherConfig::default(),
        );
        Self { rt, records, coord }
    }

    /// Setup (not measured): one template event and the partitions appended to the buffers.
    fn fill(&self) {
        let watermark = self.emit();
        for part in records(watermark) {
            for r in part {
                let _ = self.records.append(r);
            }
        }
    }

    /// Measured: one drain written in order (audit put, per-tenant decision, record puts).
    fn run(&self) {
        let mut drained = self.coord.drain_all();
        let verdict = self.rt.block_on(self.coord.write_ordered(&mut drained));
        assert!(verdict.all_durable());
        drop(drained.finish());
    }

    fn emit(&self) -> u64 {
        self.records.audit().emit(AuditEvent {
            tenant: Tenant::new("bench"),
            timestamp_unix_nanos: T0 as i128,
            kind: AuditKind::TemplateCreated {
                template_key: [1; 16],
                template_id: 1,
                version: 1,
                template: "user <*> from <IPV4>".into(),
            },
        })
    }
}

/// The baseline: the same store I/O with no protocol — the one audit event encoded and put,
/// then each partition encoded and put — and no ownership, ordering or accounting.
fn direct(rt: &tokio::runtime::Runtime, store: &InMemory, parts: &[Vec<LogRecord>], round: u64) {
    let event = AuditEvent {
        tenant: Tenant::new("bench"),
        timestamp_unix_nanos: T0 as i128,
        kind: AuditKind::TemplateCreated {
            template_key: [1; 16],
            template_id: 1,
            version: 1,
            template: "user <*> from <IPV4>".into(),
        },
    };
    rt.block_on(async {
        let audit = ourios_sinks::encode_audit(&[(round, event)], true).unwrap();
        let path = Path::from(format!("audit/tenant=bench/{round}.parquet"));
        store.put(&path, PutPayload::from(audit)).await.unwrap();
        for (i, part) in parts.iter().enumerate() {
            let bytes = ourios_sinks::encode_records(part, true).unwrap();
            let path = Path::from(format!("records/tenant=bench/{round}-{i}.parquet"));
            store.put(&path, PutPayload::from(bytes)).await.unwrap();
        }
    });
}

fn bench(c: &mut Criterion) {
    let protocol = Protocol::new();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let store = InMemory::new();
    let mut group = c.benchmark_group("write_ordered");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(8));
    let mut round = 0;
    group.bench_function("direct_puts", |b| {
        b.iter_batched(
            || records(0),
            |parts| {
                round += 1;
                direct(&rt, &store, &parts, round)
            },
            criterion::BatchSize::PerIteration,
        )
    });
    group.bench_function("protocol", |b| {
        b.iter_batched(
            || protocol.fill(),
            |()| protocol.run(),
            criterion::BatchSize::PerIteration,
        )
    });
    group.finish();
}

fn ratio() {
    let protocol = Protocol::new();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let store = InMemory::new();
    let (mut d, mut p) = (Vec::new(), Vec::new());
    for round in 0..9 {
        let parts = records(0);
        let t = Instant::now();
        direct(&rt, &store, &parts, round);
        d.push(t.elapsed());
        protocol.fill();
        let t = Instant::now();
        protocol.run();
        p.push(black_box(t.elapsed()));
    }
    d.sort();
    p.sort();
    let (d, p) = (d[d.len() / 2], p[p.len() / 2]);
    let n = PARTITIONS * u64::from(RECORDS);
    println!(
        "\nwrite_ordered over {PARTITIONS} partitions x {RECORDS} records: direct puts {:.2} ms ({:.0} rec/s), \
         protocol {:.2} ms ({:.0} rec/s); ratio protocol/direct = {:.3} (goal <= 1.01)",
        d.as_secs_f64() * 1e3,
        n as f64 / d.as_secs_f64(),
        p.as_secs_f64() * 1e3,
        n as f64 / p.as_secs_f64(),
        p.as_secs_f64() / d.as_secs_f64()
    );
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    ratio();
}
