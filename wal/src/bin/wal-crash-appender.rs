//! Test helper for the crash test (`tests/it/crash.rs`), not a tool: opens the WAL in the given
//! directory, appends from several threads and prints one line per acknowledged frame
//! (`ack <lsn> <thread> <seq>`), while one more thread stamps frontiers with snapshots and
//! truncates. It runs until killed. Payloads are derived from `(round, thread, seq)`, so the
//! parent can rebuild every acknowledged payload byte for byte.
//!
//! Usage: `wal-crash-appender <dir> <round> <threads>`

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ourios_wal::{Lsn, Stamp, TenantId, Wal, WalConfig};

/// Tenants the appenders write to, round robin.
const TENANTS: [&str; 3] = ["tenant-a", "tenant-b", "tenant-c"];

/// The payload of `(round, thread, seq)`; the crash test has its own copy of this function.
fn payload(round: u64, thread: u64, seq: u64) -> Vec<u8> {
    let mut x = (round << 40) ^ (thread << 32) ^ seq ^ 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let len = 1 + (next() % 3000) as usize;
    (0..len).map(|_| next() as u8).collect()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, dir, round, threads] = &args[..] else {
        eprintln!("usage: wal-crash-appender <dir> <round> <threads>");
        std::process::exit(2);
    };
    let round: u64 = round.parse().expect("round is a number");
    let threads: u64 = threads.parse().expect("threads is a number");
    let mut config = WalConfig::new(dir);
    config.max_segment_bytes = 64 * 1024;
    config.max_segment_age = None;
    let (wal, _report) = Wal::open(config).unwrap_or_else(|e| {
        eprintln!("open failed: {e}");
        std::process::exit(3);
    });
    let wal = Arc::new(wal);
    let tenants: Vec<TenantId> = TENANTS.iter().map(|t| TenantId::new(t).unwrap()).collect();
    let stop = Arc::new(AtomicBool::new(false));

    let stamper = {
        let (wal, tenants, stop) = (Arc::clone(&wal), tenants.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            // Relaxed: a stop flag with no data attached; the thread only needs to see it
            // eventually.
            while !stop.load(Ordering::Relaxed) {
                // Pacing for a helper process, not a test ordering: stamping without pause would
                // spin on fsyncs of unchanged marks.
                std::thread::sleep(std::time::Duration::from_millis(2));
                let durable = wal.durable_lsn();
                if durable == Lsn::ZERO {
                    continue;
                }
                // Stamp every tenant at the durable lsn with a snapshot derived from it.
                let state = durable.0.to_le_bytes().repeat(16);
                let stamps: Vec<Stamp<'_>> = tenants
                    .iter()
                    .map(|tenant| Stamp {
                        tenant,
                        frontier: durable,
                        snapshot: Some(&state),
                    })
                    .collect();
                if let Err(e) = wal.stamp(&stamps) {
                    eprintln!("stamp failed: {e}");
                    std::process::exit(4);
                }
                if let Err(e) = wal.truncate() {
                    eprintln!("truncate failed: {e}");
                    std::process::exit(5);
                }
            }
        })
    };

    let appenders: Vec<_> = (0..threads)
        .map(|thread| {
            let (wal, tenants) = (Arc::clone(&wal), tenants.clone());
            std::thread::spawn(move || {
                for seq in 0.. {
                    let tenant = &tenants[((thread + seq) % tenants.len() as u64) as usize];
                    match wal.append(tenant, &payload(round, thread, seq)) {
                        Ok(lsn) => {
                            let mut out = std::io::stdout().lock();
                            // The line goes out only after the ack; a kill before the flush
                            // loses the line, never an acked frame the parent expects.
                            writeln!(out, "ack {} {thread} {seq}", lsn.0).expect("stdout");
                            out.flush().expect("stdout");
                        }
                        Err(e) => {
                            eprintln!("append failed: {e}");
                            std::process::exit(6);
                        }
                    }
                }
            })
        })
        .collect();
    for a in appenders {
        a.join().expect("appender");
    }
    stop.store(true, Ordering::Relaxed);
    stamper.join().expect("stamper");
}
