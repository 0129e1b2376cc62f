//! The latch and guard operations against a `Mutex<(u32, u32)>` doing the same work, in the same
//! run: report, capture, clear, and an encode guard's enter + exit, uncontended and with a
//! second thread hammering the same object. Criterion measures each; a short timed pass at the
//! end prints `mutex / packed` per operation (goal: >= 5x uncontended). `guard_vs_arc_mutex`
//! repeats the guard against a mutex guard that also clones an `Arc` handle, as a
//! `BatchGuard` must (it travels to a worker thread).
//!
//! `cargo bench -p ourios-barrier --bench latch` (about half a minute).

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use criterion::Criterion;
use ourios_barrier::{Barrier, CLEAR, EpochLatch, LatchWord};

/// The reference: the same pair behind a mutex.
#[derive(Default)]
struct Reference {
    pair: Mutex<(u32, u32)>,
}

const CLEAR_PAIR: (u32, u32) = (u32::MAX, 0);

impl Reference {
    fn new() -> Self {
        Self {
            pair: Mutex::new(CLEAR_PAIR),
        }
    }
    fn report(&self, epoch: u32) {
        let mut pair = self.pair.lock().unwrap();
        *pair = (pair.0.min(epoch), pair.1.saturating_add(1));
    }
    fn capture(&self) -> (u32, u32) {
        *self.pair.lock().unwrap()
    }
    fn clear(&self, captured: (u32, u32)) -> bool {
        let mut pair = self.pair.lock().unwrap();
        let hit = *pair == captured && captured.1 != u32::MAX;
        if hit {
            *pair = CLEAR_PAIR;
        }
        hit
    }
    fn enter_exit(&self) {
        self.pair.lock().unwrap().1 += 1;
        self.pair.lock().unwrap().1 -= 1;
    }
    /// A mutex-based guard that, like `BatchGuard`, owns a handle to the shared state (a guard
    /// travels to a worker thread, so it cannot borrow): the like-for-like baseline.
    fn enter_exit_owned(self: &Arc<Self>) {
        let handle = Arc::clone(self);
        handle.pair.lock().unwrap().1 += 1;
        handle.pair.lock().unwrap().1 -= 1;
        drop(black_box(handle));
    }
}

/// The system under test: one barrier (its latch and its encode word).
struct Real {
    barrier: Barrier,
    latch: EpochLatch,
}

impl Real {
    fn new() -> Self {
        Self {
            barrier: Barrier::new(),
            latch: EpochLatch::new(),
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Report,
    Capture,
    Clear,
    EnterExit,
    /// The same guard enter + exit, against a mutex guard that also owns an `Arc` handle.
    EnterExitOwned,
}

const OPS: [Op; 5] = [
    Op::Report,
    Op::Capture,
    Op::Clear,
    Op::EnterExit,
    Op::EnterExitOwned,
];

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Report => "report",
            Op::Capture => "capture",
            Op::Clear => "clear",
            Op::EnterExit => "guard_enter_exit",
            Op::EnterExitOwned => "guard_vs_arc_mutex",
        }
    }
    fn real(self, real: &Real) {
        match self {
            Op::Report => {
                let _ = black_box(real.latch.report(black_box(3)));
            }
            Op::Capture => {
                black_box(real.latch.capture());
            }
            // A successful clear from a clear capture (the word stays CLEAR, so every call
            // takes the same path); a raced clear costs the same single CAS.
            Op::Clear => {
                let _ = black_box(real.latch.clear(black_box(CLEAR)));
            }
            Op::EnterExit | Op::EnterExitOwned => drop(black_box(real.barrier.enter_encode())),
        }
    }
    fn reference(self, reference: &Arc<Reference>) {
        match self {
            Op::Report => reference.report(black_box(3)),
            Op::Capture => {
                black_box(reference.capture());
            }
            Op::Clear => {
                black_box(reference.clear(black_box(CLEAR_PAIR)));
            }
            Op::EnterExit => reference.enter_exit(),
            Op::EnterExitOwned => reference.enter_exit_owned(),
        }
    }
}

/// Runs `work` on a second thread until the returned guard is dropped.
struct Contender {
    stop: Arc<AtomicBool>,
    handle: Option<thread::JoinHandle<()>>,
}

impl Contender {
    fn start(work: impl Fn() + Send + 'static) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                for _ in 0..64 {
                    work();
                }
            }
        });
        Self {
            stop,
            handle: Some(handle),
        }
    }
}

impl Drop for Contender {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

fn contend_real(real: &Arc<Real>, op: Op) -> Contender {
    let real = Arc::clone(real);
    Contender::start(move || op.real(&real))
}

fn contend_reference(reference: &Arc<Reference>, op: Op) -> Contender {
    let reference = Arc::clone(reference);
    Contender::start(move || op.reference(&reference))
}

fn criterion_benches(c: &mut Criterion) {
    for contended in [false, true] {
        let mut group = c.benchmark_group(if contended {
            "latch_2_threads"
        } else {
            "latch_uncontended"
        });
        for op in OPS {
            let real = Arc::new(Real::new());
            let _contender = contended.then(|| contend_real(&real, op));
            group.bench_function(format!("{}/packed", op.name()), |b| {
                b.iter(|| op.real(&real))
            });
            drop(_contender);
            let reference = Arc::new(Reference::new());
            let _contender = contended.then(|| contend_reference(&reference, op));
            group.bench_function(format!("{}/mutex", op.name()), |b| {
                b.iter(|| op.reference(&reference))
            });
        }
        group.finish();
    }
}

/// Nanoseconds per call of `f`, best of three runs of `n` calls.
fn time_per_op(n: u32, f: impl Fn()) -> f64 {
    (0..3)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..n {
                f();
            }
            start.elapsed().as_secs_f64() * 1e9 / f64::from(n)
        })
        .fold(f64::INFINITY, f64::min)
}

fn print_ratios() {
    const N: u32 = 2_000_000;
    println!();
    println!("ratio = mutex ns / packed ns (same run; goal >= 5x uncontended)");
    println!(
        "{:<18} {:<12} {:>10} {:>10} {:>7}",
        "operation", "threads", "packed ns", "mutex ns", "ratio"
    );
    for contended in [false, true] {
        for op in OPS {
            let real = Arc::new(Real::new());
            let contender = contended.then(|| contend_real(&real, op));
            let packed = time_per_op(N, || op.real(&real));
            drop(contender);
            let reference = Arc::new(Reference::new());
            let contender = contended.then(|| contend_reference(&reference, op));
            let mutex = time_per_op(N, || op.reference(&reference));
            drop(contender);
            println!(
                "{:<18} {:<12} {:>10.2} {:>10.2} {:>6.1}x",
                op.name(),
                if contended { "2" } else { "1" },
                packed,
                mutex,
                mutex / packed
            );
        }
    }
    // Keep the sticky constant honest in the printed context: a report never wraps.
    let sticky = EpochLatch::with_word(LatchWord::new(0, u32::MAX));
    let _ = sticky.report(0);
    assert!(sticky.capture().is_sticky());
}

fn main() {
    let mut criterion = Criterion::default()
        .configure_from_args()
        .warm_up_time(Duration::from_millis(200))
        .measurement_time(Duration::from_millis(700))
        .sample_size(20);
    criterion_benches(&mut criterion);
    criterion.final_summary();
    print_ratios();
}
