//! The cost of ownership bookkeeping: consuming N drained partitions through `Drained` +
//! `RecoverableBatch` (fill the record slot, take, begin/settle each, finish) against a plain
//! `Vec` doing the same work (fill, iterate, "put", keep), measured in the same run.
//!
//! Criterion measures each path; a closing section times both alternately with `Instant` and
//! prints ns per partition, the ratio and the bookkeeping (difference) per partition, for
//! partitions of 10 and of 1000 records: the bookkeeping must not grow with records.
//! `cargo bench -p ourios-recoverable --bench ownership` (about 30 s).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use ourios_recoverable::{Drained, RequeueCause, RequeueTarget, Settlement};

type Partition = Vec<u64>;

/// The happy path never requeues; a target that would is still wired in, as in production.
#[derive(Debug)]
struct Unused;
impl<T> RequeueTarget<T> for Unused {
    fn requeue(&self, items: Vec<T>, _cause: RequeueCause) {
        black_box(items.len());
    }
}

/// The "put": look at the partition (O(1): the store's cost is not what is measured).
fn put(partition: &Partition) {
    black_box(partition.len());
    black_box(partition.as_ptr());
}

/// Baseline: drain the buffer into a Vec, then put and keep each partition.
fn plain(buffer: &mut Vec<Partition>, store: &mut Vec<Partition>) {
    let mut drained: Vec<Partition> = Vec::new();
    while let Some(p) = buffer.pop() {
        drained.push(p);
    }
    for p in drained {
        put(&p);
        store.push(p);
    }
}

/// The same through the ownership types.
fn recoverable(
    buffer: &mut Vec<Partition>,
    store: &mut Vec<Partition>,
    audit: &Arc<dyn RequeueTarget<u64>>,
    records: &Arc<dyn RequeueTarget<Partition>>,
) {
    let mut drained = Drained::new((), audit.clone(), records.clone());
    while let Some(p) = buffer.pop() {
        drained.record_slot().push(p);
    }
    let mut batch = drained.take_records_where(|_| true);
    while let Some(lease) = batch.begin_next() {
        put(batch.item(&lease));
        store.push(batch.settle(lease, Settlement::Durable));
    }
    let report = batch.finish();
    black_box(&report);
}

struct Setup {
    buffer: Vec<Partition>,
    store: Vec<Partition>,
    audit: Arc<dyn RequeueTarget<u64>>,
    records: Arc<dyn RequeueTarget<Partition>>,
}

impl Setup {
    fn new(partitions: usize, records: usize) -> Self {
        Self {
            buffer: (0..partitions).map(|i| vec![i as u64; records]).collect(),
            store: Vec::with_capacity(partitions),
            audit: Arc::new(Unused),
            records: Arc::new(Unused),
        }
    }

    /// Time one pass of `f`, then move the partitions back (untimed).
    fn time(&mut self, f: impl Fn(&mut Self)) -> Duration {
        let start = Instant::now();
        f(self);
        let elapsed = start.elapsed();
        std::mem::swap(&mut self.buffer, &mut self.store);
        elapsed
    }

    fn run_plain(&mut self) -> Duration {
        self.time(|s| plain(&mut s.buffer, &mut s.store))
    }

    fn run_recoverable(&mut self) -> Duration {
        self.time(|s| recoverable(&mut s.buffer, &mut s.store, &s.audit, &s.records))
    }
}

const PARTITIONS: usize = 1000;

fn ownership(c: &mut Criterion) {
    let mut group = c.benchmark_group("ownership_1000_partitions");
    for records in [10, 1000] {
        let mut setup = Setup::new(PARTITIONS, records);
        group.bench_function(format!("plain_vec/{records}_records"), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| setup.run_plain()).sum())
        });
        group.bench_function(format!("recoverable/{records}_records"), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| setup.run_recoverable()).sum())
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    targets = ownership
}

/// Both paths alternately, many passes, minimum-of-batches per path to cut scheduler noise.
fn ratio_report(passes: usize) {
    println!();
    println!("ownership bookkeeping, same run (min over {passes} passes of each path):");
    for (partitions, records) in [(1000, 10), (1000, 1000), (100, 10), (10_000, 10)] {
        let mut setup = Setup::new(partitions, records);
        let (mut best_plain, mut best_rec) = (Duration::MAX, Duration::MAX);
        for _ in 0..passes {
            best_plain = best_plain.min(setup.run_plain());
            best_rec = best_rec.min(setup.run_recoverable());
        }
        let per = |d: Duration| d.as_nanos() as f64 / partitions as f64;
        let (p, r) = (per(best_plain), per(best_rec));
        println!(
            "  {partitions:>6} partitions x {records:>4} records: plain Vec {p:7.1} ns/partition, \
             RecoverableBatch+Drained {r:7.1} ns/partition, ratio {:.2}, bookkeeping {:+.1} ns/partition",
            r / p,
            r - p
        );
    }
}

fn main() {
    let bench_mode = std::env::args().any(|a| a == "--bench");
    benches();
    Criterion::default().configure_from_args().final_summary();
    // Under `cargo test --benches` (no `--bench`), a short pass keeps the target exercised.
    ratio_report(if bench_mode { 300 } else { 3 });
}
