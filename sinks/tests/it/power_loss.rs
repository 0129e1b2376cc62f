//! The local store under power loss (RFC0057.14, the store's half): `DurableLocalStore`'s puts
//! run on the WAL's power-loss model through `LocalFs`, the code `file://` ships with.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use object_store::path::Path;
use object_store::{ObjectStore, PutMode, PutOptions};
use ourios_sinks::DurableLocalStore;
use ourios_sinks::testing::SimFs;
use ourios_wal::testing::power_loss::{CrashRng, PowerLossIo};

/// A sealed unit's object: a create-only key and the one content every attempt puts.
fn unit(i: u64) -> (String, Vec<u8>) {
    (
        format!(
            "records/tenant=t{}/date=2024-01-0{}/hour=0{}/unit-{i}.parquet",
            i % 2,
            1 + i % 3,
            i % 4
        ),
        format!("the records of unit {i} ")
            .repeat(1 + (i as usize % 5))
            .into_bytes(),
    )
}

/// An audit object: a fresh key per put, overwrite mode (as the audit sink puts).
fn audit(run: u64, i: u64) -> (String, Vec<u8>) {
    (
        format!("audit/tenant=t{}/date=2024-01-01/{run}-{i}.parquet", i % 2),
        format!("events {run} {i}").into_bytes(),
    )
}

fn put(
    runtime: &tokio::runtime::Runtime,
    store: &DurableLocalStore,
    key: &str,
    bytes: &[u8],
    create: bool,
) -> object_store::Result<()> {
    let opts = PutOptions {
        mode: if create {
            PutMode::Create
        } else {
            PutMode::Overwrite
        },
        ..PutOptions::default()
    };
    runtime
        .block_on(store.put_opts(&Path::from(key), bytes.to_vec().into(), opts))
        .map(|_| ())
}

/// RFC0057.14 (the store) and RFC0058.3-local: 1 000 runs. In each, a process puts sealed units
/// (create-only) and audit objects (overwrite) and dies at a random operation, the machine
/// staying up (what it wrote stays, synced or not); a second process retries every unit under
/// its key, as recovery does, and puts more, and the power fails at a random operation. In the
/// image, every object a put confirmed (`Ok`, or `AlreadyExists` for a unit) is there with its
/// whole content, and no object is ever visible torn.
///
/// Mutation check (each tried): delete in `Puts::put` the `sync_file` of the staged file, the
/// `sync_chain` after the link or rename, or the `sync_chain` of the `AlreadyExists` arm (a
/// unit the first process linked and the second confirmed vanishes): the run fails.
#[test]
fn local_store_puts_survive_power_loss_at_every_step() {
    let _failpoints = crate::common::FAILPOINTS
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let mut rng = CrashRng::new(0x0057_0014);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (mut confirmed_total, mut found_total, mut mid_put) = (0usize, 0usize, 0usize);
    for run in 0..1_000u64 {
        let sim = PowerLossIo::new();
        let mut confirmed: BTreeMap<String, Vec<u8>> = BTreeMap::new();

        // The first process: dies at a random operation.
        let first = DurableLocalStore::with_fs(&root, Arc::new(SimFs(sim.clone()))).unwrap();
        sim.fail_after(rng.upto(80) as u64);
        for i in 0..6 {
            let (key, bytes) = unit(i);
            if put(&runtime, &first, &key, &bytes, true).is_ok() {
                confirmed.insert(key, bytes);
            }
            let (key, bytes) = audit(run, i);
            if put(&runtime, &first, &key, &bytes, false).is_ok() {
                confirmed.insert(key, bytes);
            }
        }
        sim.restore();

        // The second process retries every unit under its key, puts more, and the power fails.
        let second = DurableLocalStore::with_fs(&root, Arc::new(SimFs(sim.clone()))).unwrap();
        let budget = rng.upto(120) as u64;
        sim.fail_after(budget);
        let calls_before = sim.calls();
        for i in 0..9 {
            let (key, bytes) = unit(i);
            match put(&runtime, &second, &key, &bytes, true) {
                Ok(()) => {
                    confirmed.insert(key, bytes);
                }
                Err(object_store::Error::AlreadyExists { .. }) => {
                    found_total += 1;
                    confirmed.insert(key, bytes);
                }
                Err(_) => {}
            }
        }
        if sim.calls() - calls_before >= budget {
            mid_put += 1;
        }
        let image = sim.crash(&mut rng);
        let files: BTreeMap<PathBuf, Vec<u8>> = image.files_under(&root).into_iter().collect();
        for (key, bytes) in &confirmed {
            assert_eq!(
                files.get(&root.join(key)),
                Some(bytes),
                "run {run}: confirmed object {key} is missing or torn after the power loss"
            );
        }
        for (path, bytes) in &files {
            let name = path.file_name().unwrap().to_string_lossy();
            if name.ends_with(".parquet") && name.starts_with("unit-") {
                let i: u64 = name["unit-".len()..name.len() - ".parquet".len()]
                    .parse()
                    .unwrap();
                assert_eq!(
                    bytes,
                    &unit(i).1,
                    "run {run}: {} is visible torn",
                    path.display()
                );
            }
        }
        confirmed_total += confirmed.len();
    }
    eprintln!(
        "1000 power losses: {confirmed_total} confirmed objects kept, {found_total} units found \
         under their key by a retry, {mid_put} runs lost power inside the retries"
    );
    assert!(found_total > 0 && mid_put > 0 && confirmed_total > 0);
}
