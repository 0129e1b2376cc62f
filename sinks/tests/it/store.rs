//! Store construction from URLs and error classification.

use object_store::ObjectStoreExt;
use object_store::path::Path;
use ourios_sinks::{ErrorClass, classify, store_from_url};

use crate::common::{T0, block_on, rec};

fn generic_io(kind: std::io::ErrorKind) -> object_store::Error {
    object_store::Error::Generic {
        store: "test",
        source: Box::new(std::io::Error::new(kind, "x")),
    }
}

/// The documented classification: credential, request and configuration errors are permanent;
/// timeouts, connection resets and unknown generic failures are transient.
///
/// Reasoned mutation (not run as a mutant): map `PermissionDenied` to `Transient` in `classify`:
/// the first assertion fails.
#[test]
fn classify_permanent_and_transient_errors() {
    let _failpoints = crate::common::FAILPOINTS
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let boxed = || -> Box<dyn std::error::Error + Send + Sync> { "x".into() };
    let permanent = [
        object_store::Error::PermissionDenied {
            path: "p".into(),
            source: boxed(),
        },
        object_store::Error::Unauthenticated {
            path: "p".into(),
            source: boxed(),
        },
        object_store::Error::Precondition {
            path: "p".into(),
            source: boxed(),
        },
        object_store::Error::NotFound {
            path: "p".into(),
            source: boxed(),
        },
        object_store::Error::NotSupported { source: boxed() },
        generic_io(std::io::ErrorKind::PermissionDenied),
        generic_io(std::io::ErrorKind::ReadOnlyFilesystem),
    ];
    for e in &permanent {
        assert_eq!(classify(e), ErrorClass::Permanent, "{e}");
    }
    let transient = [
        generic_io(std::io::ErrorKind::TimedOut),
        generic_io(std::io::ErrorKind::ConnectionReset),
        generic_io(std::io::ErrorKind::StorageFull),
        object_store::Error::Generic {
            store: "http",
            source: "server error 503".into(),
        },
    ];
    for e in &transient {
        assert_eq!(classify(e), ErrorClass::Transient, "{e}");
    }
}

/// `file://` builds a local store rooted at the directory (created if missing) that the sink
/// publishes into and reads back by id; `memory://` works; unknown schemes and relative file
/// URLs are refused with the URL named; `s3://` without the `aws` feature says so.
///
/// Reasoned mutation (not run as a mutant): drop the `create_dir_all` in `store_from_url`: the
/// nested directory does not exist and building fails.
#[test]
fn store_from_url_file_and_memory_and_refusals() {
    let _failpoints = crate::common::FAILPOINTS
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("nested/store");
    let url = format!("file://{}", root.display());
    let store = store_from_url(&url).unwrap();
    let audit = ourios_sinks::SharedParquetAuditSink::new(store.clone(), Default::default());
    let sink = ourios_sinks::SharedParquetSink::new(store.clone(), audit, Default::default());
    let _ = sink.append(rec("a", 1, 0, T0, 0));
    block_on(async {
        let mut slot = Vec::new();
        sink.drain_all(&mut slot);
        let mut batch =
            ourios_recoverable::RecoverableBatch::new(slot, std::sync::Arc::new(sink.clone()));
        assert_eq!(sink.publish_owned(&mut batch).await.durable, 1);
        let ids = ourios_sinks::read_record_ids(store.as_ref(), "")
            .await
            .unwrap();
        assert_eq!(ids, vec![ourios_sinks::RecordId { lsn: 1, index: 0 }]);
        let mem = store_from_url("memory://").unwrap();
        mem.put(&Path::from("x"), "y".into()).await.unwrap();
    });
    assert!(root.join("records/tenant=a").is_dir());
    for bad in ["ftp://x", "file://relative/dir", "/plain/path"] {
        let e = store_from_url(bad).err().unwrap().to_string();
        assert!(e.contains(bad), "{e}");
    }
    #[cfg(not(feature = "aws"))]
    assert!(
        store_from_url("s3://bucket/p")
            .err()
            .unwrap()
            .to_string()
            .contains("aws")
    );
}

/// Records every directory sync, in order.
#[derive(Debug, Default)]
struct RecordingSync(std::sync::Mutex<Vec<std::path::PathBuf>>);

impl ourios_sinks::DirSync for RecordingSync {
    fn sync_dir(&self, dir: &std::path::Path) -> std::io::Result<()> {
        self.0.lock().unwrap().push(dir.to_path_buf());
        ourios_sinks::FsyncDir.sync_dir(dir)
    }
}

/// Proves a local put is durable before it returns, down to the directory chain: at start the
/// root and its ancestors are synced; the first put below a directory syncs every directory
/// from the object's up to the root (whoever created them: here the directories exist before
/// the put, as when another put created them concurrently); a second put below the same
/// directory syncs only its own directory, which holds the new entry. (The power-loss model
/// cannot see directory creation; this test counts those syncs.)
///
/// Reasoned mutation (not run as a mutant): replace `Puts::sync_chain` with `Ok(())`: the chain
/// assertion fails.
#[test]
fn local_put_syncs_the_directory_chain_once() {
    let _failpoints = crate::common::FAILPOINTS
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let nested = root.join("records/tenant=a/date=2024-01-01/hour=07");
    std::fs::create_dir_all(&nested).unwrap();
    let syncs = std::sync::Arc::new(RecordingSync::default());
    let store = ourios_sinks::DurableLocalStore::with_syncer(&root, syncs.clone()).unwrap();
    let at_start: Vec<_> = syncs.0.lock().unwrap().drain(..).collect();
    assert_eq!(
        at_start.first(),
        Some(&root),
        "the root first: {at_start:?}"
    );
    assert!(
        at_start.contains(&std::path::PathBuf::from("/")),
        "up to /: {at_start:?}"
    );

    block_on(async {
        store
            .put(
                &Path::from("records/tenant=a/date=2024-01-01/hour=07/x.parquet"),
                vec![1u8, 2, 3].into(),
            )
            .await
            .unwrap();
    });
    let chain: Vec<_> = syncs.0.lock().unwrap().drain(..).collect();
    let want: Vec<_> = [
        "records/tenant=a/date=2024-01-01/hour=07",
        "records/tenant=a/date=2024-01-01",
        "records/tenant=a",
        "records",
    ]
    .iter()
    .map(|d| root.join(d))
    .chain([root.clone()])
    .collect();
    assert_eq!(chain, want, "every directory of the chain, deepest first");
    assert_eq!(std::fs::read(nested.join("x.parquet")).unwrap(), [1, 2, 3]);

    block_on(async {
        store
            .put(
                &Path::from("records/tenant=a/date=2024-01-01/hour=07/y.parquet"),
                vec![4u8].into(),
            )
            .await
            .unwrap();
    });
    assert_eq!(
        syncs.0.lock().unwrap().drain(..).collect::<Vec<_>>(),
        vec![nested.clone()],
        "the object's directory (its new entry), not the chain again"
    );
}

/// RFC0058.3 on the local store: a create-only put that finds its object (linked by an earlier
/// attempt, here another process's store, whose directory syncs this one never saw) answers
/// `AlreadyExists` only after syncing the directory chain, so the caller may settle on it; the
/// object keeps its first content.
///
/// Reasoned mutation (not run as a mutant): in `DurableLocalStore::durable_put`, drop the
/// `AlreadyExists` arm (let the error through unsynced): no directory is synced.
#[test]
fn a_create_only_put_that_finds_its_object_syncs_it_first() {
    let _failpoints = crate::common::FAILPOINTS
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    use object_store::{ObjectStore, PutMode, PutOptions};
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let key = Path::from("records/tenant=a/date=2024-01-01/hour=07/u.parquet");
    let create = || PutOptions {
        mode: PutMode::Create,
        ..PutOptions::default()
    };
    let first = ourios_sinks::DurableLocalStore::new(&root).unwrap();
    block_on(first.put_opts(&key, vec![1u8].into(), create())).unwrap();

    let syncs = std::sync::Arc::new(RecordingSync::default());
    let second = ourios_sinks::DurableLocalStore::with_syncer(&root, syncs.clone()).unwrap();
    syncs.0.lock().unwrap().clear();
    let again = block_on(second.put_opts(&key, vec![2u8].into(), create()));
    assert!(
        matches!(again, Err(object_store::Error::AlreadyExists { .. })),
        "{again:?}"
    );
    let synced: Vec<_> = syncs.0.lock().unwrap().drain(..).collect();
    assert_eq!(
        synced.first(),
        Some(&root.join("records/tenant=a/date=2024-01-01/hour=07")),
        "{synced:?}"
    );
    assert!(synced.contains(&root), "{synced:?}");
    assert_eq!(
        std::fs::read(root.join("records/tenant=a/date=2024-01-01/hour=07/u.parquet")).unwrap(),
        [1]
    );
}

/// Proves the `file://` store is the durable one: a `DurableLocalStore` whose puts go through
/// `StdFs` (the staged file synced before its link, its directory after; the power-loss model
/// proves those steps, `local_store_puts_survive_power_loss_at_every_step`).
#[test]
fn file_url_store_is_the_durable_local_store() {
    let _failpoints = crate::common::FAILPOINTS
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let store = store_from_url(&format!("file://{}", dir.path().display())).unwrap();
    let debug = format!("{store:?}");
    assert!(debug.contains("DurableLocalStore"), "{debug}");
    assert!(debug.contains("StdFs"), "{debug}");
}

/// Proves staging files a crash left behind are removed at start, objects are not, and
/// neither are staging files newer than the start (a put of this process in progress: the
/// cleanup thread used to race the first puts and fail them).
#[test]
fn leftover_staging_files_are_removed() {
    let _failpoints = crate::common::FAILPOINTS
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("records/tenant=a/date=2024-01-01/hour=07");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("1-a-0.parquet"), b"object").unwrap();
    std::fs::write(d.join("1-a-1.parquet#1"), b"staged").unwrap();
    std::fs::write(d.join("1-a-1.parquet#2"), b"staged").unwrap();
    let before = std::time::SystemTime::UNIX_EPOCH;
    assert_eq!(
        ourios_sinks::remove_staging_files(dir.path(), before),
        0,
        "a staging file newer than the start may be a put in progress"
    );
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(1);
    assert_eq!(ourios_sinks::remove_staging_files(dir.path(), later), 2);
    let left: Vec<_> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(left, ["1-a-0.parquet"]);
}

/// Proves a store's start-up cleanup never removes a staging file of its own puts: fresh
/// stores put at once, many times over. (File times are coarser than the clock, so a file
/// staged just after the start could look older than it; the cleanup used to delete such files
/// and fail the put.)
#[test]
fn a_new_store_s_cleanup_never_fails_its_first_puts() {
    let _failpoints = crate::common::FAILPOINTS
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    for i in 0..50 {
        let root = dir.path().join(format!("s{i}"));
        // The directories exist already (a restart), so the cleanup walk reaches them while the
        // first puts stage their files there.
        std::fs::create_dir_all(root.join("records/tenant=a")).unwrap();
        let store = ourios_sinks::DurableLocalStore::new(&root).unwrap();
        block_on(async {
            for k in 0..5 {
                store
                    .put(
                        &Path::from(format!("records/tenant=a/x{k}.parquet")),
                        vec![k as u8].into(),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("store {i} put {k}: {e}"));
            }
        });
    }
}

/// `StdFs`, except for what a test scripts: the first staging name taken (another process's
/// put, or a crash's leftover younger than the cleanup margin, holds it), links failing.
#[derive(Debug, Default)]
struct ScriptedFs {
    fs: ourios_sinks::StdFs,
    staging_taken_once: std::sync::atomic::AtomicBool,
    link_fails: Option<std::io::ErrorKind>,
}

impl ourios_sinks::LocalFs for ScriptedFs {
    fn create_dir_all(&self, dir: &std::path::Path) -> std::io::Result<()> {
        self.fs.create_dir_all(dir)
    }

    fn write_new(&self, path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
        if self
            .staging_taken_once
            .swap(false, std::sync::atomic::Ordering::Relaxed)
        {
            return Err(std::io::ErrorKind::AlreadyExists.into());
        }
        self.fs.write_new(path, bytes)
    }

    fn sync_file(&self, path: &std::path::Path) -> std::io::Result<()> {
        self.fs.sync_file(path)
    }

    fn link_new(&self, from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
        match self.link_fails {
            Some(kind) => Err(kind.into()),
            None => self.fs.link_new(from, to),
        }
    }

    fn rename(&self, from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
        self.fs.rename(from, to)
    }

    fn remove_file(&self, path: &std::path::Path) -> std::io::Result<()> {
        self.fs.remove_file(path)
    }

    fn sync_dir(&self, dir: &std::path::Path) -> std::io::Result<()> {
        self.fs.sync_dir(dir)
    }
}

/// A staging name that is taken is skipped for the next one, not turned into a failed put.
///
/// Reasoned mutation (not run as a mutant): in `Puts::put`, make the staging loop's `AlreadyExists`
/// guard `false`: the put fails (cargo-mutants found this one missed before the test existed).
#[test]
fn a_taken_staging_name_is_skipped() {
    let _failpoints = crate::common::FAILPOINTS
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let fs = ScriptedFs {
        staging_taken_once: true.into(),
        ..ScriptedFs::default()
    };
    let store = ourios_sinks::DurableLocalStore::with_fs(&root, std::sync::Arc::new(fs)).unwrap();
    block_on(store.put(&Path::from("records/a/x.parquet"), vec![7u8].into())).unwrap();
    assert_eq!(
        std::fs::read(root.join("records/a/x.parquet")).unwrap(),
        [7]
    );
}

/// Only a taken name answers `AlreadyExists` (which lets a sealed unit settle): a create-only
/// put whose link fails otherwise is an error of its own, and leaves no staging file or object.
///
/// Reasoned mutation (not run as a mutant): in `Puts::put`, make the `create && AlreadyExists`
/// guard `true`, or its `&&` an `||`: the failed link answers `AlreadyExists` (cargo-mutants found
/// both missed before the test existed).
#[test]
fn a_failed_link_is_not_already_exists() {
    let _failpoints = crate::common::FAILPOINTS
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    use object_store::{ObjectStore, PutMode, PutOptions};
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let fs = ScriptedFs {
        link_fails: Some(std::io::ErrorKind::PermissionDenied),
        ..ScriptedFs::default()
    };
    let store = ourios_sinks::DurableLocalStore::with_fs(&root, std::sync::Arc::new(fs)).unwrap();
    let opts = PutOptions {
        mode: PutMode::Create,
        ..PutOptions::default()
    };
    let put = block_on(store.put_opts(&Path::from("records/a/x.parquet"), vec![7u8].into(), opts));
    match put {
        Err(object_store::Error::AlreadyExists { .. }) | Ok(_) => {
            panic!("a failed link must be an error of its own: {put:?}")
        }
        Err(_) => {}
    }
    let left: Vec<_> = std::fs::read_dir(root.join("records/a")).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Every cloud store `object_store` has a builder for is reached through that builder, with
/// the URL's query options as its configuration keys: an Azure URL against the emulator's
/// well-known account and a Google Cloud Storage URL without signing both build (no network
/// at build time); an option no builder knows is refused by name for each scheme; a plain
/// https store is refused naming the URL.
#[test]
fn cloud_urls_build_with_their_options_and_refuse_unknown_ones() {
    let _failpoints = crate::common::FAILPOINTS
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    assert!(store_from_url("az://logs/prod?use_emulator=true").is_ok());
    assert!(store_from_url("gs://logs/prod?skip_signature=true").is_ok());
    for bad in [
        "s3://logs?no_such=1",
        "gs://logs/prod?no_such=1",
        "az://logs?use_emulator=true&no_such=1",
    ] {
        let e = store_from_url(bad).err().unwrap().to_string();
        assert!(e.contains("no_such"), "{bad}: {e}");
    }
    let e = store_from_url("https://example.com/logs")
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("https://example.com/logs"), "{e}");
}
