//! Power loss (DESIGN §12): the WAL over a simulated file system that keeps written-but-unsynced
//! bytes and directory entries apart from synced ones, crashed at random I/O operations while it
//! appends, stamps frontiers and snapshots, rotates and truncates, and reopened on the image a
//! machine would find. Every acknowledged frame above its tenant's frontier must come back with
//! its exact payload, every acknowledged stamp must hold, and every installed snapshot must be
//! the one stamped at its lsn.

use std::collections::BTreeMap;
use std::sync::Arc;

use ourios_wal::testing::power_loss::{CrashRng, PowerLossIo};
use ourios_wal::{Lsn, Stamp, TenantId, Wal, WalConfig};

use crate::common::tenant;

/// Crashes per run: sequences of crash cycles, each cycle reopening the last image.
const SEQUENCES: u64 = 125;
const CYCLES: u64 = 8;
const TENANTS: [&str; 2] = ["a", "b"];

fn config() -> WalConfig {
    let mut c = WalConfig::new("/wal");
    // Small segments: rotation, sealing and truncation happen within a cycle.
    c.max_segment_bytes = 2048;
    c.max_segment_age = None;
    c
}

fn payload(lsn_hint: u64, rng: &mut CrashRng) -> Vec<u8> {
    let len = 1 + rng.upto(300);
    (0..len)
        .map(|i| lsn_hint.wrapping_mul(31).wrapping_add(i as u64 * 7) as u8)
        .collect()
}

fn snapshot_bytes(tenant: &str, lsn: u64) -> Vec<u8> {
    format!("snapshot of {tenant} at {lsn}").into_bytes()
}

/// What the workload was told, and so what must survive.
#[derive(Debug, Default)]
struct Acked {
    frames: BTreeMap<u64, (String, Vec<u8>)>,
    /// Per tenant, the highest frontier a stamp acknowledged (with its snapshot).
    frontiers: BTreeMap<String, u64>,
}

/// Runs a random workload on `wal` until `io` loses power (or `ops` operations are done).
fn workload(wal: &Wal, acked: &mut Acked, rng: &mut CrashRng, ops: usize) {
    for _ in 0..ops {
        let t = TENANTS[rng.upto(TENANTS.len() - 1)];
        let tid = tenant(t);
        match rng.upto(9) {
            0..=6 => {
                let p = payload(rng.next_u64(), rng);
                match wal.append(&tid, &p) {
                    Ok(lsn) => {
                        acked.frames.insert(lsn.0, (t.to_owned(), p));
                    }
                    Err(_) => return,
                }
            }
            7 => {
                // Stamp the tenant at its newest acknowledged frame, with a snapshot.
                let Some((&lsn, _)) = acked.frames.iter().rev().find(|(_, (tt, _))| tt == t) else {
                    continue;
                };
                let snap = snapshot_bytes(t, lsn);
                let stamp = Stamp {
                    tenant: &tid,
                    frontier: Lsn(lsn),
                    snapshot: Some(&snap),
                };
                match wal.stamp(&[stamp]) {
                    Ok(_) => {
                        let f = acked.frontiers.entry(t.to_owned()).or_default();
                        *f = (*f).max(lsn);
                    }
                    Err(_) => return,
                }
            }
            _ => {
                if wal.truncate().is_err() {
                    return;
                }
            }
        }
    }
}

/// Reopens the crash image and checks it against what was acknowledged.
fn check(wal: &Wal, acked: &Acked, context: &str) {
    let marks: BTreeMap<String, _> = wal
        .all_marks()
        .into_iter()
        .map(|(t, m)| (t.as_str().to_owned(), m))
        .collect();
    for (t, &stamped) in &acked.frontiers {
        let m = marks.get(t).copied().unwrap_or_default();
        assert!(
            m.frontier.0 >= stamped,
            "{context}: tenant {t} stamped at {stamped} reopened at {:?}",
            m.frontier
        );
        if m.snapshot != Lsn::ZERO {
            let snap = wal
                .read_snapshot(&TenantId::new(t).unwrap())
                .unwrap()
                .expect("a snapshot at S_t");
            assert_eq!(
                snap.state,
                snapshot_bytes(t, m.snapshot.0),
                "{context}: tenant {t}'s snapshot is not the one stamped at {:?}",
                m.snapshot
            );
        }
    }
    let replayed: BTreeMap<u64, (String, Vec<u8>)> = wal
        .replay()
        .map(|f| {
            let f = f.unwrap_or_else(|e| panic!("{context}: replay failed: {e}"));
            (
                f.lsn.0,
                (f.tenant.as_str().to_owned(), f.payload().to_vec()),
            )
        })
        .collect();
    for (lsn, (t, p)) in &acked.frames {
        let frontier = marks.get(t).map_or(0, |m| m.frontier.0);
        if *lsn <= frontier {
            continue; // durable in the store: the WAL may have truncated it
        }
        match replayed.get(lsn) {
            Some((rt, rp)) => assert!(
                rt == t && rp == p,
                "{context}: frame {lsn} came back with another tenant or payload"
            ),
            None => panic!(
                "{context}: acknowledged frame {lsn} of {t} (above its frontier {frontier}) is lost"
            ),
        }
    }
}

/// Proves the WAL's durability under power loss: 1 000 simulated crashes (125 sequences of 8
/// crash-and-reopen cycles, each at a random I/O operation, each image keeping a random part of
/// what was not synced), and after each, every acknowledged frame above its tenant's frontier,
/// every acknowledged stamp and every installed snapshot is there.
///
/// Mutation check (by hand): drop the `sync_data` of a group commit, the directory sync after a
/// segment is created, or the directory sync after marks are renamed into place, and it fails
/// with a lost frame, a stamp that did not hold, or a missing snapshot; drop the directory sync
/// `Wal::truncate` makes between retiring segments and cutting them, and a reopen finds a
/// segment cut short under its own name (the simulated cuts reach the disk at once).
#[test]
fn power_loss_at_random_io_operations_loses_nothing_acknowledged() {
    let mut crashes = 0u64;
    let mut lost_unsynced = 0u64;
    for seq in 0..SEQUENCES {
        let mut rng = CrashRng::new(0x5eed_0000 + seq);
        let mut io = PowerLossIo::new();
        let mut acked = Acked::default();
        for cycle in 0..CYCLES {
            let context = format!("sequence {seq} cycle {cycle}");
            let (wal, _) = Wal::open_with_io(config(), Arc::new(io.clone()))
                .unwrap_or_else(|e| panic!("{context}: reopening the crash image failed: {e}"));
            check(&wal, &acked, &context);
            // Power fails somewhere in the next stretch of operations.
            io.fail_after(1 + rng.upto(120) as u64);
            let before = acked.frames.len();
            workload(&wal, &mut acked, &mut rng, 60);
            drop(wal);
            let image = io.crash(&mut rng);
            lost_unsynced += u64::from(acked.frames.len() == before);
            io = image;
            crashes += 1;
        }
        let (wal, _) = Wal::open_with_io(config(), Arc::new(io.clone())).unwrap();
        check(&wal, &acked, &format!("sequence {seq} final"));
    }
    assert_eq!(crashes, SEQUENCES * CYCLES);
    eprintln!(
        "power loss: {crashes} crashes, {lost_unsynced} of them before any acknowledgement in \
         their cycle"
    );
}
