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
/// Mutation check: map `PermissionDenied` to `Transient` in `classify`: the first assertion
/// fails.
#[test]
fn classify_permanent_and_transient_errors() {
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
/// Mutation check: drop the `create_dir_all` in `store_from_url`: the nested directory does not
/// exist and building fails.
#[test]
fn store_from_url_file_and_memory_and_refusals() {
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
