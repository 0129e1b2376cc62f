//! Property tests against a reference model: random appends (single and concurrent), rotations,
//! stamps, holds, truncations, reopens and crash cuts of the newest segment at arbitrary byte
//! offsets; and random byte flips anywhere, which must heal only as a torn tail of the newest
//! segment and otherwise fail open naming the segment and offset.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread;

use proptest::prelude::*;

use ourios_wal::{
    BadFrame, Corruption, HoldOutcome, Lsn, OpenError, ReplayMode, SEGMENT_HEADER_LEN, Stamp,
    TenantId, Wal, frame_len,
};

use crate::common::{config, replay_all, tempdir, tenant};

const TENANTS: [&str; 3] = ["a", "bb", "ccc"];
const SEGMENT_BYTES: u64 = 2048;

#[derive(Debug, Clone)]
enum Op {
    Append {
        tenant: usize,
        len: usize,
    },
    AppendConcurrent {
        lens: Vec<usize>,
    },
    Rotate,
    Stamp {
        tenant: usize,
        snapshot: bool,
    },
    Hold {
        tenant: usize,
        back: u64,
    },
    Truncate,
    Reopen,
    /// Drop the WAL, cut the newest segment at `fraction` of its length, reopen.
    CrashCut {
        fraction: f64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..3usize, 0..400usize).prop_map(|(tenant, len)| Op::Append { tenant, len }),
        2 => prop::collection::vec(0..300usize, 2..6).prop_map(|lens| Op::AppendConcurrent { lens }),
        1 => Just(Op::Rotate),
        2 => (0..3usize, any::<bool>()).prop_map(|(tenant, snapshot)| Op::Stamp { tenant, snapshot }),
        1 => (0..3usize, 0..4u64).prop_map(|(tenant, back)| Op::Hold { tenant, back }),
        1 => Just(Op::Truncate),
        1 => Just(Op::Reopen),
        2 => (0.0..=1.0f64).prop_map(|fraction| Op::CrashCut { fraction }),
    ]
}

fn content(lsn_hint: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (lsn_hint as usize * 7 + i * 13) as u8)
        .collect()
}

/// The reference: what must be in the WAL, and each tenant's marks.
#[derive(Debug, Default)]
struct Model {
    /// Acknowledged frames still expected, by lsn: (tenant index, payload).
    frames: std::collections::BTreeMap<u64, (usize, Vec<u8>)>,
    /// Per tenant: (X_t, S_t, hold).
    marks: [(u64, u64, Option<u64>); 3],
}

impl Model {
    fn mode(&self, tenant: usize, lsn: u64) -> ReplayMode {
        let (x, s, _) = self.marks[tenant];
        if lsn <= s {
            ReplayMode::Skipped
        } else if lsn <= x.max(s) {
            ReplayMode::RegenerationOnly
        } else {
            ReplayMode::Normal
        }
    }
}

fn tenants() -> Vec<TenantId> {
    TENANTS.iter().map(|t| tenant(t)).collect()
}

fn newest_segment(dir: &Path) -> PathBuf {
    let mut v: Vec<_> = fs::read_dir(dir.join("segments"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v.pop().unwrap()
}

fn open_model(dir: &Path) -> Wal {
    Wal::open(config(dir, SEGMENT_BYTES)).expect("open").0
}

/// Replays and checks the WAL against the model: every frame above its tenant's snapshot mark
/// is present; frames at or below it may have been truncated away (the model forgets those);
/// whatever is present equals the model and carries the model's mode.
fn check(wal: &Wal, model: &mut Model) -> Result<(), TestCaseError> {
    let names = tenants();
    let frames = replay_all(wal);
    prop_assert!(frames.windows(2).all(|w| w[0].lsn < w[1].lsn));
    let present: HashMap<u64, _> = frames.iter().map(|f| (f.lsn.0, f)).collect();
    for f in &frames {
        let Some((t, payload)) = model.frames.get(&f.lsn.0) else {
            return Err(TestCaseError::fail(format!("unexpected frame {}", f.lsn)));
        };
        prop_assert_eq!(&f.tenant, &names[*t]);
        prop_assert_eq!(f.payload(), &payload[..]);
        prop_assert_eq!(f.mode, model.mode(*t, f.lsn.0), "mode of lsn {}", f.lsn);
    }
    let mut gone = Vec::new();
    for (&lsn, (t, _)) in &model.frames {
        if !present.contains_key(&lsn) {
            prop_assert!(
                lsn <= model.marks[*t].1,
                "lsn {lsn} missing above its snapshot mark"
            );
            gone.push(lsn);
        }
    }
    for lsn in gone {
        model.frames.remove(&lsn);
    }
    for (i, t) in names.iter().enumerate() {
        let mk = wal.marks(t);
        prop_assert_eq!(
            (mk.frontier.0, mk.snapshot.0, mk.hold.map(|h| h.0)),
            model.marks[i]
        );
    }
    Ok(())
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let dir = tempdir();
    let names = tenants();
    let mut model = Model::default();
    let mut wal = Some(open_model(dir.path()));
    for op in ops {
        let w = wal.as_ref().unwrap();
        match op {
            Op::Append { tenant, len } => {
                let payload = content(w.stats().next_lsn.0, len);
                let lsn = w.append(&names[tenant], &payload).unwrap();
                model.frames.insert(lsn.0, (tenant, payload));
            }
            Op::AppendConcurrent { lens } => {
                let shared = Arc::new(wal.take().unwrap());
                let handles: Vec<_> = lens
                    .into_iter()
                    .enumerate()
                    .map(|(i, len)| {
                        let (w, t) = (Arc::clone(&shared), names[i % 3].clone());
                        thread::spawn(move || {
                            let payload = content(1000 + i as u64, len);
                            (w.append(&t, &payload).unwrap(), i % 3, payload)
                        })
                    })
                    .collect();
                for h in handles {
                    let (lsn, t, payload) = h.join().unwrap();
                    model.frames.insert(lsn.0, (t, payload));
                }
                wal = Some(Arc::into_inner(shared).unwrap());
            }
            Op::Rotate => {
                w.rotate().unwrap();
            }
            Op::Stamp { tenant, snapshot } => {
                let at = w.durable_lsn();
                let (x, s, hold) = &mut model.marks[tenant];
                let target = hold.map_or(at.0, |h| at.0.min(h - 1));
                *x = (*x).max(target);
                if snapshot && at.0 > *s && at.0 <= *x {
                    *s = at.0;
                }
                w.stamp(&[Stamp {
                    tenant: &names[tenant],
                    frontier: at,
                    snapshot: snapshot.then_some(&b"state"[..]),
                }])
                .unwrap();
            }
            Op::Hold { tenant, back } => {
                let frame = w.durable_lsn().0.saturating_sub(back).max(1);
                let (x, _, hold) = &mut model.marks[tenant];
                let expected = if *x >= frame {
                    HoldOutcome::AlreadyPast { frontier: Lsn(*x) }
                } else {
                    let h = hold.map_or(frame, |h| h.min(frame));
                    *hold = Some(h);
                    HoldOutcome::Held { frame: Lsn(h) }
                };
                prop_assert_eq!(w.hold(&names[tenant], Lsn(frame)), expected);
            }
            Op::Truncate => {
                w.truncate().unwrap();
            }
            Op::Reopen => {
                drop(wal.take());
                for m in &mut model.marks {
                    m.2 = None;
                }
                wal = Some(open_model(dir.path()));
            }
            Op::CrashCut { fraction } => {
                drop(wal.take());
                for m in &mut model.marks {
                    m.2 = None;
                }
                let path = newest_segment(dir.path());
                let base: u64 = path.file_stem().unwrap().to_str().unwrap().parse().unwrap();
                let len = fs::metadata(&path).unwrap().len();
                let cut = (len as f64 * fraction) as u64;
                fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .unwrap()
                    .set_len(cut)
                    .unwrap();
                // Frames of the newest segment, in order, that end at or before the cut survive.
                let mut at = SEGMENT_HEADER_LEN as u64;
                let mut boundary = at;
                let mut lost = Vec::new();
                for (&lsn, (t, payload)) in model.frames.range(base..) {
                    at += frame_len(&names[*t], payload.len()) as u64;
                    if at <= cut && cut >= SEGMENT_HEADER_LEN as u64 {
                        boundary = at;
                    } else {
                        lost.push(lsn);
                    }
                }
                for lsn in &lost {
                    model.frames.remove(lsn);
                }
                let (reopened, report) = Wal::open(config(dir.path(), SEGMENT_BYTES)).unwrap();
                if cut < SEGMENT_HEADER_LEN as u64 {
                    let torn = report.torn_tail.expect("torn header");
                    prop_assert_eq!((torn.offset, torn.problem), (0, None));
                } else if cut == boundary {
                    prop_assert_eq!(report.torn_tail, None);
                } else {
                    let torn = report.torn_tail.expect("torn tail");
                    prop_assert_eq!((torn.offset, torn.bytes), (boundary, cut - boundary));
                }
                // Appends continue above everything that survived and every frontier.
                let max_x = model.marks.iter().map(|m| m.0).max().unwrap_or(0);
                let floor = model
                    .frames
                    .keys()
                    .next_back()
                    .copied()
                    .unwrap_or(0)
                    .max(max_x);
                prop_assert!(reopened.stats().next_lsn.0 > floor);
                wal = Some(reopened);
            }
        }
        check(wal.as_ref().unwrap(), &mut model)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    /// Proves the WAL matches the reference model under any sequence of appends (single and
    /// concurrent), rotations, stamps with and without snapshots, holds, truncations, reopens
    /// and crash cuts at arbitrary byte offsets of the newest segment: replay returns exactly
    /// the model's frames (frames at or below a snapshot mark may be truncated away, nothing
    /// else), with the model's modes; marks and holds match; a cut inside a frame is reported
    /// as a torn tail at the last whole frame with the exact byte count; appends continue
    /// above every surviving lsn and frontier.
    /// Reasoned mutation (not run as a mutant): in `Wal::open_with_io`, compute `next_lsn` without
    /// `max_mark` and a cut that removes stamped frames lets new frames reuse lsns at or below a
    /// frontier.
    #[test]
    fn sm_wal_matches_model(ops in prop::collection::vec(op(), 1..40)) {
        run(ops)?;
    }

    /// Proves a flipped byte anywhere is never silently skipped: in a sealed segment it fails
    /// open naming that segment and the offset of the frame it hit (0 for the header); in the
    /// newest segment it is a torn tail only if it hit the last frame (which alone is dropped),
    /// and otherwise an error naming the frame and the valid frame after it.
    /// Reasoned mutation (not run as a mutant): in `segment::scan_one`, treat every segment as
    /// newest and flips in sealed segments heal silently instead of failing.
    #[test]
    fn prop_flipped_byte_heals_only_as_a_torn_tail_of_the_newest_segment(
        sealed_lens in prop::collection::vec(1..200usize, 1..5),
        newest_lens in prop::collection::vec(1..200usize, 1..5),
        in_sealed in any::<bool>(),
        pick in any::<prop::sample::Index>(),
    ) {
        let dir = tempdir();
        let t = tenant("t");
        let starts = |lens: &[usize]| {
            let mut at = SEGMENT_HEADER_LEN as u64;
            lens.iter().map(|&l| { let s = at; at += frame_len(&t, l) as u64; (s, at) }).collect::<Vec<_>>()
        };
        {
            let (wal, _) = Wal::open(config(dir.path(), 1 << 20)).unwrap();
            for (i, &l) in sealed_lens.iter().enumerate() {
                wal.append(&t, &content(i as u64, l)).unwrap();
            }
            wal.rotate().unwrap();
            for (i, &l) in newest_lens.iter().enumerate() {
                wal.append(&t, &content(100 + i as u64, l)).unwrap();
            }
        }
        let mut paths: Vec<_> = fs::read_dir(dir.path().join("segments")).unwrap()
            .map(|e| e.unwrap().path()).collect();
        paths.sort();
        let (path, frames) = if in_sealed {
            (paths[0].clone(), starts(&sealed_lens))
        } else {
            (paths[1].clone(), starts(&newest_lens))
        };
        let mut bytes = fs::read(&path).unwrap();
        let at = pick.index(bytes.len());
        bytes[at] ^= 0x5a;
        fs::write(&path, &bytes).unwrap();
        let hit = frames.iter().position(|&(s, e)| s <= at as u64 && (at as u64) < e);
        let result = Wal::open(config(dir.path(), 1 << 20));
        match (in_sealed, hit) {
            (true, None) => prop_assert!(matches!(&result,
                Err(OpenError::Corrupt { segment, offset: 0, problem: Corruption::Header })
                    if *segment == path), "{:?}", result.err()),
            (true, Some(k)) => prop_assert!(matches!(&result,
                Err(OpenError::Corrupt { segment, offset, problem: Corruption::Frame(_) })
                    if *segment == path && *offset == frames[k].0), "{:?}", result.err()),
            (false, None) => prop_assert!(matches!(&result,
                Err(OpenError::Corrupt { segment, offset: 0,
                    problem: Corruption::HeaderBeforeValid { valid_at } })
                    if *segment == path && *valid_at == frames[0].0), "{:?}", result.err()),
            (false, Some(k)) if k + 1 == frames.len() => {
                let (wal, report) = result.expect("a flip in the last frame is a torn tail");
                let torn = report.torn_tail.expect("reported");
                prop_assert_eq!(torn.offset, frames[k].0);
                prop_assert!(matches!(torn.problem,
                    Some(BadFrame::ChecksumMismatch | BadFrame::Truncated | BadFrame::LengthTooSmall)));
                prop_assert_eq!(replay_all(&wal).len(), sealed_lens.len() + newest_lens.len() - 1);
            }
            (false, Some(k)) => prop_assert!(matches!(&result,
                Err(OpenError::Corrupt { segment, offset,
                    problem: Corruption::FrameBeforeValid { valid_at, .. } })
                    if *segment == path && *offset == frames[k].0 && *valid_at == frames[k + 1].0),
                "{:?}", result.err()),
        }
    }
}
