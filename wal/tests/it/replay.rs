//! Replay modes per DESIGN §7: `Skipped` (`lsn <= S_t`), `RegenerationOnly`
//! (`S_t < lsn <= X_t`), `Normal` (above both), per tenant.

use ourios_wal::{Lsn, ReplayMode, Stamp};

use crate::common::{open, payload, replay_all, tempdir, tenant};

/// Proves each frame gets the mode of its own tenant's marks, across a reopen: tenant `a`
/// (`S = 4`, `X = 8`) has skipped, regeneration-only and normal frames; tenant `b` (never
/// stamped) is all normal; tenant `c` (`X = 9`, no snapshot) is regeneration-only up to 9.
/// Reasoned mutation (not run as a mutant): in `Marks::mode`, compare `lsn <= self.frontier` first
/// and `a`'s first frames come back `RegenerationOnly` instead of `Skipped`.
#[test]
fn replay_mode_follows_each_tenants_snapshot_and_frontier() {
    let dir = tempdir();
    let (a, b, c) = (tenant("a"), tenant("b"), tenant("c"));
    let owners = [&a, &b, &c];
    {
        let (wal, _) = open(dir.path());
        for i in 0..15u64 {
            wal.append(owners[(i % 3) as usize], &payload(i, 20))
                .unwrap();
        }
        wal.stamp(&[
            Stamp {
                tenant: &a,
                frontier: Lsn(4),
                snapshot: Some(b"a@4"),
            },
            Stamp {
                tenant: &c,
                frontier: Lsn(9),
                snapshot: None,
            },
        ])
        .unwrap();
        wal.stamp_frontier(&a, Lsn(8)).unwrap();
    }
    let (wal, _) = open(dir.path());
    let frames = replay_all(&wal);
    assert_eq!(frames.len(), 15);
    for f in frames {
        let expected = match f.tenant.as_str() {
            "a" if f.lsn <= Lsn(4) => ReplayMode::Skipped,
            "a" if f.lsn <= Lsn(8) => ReplayMode::RegenerationOnly,
            "c" if f.lsn <= Lsn(9) => ReplayMode::RegenerationOnly,
            _ => ReplayMode::Normal,
        };
        assert_eq!(f.mode, expected, "lsn {} tenant {}", f.lsn, f.tenant);
        assert_eq!(f.payload(), &payload(f.lsn.0 - 1, 20)[..]);
    }
}

/// Proves a replay covers the WAL as it stood when it began: frames appended during it are not
/// returned by it (and are by the next replay).
/// Reasoned mutation (not run as a mutant): in `Wal::begin_replay`, report `u64::MAX` as each
/// segment's length and the first replay fails reading past the synced end.
#[test]
fn replay_covers_the_wal_as_it_stood_when_it_began() {
    let dir = tempdir();
    let (wal, _) = open(dir.path());
    let t = tenant("t");
    for i in 0..3 {
        wal.append(&t, &payload(i, 10)).unwrap();
    }
    let mut replay = wal.replay();
    let first = replay.next().unwrap().unwrap();
    wal.append(&t, b"during").unwrap();
    let rest: Vec<_> = replay.map(Result::unwrap).collect();
    assert_eq!(first.lsn, Lsn(1));
    assert_eq!(
        rest.iter().map(|f| f.lsn).collect::<Vec<_>>(),
        vec![Lsn(2), Lsn(3)]
    );
    assert_eq!(replay_all(&wal).len(), 4);
}
