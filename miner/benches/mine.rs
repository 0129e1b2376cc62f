//! Mining throughput (lines/s on one core) against plain whitespace splitting of the same lines,
//! and bytes of memory per template.
//!
//! Corpus: 200 000 lines from 50 templates (10 components x 5 message shapes) whose parameters
//! vary per line: numbers, durations, IPv4 addresses, UUIDs, hex keys, paths and user names
//! (the names force one widening per template). Criterion measures steady-state mining and the
//! split baseline; a timed pass afterwards mines the corpus from an empty miner, splits it, and
//! prints both rates and their ratio, then the memory per template (two estimates: the summed
//! capacities of the state's strings and vectors, and the snapshot size).
//!
//! Run: `cargo bench -p ourios-miner --bench mine` (about 30 s).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use ourios_miner::{FixedClock, MinerConfig, TenantMiner};

const LINES: usize = 200_000;

const COMPONENTS: [&str; 10] = [
    "api",
    "auth",
    "cache",
    "db",
    "gateway",
    "ingest",
    "queue",
    "scheduler",
    "storage",
    "worker",
];

const USERS: [&str; 8] = [
    "alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi",
];

/// A small deterministic generator (64-bit LCG), so every run mines the same corpus.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn line(rng: &mut Lcg) -> String {
    let comp = COMPONENTS[rng.below(10) as usize];
    let n = rng.below(100_000);
    let ms = rng.below(5_000);
    match rng.below(5) {
        0 => format!(
            "{comp} request completed status {} in {ms}ms",
            200 + rng.below(4) * 100
        ),
        1 => format!(
            "{comp} connection from 10.{}.{}.{} port {n} accepted",
            rng.below(256),
            rng.below(256),
            rng.below(256)
        ),
        2 => format!(
            "{comp} user {} logged in session {:08x}-{:04x}-4{:03x}-a{:03x}-{:012x}",
            USERS[rng.below(8) as usize],
            rng.next(),
            rng.below(0x1_0000),
            rng.below(0x1000),
            rng.below(0x1000),
            rng.next() << 16 | rng.below(0x1_0000)
        ),
        3 => format!(
            "{comp} cache miss for key 0x{:x} size {n} bytes",
            rng.next()
        ),
        _ => format!(
            "{comp}  wrote {n} records to /var/lib/{comp}/seg-{}.log after {ms}.{}s",
            rng.below(1000),
            rng.below(10)
        ),
    }
}

fn corpus() -> Vec<String> {
    let mut rng = Lcg(0x5eed);
    (0..LINES).map(|_| line(&mut rng)).collect()
}

fn new_miner() -> TenantMiner {
    TenantMiner::new(
        "bench",
        MinerConfig::default(),
        Arc::new(FixedClock::new(0)),
    )
}

fn mine_all(miner: &mut TenantMiner, lines: &[String]) -> usize {
    let mut params = 0;
    for l in lines {
        params += miner.ingest(l).record.params.len();
    }
    params
}

fn split_all(lines: &[String]) -> usize {
    lines.iter().map(|l| l.split_whitespace().count()).sum()
}

fn criterion_benches(c: &mut Criterion, lines: &[String]) {
    let mut g = c.benchmark_group("mine");
    g.throughput(Throughput::Elements(lines.len() as u64));
    let mut warm = new_miner();
    let _ = mine_all(&mut warm, lines);
    g.bench_function("mine_steady_state", |b| {
        b.iter(|| black_box(mine_all(&mut warm, black_box(lines))));
    });
    g.bench_function("baseline_split_whitespace", |b| {
        b.iter(|| black_box(split_all(black_box(lines))));
    });
    g.finish();
}

/// Best of `rounds` timings of `f`.
fn best_of(rounds: usize, mut f: impl FnMut() -> usize) -> Duration {
    (0..rounds)
        .map(|_| {
            let start = Instant::now();
            black_box(f());
            start.elapsed()
        })
        .min()
        .unwrap_or_default()
}

fn main() {
    let lines = corpus();
    let mut c = Criterion::default()
        .configure_from_args()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    criterion_benches(&mut c, &lines);
    c.final_summary();

    let n = lines.len() as f64;
    let mine = best_of(3, || mine_all(&mut new_miner(), &lines));
    let split = best_of(3, || split_all(&lines));
    let mine_rate = n / mine.as_secs_f64();
    let split_rate = n / split.as_secs_f64();
    println!(
        "timed pass over {} lines, one core, from an empty miner:",
        lines.len()
    );
    println!("  mine:                {mine_rate:>14.0} lines/s ({mine:?})");
    println!("  baseline split only: {split_rate:>14.0} lines/s ({split:?})");
    println!(
        "  ratio mine/split = {:.3} (mining costs {:.1}x a whitespace split)",
        mine_rate / split_rate,
        split_rate / mine_rate
    );

    let mut m = new_miner();
    let _ = mine_all(&mut m, &lines);
    let templates = m.template_count();
    let widened = m.templates().filter(|(_, v, _)| *v > 1).count();
    let heap = m.approx_heap_bytes();
    let snapshot = m.snapshot().len();
    println!("memory: {templates} templates ({widened} widened), for example:");
    for (id, version, t) in m.templates().take(5) {
        println!("  {id} v{version}: {t}");
    }
    println!(
        "  summed capacities of strings and vectors: {heap} bytes, {} bytes/template",
        heap / templates.max(1)
    );
    println!(
        "  snapshot size:                             {snapshot} bytes, {} bytes/template",
        snapshot / templates.max(1)
    );
}
