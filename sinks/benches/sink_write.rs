//! Encode + put throughput of the record sink on one core: drain one partition (one tenant, one
//! template, one param) of 1 000 or 10 000 records, encode it to Parquet and put it into the
//! in-memory and the local-file store, ZSTD on and, as the in-run reference, off.
//!
//! Criterion measures each case; a custom pass afterwards times the same path with
//! `std::time::Instant` and prints records/s, MB/s (estimated in-memory record bytes) and the
//! ratio of ZSTD to the uncompressed reference measured in the same run. Then the record file
//! writer's properties against two baselines in the same run: a dictionary on every column,
//! and statistics on every column.
//!
//! Run: `cargo xtask bench sink_write` (or `cargo bench -p ourios-sinks --bench sink_write`)
//! (about 40 s after the build).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, Throughput};
use object_store::ObjectStore;
use ourios_recoverable::RecoverableBatch;
use ourios_sinks::{
    AuditSinkConfig, LogRecord, RecordId, RecordSinkConfig, SharedParquetAuditSink,
    SharedParquetSink, Tenant,
};

const T0: u64 = 1_700_000_000_000_000_000;

fn record(i: u64) -> LogRecord {
    LogRecord {
        id: RecordId { lsn: i, index: 0 },
        tenant: Tenant::new("bench"),
        time_unix_nano: T0 + i,
        observed_time_unix_nano: T0 + i + 17,
        severity_number: 9,
        severity_text: "INFO".into(),
        wal_id: [0; 16],
        template_key: [1; 16],
        template_id: 1,
        template_version: 1,
        params: vec![format!("user-{}", i % 5_000)].into(),
        body: None,
        attributes: Default::default(),
        resource_attributes: Default::default(),
        trace_id: None,
        span_id: None,
        audit_watermark: 0,
    }
}

#[derive(Clone, Copy, Debug)]
enum StoreKind {
    Memory,
    File,
}

struct Case {
    store: Arc<dyn ObjectStore>,
    _dir: Option<tempfile::TempDir>,
}

fn store(kind: StoreKind) -> Case {
    match kind {
        StoreKind::Memory => Case {
            store: ourios_sinks::store_from_url("memory://").unwrap(),
            _dir: None,
        },
        StoreKind::File => {
            let dir = tempfile::tempdir().unwrap();
            let url = format!("file://{}", dir.path().display());
            Case {
                store: ourios_sinks::store_from_url(&url).unwrap(),
                _dir: Some(dir),
            }
        }
    }
}

fn sink(store: &Arc<dyn ObjectStore>, zstd: bool) -> SharedParquetSink {
    let audit = SharedParquetAuditSink::new(Arc::clone(store), AuditSinkConfig::default());
    SharedParquetSink::new(
        Arc::clone(store),
        audit,
        RecordSinkConfig {
            target_partition_bytes: usize::MAX,
            ceiling_bytes: usize::MAX,
            zstd,
            prefix: String::new(),
        },
    )
}

/// Fill the sink with `n` records (untimed); returns their estimated bytes.
fn fill(sink: &SharedParquetSink, records: &[LogRecord]) -> usize {
    sink.buffer_only(records.to_vec());
    sink.buffered_bytes()
}

/// The timed path: drain, then encode + put through `publish_owned`.
fn publish(rt: &tokio::runtime::Runtime, sink: &SharedParquetSink) {
    let mut slot = Vec::new();
    sink.drain_all(&mut slot);
    let mut batch = RecoverableBatch::new(slot, Arc::new(sink.clone()));
    let report = rt.block_on(sink.publish_owned(&mut batch));
    assert_eq!(report.durable, 1);
    let report = batch.finish();
    assert_eq!(black_box(report).durable, 1);
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn criterion_benches(c: &mut Criterion) {
    let rt = runtime();
    for n in [1_000u64, 10_000] {
        let records: Vec<LogRecord> = (0..n).map(record).collect();
        let mut group = c.benchmark_group(format!("sink_write/{n}"));
        group.throughput(Throughput::Elements(n));
        for kind in [StoreKind::Memory, StoreKind::File] {
            for zstd in [true, false] {
                let case = store(kind);
                let s = sink(&case.store, zstd);
                let name = format!("{kind:?}/{}", if zstd { "zstd" } else { "plain" });
                group.bench_function(name, |b| {
                    b.iter_batched(
                        || {
                            fill(&s, &records);
                        },
                        |()| publish(&rt, &s),
                        BatchSize::PerIteration,
                    )
                });
            }
        }
        group.finish();
    }
}

/// Median seconds per publish of `records` over `reps` runs.
fn time(
    rt: &tokio::runtime::Runtime,
    kind: StoreKind,
    zstd: bool,
    records: &[LogRecord],
    reps: usize,
) -> (f64, usize) {
    let case = store(kind);
    let s = sink(&case.store, zstd);
    let mut samples = Vec::with_capacity(reps);
    let mut bytes = 0;
    for _ in 0..reps {
        bytes = fill(&s, records);
        let start = Instant::now();
        publish(rt, &s);
        samples.push(start.elapsed().as_secs_f64());
    }
    (median(samples), bytes)
}

fn ratios(reps: usize) {
    let rt = runtime();
    println!(
        "\nsink_write: encode + put, 1 core, median of {reps} runs (MB = 10^6 estimated record bytes)"
    );
    for n in [1_000u64, 10_000] {
        let records: Vec<LogRecord> = (0..n).map(record).collect();
        for kind in [StoreKind::Memory, StoreKind::File] {
            let (zstd, bytes) = time(&rt, kind, true, &records, reps);
            let (plain, _) = time(&rt, kind, false, &records, reps);
            let per = |secs: f64| (n as f64 / secs, bytes as f64 / secs / 1e6);
            let (zr, zm) = per(zstd);
            let (pr, pm) = per(plain);
            println!(
                "  {n:>6} records {kind:?}: zstd {zr:>10.0} rec/s {zm:>7.1} MB/s | plain (reference) {pr:>10.0} rec/s {pm:>7.1} MB/s | zstd/plain throughput ratio {:.2}",
                zr / pr
            );
        }
    }
    println!("  reference: upstream Ourios 536 K rec/s (10 000 one-param records, 2-core machine)");
}

/// A log-shaped record as the node writes it: three parameters, twelve attributes whose keys
/// repeat and whose values mostly do, and one record in ten keeping its unique body of about
/// 250 bytes (the miner keeps a body only when the parse is low-confidence).
fn log_record(i: u64) -> LogRecord {
    let user = i % 700;
    let body = format!(
        "2026-11-30T12:{:02}:{:02}.{:06}Z INFO request_id={:016x} user=u{user} path=/api/v1/orders/{} \
         status={} bytes={} took={}ms upstream=10.0.{}.{}:8080 msg=\"order {} fetched from cache shard {}\"",
        (i / 60) % 60,
        i % 60,
        i * 7919 % 1_000_000,
        i.wrapping_mul(0x9e37_79b9_7f4a_7c15),
        i * 31 % 100_000,
        [200, 200, 200, 404, 500][(i % 5) as usize],
        i * 113 % 65_536,
        i % 997,
        i % 4,
        i % 250,
        i,
        i % 16,
    );
    let mut r = record(i);
    r.params = vec![
        format!("u{user}"),
        format!("{}", i * 31 % 100_000),
        format!("{}", i % 997),
    ]
    .into();
    r.body = i.is_multiple_of(10).then_some(body);
    r.attributes = (0..12)
        .map(|k| {
            (
                format!("attr.key.{k}"),
                format!("value-{}", (i + k) % (5 + 40 * k)),
            )
        })
        .collect();
    r
}

/// Seconds to write `batch` to Parquet with `properties`, and the file's size.
fn write_once(
    batch: &arrow_array::RecordBatch,
    properties: &parquet::file::properties::WriterProperties,
) -> (f64, usize) {
    let start = Instant::now();
    let mut writer =
        parquet::arrow::ArrowWriter::try_new(Vec::new(), batch.schema(), Some(properties.clone()))
            .unwrap();
    writer.write(batch).unwrap();
    let size = black_box(writer.into_inner().unwrap()).len();
    (start.elapsed().as_secs_f64(), size)
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// The record files' writer properties (no dictionary on the unique-per-row columns, a small one
/// on the mixed ones) against the baseline of a dictionary on every column under Parquet's own
/// limit, writing the same Arrow batch of log-shaped records in the same run.
fn dictionary_ratio(reps: usize) {
    let records: Vec<LogRecord> = (0..10_000).map(log_record).collect();
    let batch = read_back(&records);
    let ours = ourios_sinks::record_writer_properties(true);
    // The baseline differs from ours only in the dictionaries it turns back on and the
    // dictionary page limit it gives back to the mixed columns.
    let every = ourios_sinks::PLAIN_COLUMNS
        .iter()
        .fold(ours.clone().into_builder(), |b, &c| {
            b.set_column_dictionary_enabled(parquet::schema::types::ColumnPath::from(c), true)
        });
    let every = ourios_sinks::MIXED_DICTIONARY_COLUMNS
        .iter()
        .fold(every, |b, &c| {
            let path = parquet::schema::types::ColumnPath::from(
                c.split('.').map(str::to_owned).collect::<Vec<_>>(),
            );
            b.set_column_dictionary_page_size_limit(
                path,
                parquet::file::properties::DEFAULT_DICTIONARY_PAGE_SIZE_LIMIT,
            )
        })
        .build();
    compare(
        "12 attributes, 1 in 10 with its body",
        ("dictionary on every column", &every),
        ("none on the unique columns, small on the mixed", &ours),
        &batch,
        reps,
    );
}

/// `records` as the record file's Arrow batch, read back from the file the sink writes.
fn read_back(records: &[LogRecord]) -> arrow_array::RecordBatch {
    let file = ourios_sinks::encode_records(records, true).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        bytes::Bytes::from(file),
    )
    .unwrap()
    .with_batch_size(records.len())
    .build()
    .unwrap();
    let mut batches: Vec<_> = reader.map(Result::unwrap).collect();
    assert_eq!(batches.len(), 1, "read back in one batch");
    batches.pop().unwrap()
}

/// Writes `batch` (10 000 records, `shape`) with the baseline's and our properties alternately,
/// `reps` times each (so neither side is always the warmer one), and prints the median time
/// and the file size of each, the speedup and the size ratio.
fn compare(
    shape: &str,
    (baseline_name, baseline): (&str, &parquet::file::properties::WriterProperties),
    (ours_name, ours): (&str, &parquet::file::properties::WriterProperties),
    batch: &arrow_array::RecordBatch,
    reps: usize,
) {
    let (mut base, mut now) = (Vec::with_capacity(reps), Vec::with_capacity(reps));
    let (mut base_size, mut now_size) = (0, 0);
    for _ in 0..reps {
        let (secs, size) = write_once(batch, baseline);
        base.push(secs);
        base_size = size;
        let (secs, size) = write_once(batch, ours);
        now.push(secs);
        now_size = size;
    }
    let (base, now) = (median(base), median(now));
    println!(
        "\nrecord file writer, 10 000 log-shaped records ({shape}), 1 core, median of {reps} runs:\n  \
         {baseline_name} (baseline) {:.1} ms, {base_size} bytes | \
         {ours_name} {:.1} ms, {now_size} bytes | speedup {:.2}x, size ratio {:.3}",
        base * 1e3,
        now * 1e3,
        base / now,
        now_size as f64 / base_size as f64,
    );
}

/// The record files' writer properties (no statistics on the columns no reader prunes on)
/// against the baseline of statistics on every column, writing the same Arrow batch of
/// log-shaped records, each with one of four resources' six attributes, in the same run.
fn statistics_ratio(reps: usize) {
    let resources: Vec<ourios_sinks::SharedAttributes> = (0..4)
        .map(|r| {
            (0..6)
                .map(|k| (format!("resource.key.{k}"), format!("resource-{r}-{k}")))
                .collect::<Vec<_>>()
                .into()
        })
        .collect();
    let records: Vec<LogRecord> = (0..10_000u64)
        .map(|i| LogRecord {
            resource_attributes: Arc::clone(&resources[(i % 4) as usize]),
            ..log_record(i)
        })
        .collect();
    let batch = read_back(&records);
    let ours = ourios_sinks::record_writer_properties(true);
    // The baseline differs from ours only in the statistics it turns back on.
    let every = ourios_sinks::UNPRUNED_COLUMNS
        .iter()
        .fold(ours.clone().into_builder(), |b, &c| {
            let path = parquet::schema::types::ColumnPath::from(
                c.split('.').map(str::to_owned).collect::<Vec<_>>(),
            );
            b.set_column_statistics_enabled(
                path,
                parquet::file::properties::EnabledStatistics::Page,
            )
        })
        .build();
    compare(
        "12 attributes, 6 resource attributes",
        ("statistics on every column", &every),
        ("none on the unpruned columns", &ours),
        &batch,
        reps,
    );
}

fn main() {
    let test_mode = std::env::args().any(|a| a == "--test");
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    criterion_benches(&mut c);
    c.final_summary();
    ratios(if test_mode { 1 } else { 15 });
    dictionary_ratio(if test_mode { 1 } else { 15 });
    statistics_ratio(if test_mode { 1 } else { 15 });
}
