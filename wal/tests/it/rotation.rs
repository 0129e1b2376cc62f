//! Rotation by size, by age and on request; each segment is named by its first lsn.

use std::fs;
use std::time::Duration;

use ourios_wal::{Lsn, SEGMENT_HEADER_LEN, Wal, frame_len};

use crate::common::{config, payload, replay_all, tempdir, tenant};

/// Base lsn in a segment's file name.
fn base_of(path: &std::path::Path) -> u64 {
    path.file_stem().unwrap().to_str().unwrap().parse().unwrap()
}

/// Proves size rotation seals a segment before a frame would take it past the limit: every
/// segment but the last is within the limit and holds as many frames as fit, and each file is
/// named by the lsn of its first frame.
/// Reasoned mutation (not run as a mutant): drop `too_big` from the rotation condition in
/// `write_batch` and everything lands in one segment.
#[test]
fn rotation_by_size_keeps_segments_within_the_limit() {
    let dir = tempdir();
    let t = tenant("t");
    let frame = frame_len(&t, 1000) as u64;
    let limit = SEGMENT_HEADER_LEN as u64 + 3 * frame + 10;
    let (wal, _) = Wal::open(config(dir.path(), limit)).unwrap();
    for i in 0..10 {
        wal.append(&t, &payload(i, 1000)).unwrap();
    }
    let paths = wal.segment_paths();
    assert_eq!(paths.len(), 4, "3 + 3 + 3 + 1 frames");
    for (k, p) in paths.iter().enumerate() {
        assert_eq!(base_of(p), 1 + 3 * k as u64);
        let len = fs::metadata(p).unwrap().len();
        assert!(len <= limit, "{} is {len} bytes", p.display());
    }
    assert_eq!(wal.stats().rotations, 3);
    assert_eq!(replay_all(&wal).len(), 10);
}

/// Proves age rotation: with a zero age every append after the first seals the segment before
/// writing, and with a long age nothing rotates.
/// Reasoned mutation (not run as a mutant): drop `too_old` from the rotation condition in
/// `write_batch` and the zero-age WAL keeps one segment.
#[test]
fn rotation_by_age_seals_segments_older_than_the_limit() {
    for (age, expected) in [(Duration::ZERO, 5), (Duration::from_secs(3600), 1)] {
        let dir = tempdir();
        let mut cfg = config(dir.path(), 1 << 20);
        cfg.max_segment_age = Some(age);
        let (wal, _) = Wal::open(cfg).unwrap();
        for i in 0..5 {
            wal.append(&tenant("t"), &payload(i, 10)).unwrap();
        }
        assert_eq!(wal.segment_paths().len(), expected, "age {age:?}");
    }
}

/// Proves an explicit rotation seals the active segment when it holds frames (and reports
/// `false` when it holds none), and frames continue, in order, in the new segment.
/// Reasoned mutation (not run as a mutant): in `Wal::rotate`, use `log.active.meta.base` as the new
/// base and the new segment is named below its first frame's lsn (reopen then refuses the overlap).
#[test]
fn rotation_on_request_seals_the_active_segment() {
    let dir = tempdir();
    let t = tenant("t");
    {
        let (wal, _) = Wal::open(config(dir.path(), 1 << 20)).unwrap();
        assert!(!wal.rotate().unwrap(), "empty segment: nothing to seal");
        wal.append(&t, b"one").unwrap();
        wal.append(&t, b"two").unwrap();
        assert!(wal.rotate().unwrap());
        assert!(!wal.rotate().unwrap());
        assert_eq!(wal.append(&t, b"three").unwrap(), Lsn(3));
        let paths = wal.segment_paths();
        assert_eq!(
            paths.iter().map(|p| base_of(p)).collect::<Vec<_>>(),
            vec![1, 3]
        );
    }
    let (wal, _) = Wal::open(config(dir.path(), 1 << 20)).unwrap();
    let got: Vec<_> = replay_all(&wal)
        .iter()
        .map(|f| f.payload().to_vec())
        .collect();
    assert_eq!(
        got,
        vec![b"one".to_vec(), b"two".to_vec(), b"three".to_vec()]
    );
}

/// Proves a frame larger than the segment limit is still written (alone in its segment)
/// rather than refused or split, and an empty active segment is not sealed for it.
/// Reasoned mutation (not run as a mutant): drop `active.meta.has_frames()` from the rotation
/// condition in `write_batch` and the empty first segment is sealed before the big frame (one extra
/// segment).
#[test]
fn rotation_a_frame_larger_than_a_segment_gets_its_own_segment() {
    let dir = tempdir();
    let t = tenant("t");
    let (wal, _) = Wal::open(config(dir.path(), 512)).unwrap();
    wal.append(&t, &[7u8; 2000]).unwrap();
    wal.append(&t, b"small").unwrap();
    assert_eq!(wal.segment_paths().len(), 2);
    assert_eq!(replay_all(&wal)[0].payload(), &[7u8; 2000][..]);
}
