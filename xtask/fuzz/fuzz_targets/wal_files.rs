//! A damaged disk: a WAL with frames, marks and a snapshot, one of its files rewritten with
//! fuzzed edits (bytes replaced, the file cut short), then opened again. Opening either fails
//! with an error or succeeds; a replay and an append after it never panic.
#![no_main]

use std::path::PathBuf;
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use ourios_wal::testing::power_loss::PowerLossIo;
use ourios_wal::{Lsn, Stamp, TenantId, Wal, WalConfig, WalIo};

fn config() -> WalConfig {
    let mut c = WalConfig::new("/wal");
    c.max_segment_bytes = 512;
    c.max_segment_age = None;
    c
}

fuzz_target!(|data: &[u8]| {
    let io = PowerLossIo::new();
    {
        let (wal, _) = Wal::open_with_io(config(), Arc::new(io.clone())).expect("a fresh wal");
        let t = TenantId::new("t").expect("a valid tenant");
        let mut last = Lsn(0);
        for i in 0..6u8 {
            last = wal.append(&t, &[i; 100]).expect("append");
        }
        let snapshot = b"state".to_vec();
        wal.stamp(&[Stamp {
            tenant: &t,
            frontier: Lsn(last.0 - 2),
            snapshot: Some(&snapshot),
        }])
        .expect("stamp");
    }
    let Some((&pick, edits)) = data.split_first() else {
        return;
    };
    let mut files: Vec<PathBuf> = Vec::new();
    for dir in ["/wal/segments", "/wal/tenants"] {
        for name in io.list_dir(dir.as_ref()).unwrap_or_default() {
            files.push(PathBuf::from(dir).join(name));
        }
    }
    files.sort();
    let Some(path) = files.get(usize::from(pick) % files.len().max(1)) else {
        return;
    };
    let mut bytes = io.read_file(path).expect("read back");
    let mut chunks = edits.chunks_exact(3);
    for c in &mut chunks {
        if bytes.is_empty() {
            break;
        }
        let at = usize::from(u16::from_le_bytes([c[0], c[1]])) % bytes.len();
        bytes[at] = c[2];
    }
    if let [cut] = chunks.remainder() {
        let keep = bytes.len() * usize::from(*cut) / 255;
        bytes.truncate(keep);
    }
    io.remove_file(path).expect("remove");
    let mut f = io.create_new(path).expect("create");
    f.write_all(&bytes).expect("write");
    f.sync_data().expect("sync");
    drop(f);
    let dir = path.parent().expect("in a directory");
    io.sync_dir(dir).expect("sync dir");

    if let Ok((wal, _)) = Wal::open_with_io(config(), Arc::new(io.clone())) {
        for frame in wal.replay() {
            let _ = frame.map(|f| f.payload().len());
        }
        let _ = wal.read_snapshot(&TenantId::new("t").expect("a valid tenant"));
        let _ = wal.append(&TenantId::new("t").expect("a valid tenant"), b"after");
    }
});
