//! Recovery on open: a torn tail on the newest segment is cut and reported; corruption
//! anywhere else is an error naming the segment file and the byte offset.

use std::fs;
use std::path::{Path, PathBuf};

use ourios_wal::{BadFrame, Corruption, Lsn, OpenError, SEGMENT_HEADER_LEN, Wal, frame_len};

use crate::common::{config, open, payload, replay_all, tempdir, tenant};

/// Appends `n` frames of 100-byte payloads; returns each frame's (start, end) byte offset in
/// its segment, assuming one segment.
fn write_frames(dir: &Path, n: u64) -> Vec<(u64, u64)> {
    let (wal, _) = open(dir);
    let t = tenant("t");
    let mut at = SEGMENT_HEADER_LEN as u64;
    (0..n)
        .map(|i| {
            wal.append(&t, &payload(i, 100)).unwrap();
            let len = frame_len(&t, 100) as u64;
            at += len;
            (at - len, at)
        })
        .collect()
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<_> = fs::read_dir(dir.join("segments"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

fn flip(path: &Path, offset: u64) {
    let mut bytes = fs::read(path).unwrap();
    bytes[offset as usize] ^= 0x55;
    fs::write(path, bytes).unwrap();
}

fn cut(path: &Path, len: u64) {
    fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

/// Proves a partial last frame on the newest segment is cut at the end of the last whole
/// frame, reported with offset and size, the whole frames survive, and a second open finds
/// nothing left to heal.
/// Reasoned mutation (not run as a mutant): in `segment::scan_one`, skip `io.truncate(...)` and the
/// second open reports the same torn tail again (and the file keeps its length).
#[test]
fn recovery_partial_last_frame_is_a_torn_tail_cut_and_reported() {
    let dir = tempdir();
    let offsets = write_frames(dir.path(), 5);
    let seg = &segments(dir.path())[0];
    cut(seg, offsets[4].0 + 10);
    let (wal, report) = open(dir.path());
    let torn = report.torn_tail.clone().expect("torn tail");
    assert_eq!(&torn.segment, seg);
    assert_eq!((torn.offset, torn.bytes), (offsets[4].0, 10));
    assert_eq!(torn.problem, Some(BadFrame::Truncated));
    assert_eq!(replay_all(&wal).len(), 4);
    assert_eq!(fs::metadata(seg).unwrap().len(), offsets[4].0);
    drop(wal);
    let (_, report) = open(dir.path());
    assert_eq!(report.torn_tail, None);
}

/// Proves zeros after the last frame (a preallocated or never-written region) are a torn tail.
/// Reasoned mutation (not run as a mutant): treat `LengthTooSmall` as not tearable in `scan_one`
/// and the open fails.
#[test]
fn recovery_zeroed_tail_is_a_torn_tail() {
    let dir = tempdir();
    let offsets = write_frames(dir.path(), 3);
    let seg = &segments(dir.path())[0];
    cut(seg, offsets[2].1 + 4096);
    let (wal, report) = open(dir.path());
    let torn = report.torn_tail.expect("torn tail");
    assert_eq!((torn.offset, torn.bytes), (offsets[2].1, 4096));
    assert_eq!(torn.problem, Some(BadFrame::LengthTooSmall));
    assert_eq!(replay_all(&wal).len(), 3);
}

/// Proves a checksum mismatch in the last frame of the newest segment, with nothing valid
/// after it, is a torn tail: that frame is dropped, the others kept.
/// Reasoned mutation (not run as a mutant): make `find_valid_frame` return `Some(0)` always and
/// this open fails as corruption.
#[test]
fn recovery_bad_checksum_in_the_last_frame_is_a_torn_tail() {
    let dir = tempdir();
    let offsets = write_frames(dir.path(), 4);
    let seg = &segments(dir.path())[0];
    flip(seg, offsets[3].0 + 60);
    let (wal, report) = open(dir.path());
    let torn = report.torn_tail.expect("torn tail");
    assert_eq!(torn.offset, offsets[3].0);
    assert_eq!(torn.problem, Some(BadFrame::ChecksumMismatch));
    let lsns: Vec<_> = replay_all(&wal).iter().map(|f| f.lsn).collect();
    assert_eq!(lsns, vec![Lsn(1), Lsn(2), Lsn(3)]);
}

/// Proves a bad frame in the middle of the newest segment, with valid frames after it, is not
/// healed: open fails naming the segment, the bad frame's offset and where the next valid
/// frame is, and the file is left untouched.
/// Reasoned mutation (not run as a mutant): in `scan_one`, skip the `valid_frame_after` check and
/// the open truncates three acknowledged frames away.
#[test]
fn recovery_bad_frame_followed_by_valid_frames_is_corruption_not_a_torn_tail() {
    let dir = tempdir();
    let offsets = write_frames(dir.path(), 5);
    let seg = segments(dir.path())[0].clone();
    flip(&seg, offsets[1].0 + 40);
    let len = fs::metadata(&seg).unwrap().len();
    let err = Wal::open(config(dir.path(), 1 << 20)).unwrap_err();
    match &err {
        OpenError::Corrupt {
            segment,
            offset,
            problem,
        } => {
            assert_eq!(segment, &seg);
            assert_eq!(*offset, offsets[1].0);
            assert_eq!(
                problem,
                &Corruption::FrameBeforeValid {
                    problem: BadFrame::ChecksumMismatch,
                    valid_at: offsets[2].0
                }
            );
        }
        other => panic!("expected corruption, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains(&seg.display().to_string()), "{msg}");
    assert!(
        msg.contains(&format!("byte offset {}", offsets[1].0)),
        "{msg}"
    );
    assert_eq!(fs::metadata(&seg).unwrap().len(), len);
}

/// Proves damage in a sealed (not newest) segment is always corruption, even in its last
/// frame: a flipped byte and a cut tail both fail open with that segment and offset.
/// Reasoned mutation (not run as a mutant): in `scan_one`, pass `newest = true` for every segment
/// and both cases heal silently, losing acknowledged frames.
#[test]
fn recovery_damage_in_a_sealed_segment_is_an_error_naming_segment_and_offset() {
    for damage in ["flip", "cut"] {
        let dir = tempdir();
        let offsets = write_frames(dir.path(), 3);
        {
            let (wal, _) = open(dir.path());
            assert!(wal.rotate().unwrap());
            wal.append(&tenant("t"), b"in the newest segment").unwrap();
        }
        let sealed = segments(dir.path())[0].clone();
        match damage {
            "flip" => flip(&sealed, offsets[2].0 + 50),
            _ => cut(&sealed, offsets[2].1 - 1),
        }
        let err = Wal::open(config(dir.path(), 1 << 20)).unwrap_err();
        let expected = if damage == "flip" {
            BadFrame::ChecksumMismatch
        } else {
            BadFrame::Truncated
        };
        match err {
            OpenError::Corrupt {
                segment,
                offset,
                problem,
            } => {
                assert_eq!(segment, sealed, "{damage}");
                assert_eq!(offset, offsets[2].0, "{damage}");
                assert_eq!(problem, Corruption::Frame(expected), "{damage}");
            }
            other => panic!("{damage}: expected corruption, got {other:?}"),
        }
    }
}

/// Proves a newest segment whose header was torn (a crash right after creating it) is removed
/// and reported, and appends continue above the frames of the previous segment.
/// Reasoned mutation (not run as a mutant): in `scan_one`, return `Corruption::Header` for the
/// newest segment too and the open fails.
#[test]
fn recovery_torn_header_of_the_newest_segment_is_removed() {
    let dir = tempdir();
    write_frames(dir.path(), 2);
    {
        let (wal, _) = open(dir.path());
        assert!(wal.rotate().unwrap());
    }
    let newest = segments(dir.path())[1].clone();
    cut(&newest, 10);
    let (wal, report) = open(dir.path());
    let torn = report.torn_tail.expect("torn header");
    assert_eq!(
        (torn.segment, torn.offset, torn.problem),
        (newest.clone(), 0, None)
    );
    assert!(!newest.exists());
    assert_eq!(wal.append(&tenant("t"), b"next").unwrap(), Lsn(3));
    assert_eq!(replay_all(&wal).len(), 3);
}

/// Proves a damaged header on a sealed segment is corruption at offset 0.
/// Reasoned mutation (not run as a mutant): drop the magic comparison in `decode_segment_header`
/// and the open succeeds.
#[test]
fn recovery_damaged_header_of_a_sealed_segment_is_an_error() {
    let dir = tempdir();
    write_frames(dir.path(), 2);
    {
        let (wal, _) = open(dir.path());
        assert!(wal.rotate().unwrap());
        wal.append(&tenant("t"), b"x").unwrap();
    }
    let sealed = segments(dir.path())[0].clone();
    flip(&sealed, 3);
    let err = Wal::open(config(dir.path(), 1 << 20)).unwrap_err();
    assert!(
        matches!(&err, OpenError::Corrupt { segment, offset: 0, problem: Corruption::Header }
            if *segment == sealed),
        "{err:?}"
    );
}
