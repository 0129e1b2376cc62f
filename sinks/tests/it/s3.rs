//! The sinks against a real S3-compatible server: s3s-fs served in process on `127.0.0.1:0`,
//! checking SigV4 signatures, reached by `object_store`'s S3 client over HTTP. What the in-memory
//! `FaultyStore` injects elsewhere, these tests get from a real server: a signature rejection
//! (RFC 0056's permanent failure) and a server that went away (a transient one).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use object_store::aws::AmazonS3Builder;
use object_store::{ObjectStore, ObjectStoreExt, RetryConfig};
use ourios_recoverable::RecoverableBatch;
use ourios_sinks::{
    ErrorClass, RecordId, RecordSinkConfig, SharedParquetAuditSink, SharedParquetSink, Tenant,
    TenantAudit, classify,
};
use s3s::auth::SimpleAuth;
use s3s::service::S3ServiceBuilder;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

use crate::common::{FAILPOINTS, HOUR, T0, block_on, count, created, rec};

const BUCKET: &str = "ourios";
const KEY: &str = "ourios-test-key";
const SECRET: &str = "ourios-test-secret";

/// An s3s-fs server running on the test's runtime. Every connection it accepts is served by a
/// task in the server task's own `JoinSet`, so aborting the server task closes its listener and
/// every open connection: the server is gone, not merely no longer accepting.
struct Server {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Server {
    /// Serve `root` (buckets are its subdirectories) on `addr` (port 0 picks a free port).
    async fn start(root: &Path, addr: SocketAddr) -> Self {
        let mut builder = S3ServiceBuilder::new(s3s_fs::FileSystem::new(root).unwrap());
        builder.set_auth(SimpleAuth::from_single(KEY, SECRET));
        let service = builder.build();
        let listener = TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let http = ConnBuilder::new(TokioExecutor::new());
            let mut connections = JoinSet::new();
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    continue;
                };
                let conn = http
                    .serve_connection(TokioIo::new(socket), service.clone())
                    .into_owned();
                connections.spawn(async move {
                    let _ = conn.await;
                });
                while connections.try_join_next().is_some() {}
            }
        });
        Self { addr, task }
    }

    /// Abort the server and wait until its listener and connections are dropped.
    async fn stop(self) -> SocketAddr {
        self.task.abort();
        assert!(self.task.await.unwrap_err().is_cancelled());
        self.addr
    }
}

/// A fresh store root with the bucket created (s3s-fs lists a missing bucket as an error).
fn store_root() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join(BUCKET)).unwrap();
    dir
}

/// `object_store`'s S3 client for the server at `addr`, signing with `secret`. No retries: a
/// failed request returns at once, which keeps the tests fast and makes one put one request.
fn client(addr: SocketAddr, secret: &str) -> Arc<dyn ObjectStore> {
    let store = AmazonS3Builder::new()
        .with_endpoint(format!("http://{addr}"))
        .with_allow_http(true)
        .with_virtual_hosted_style_request(false)
        .with_region("us-east-1")
        .with_bucket_name(BUCKET)
        .with_access_key_id(KEY)
        .with_secret_access_key(secret)
        .with_retry(RetryConfig {
            max_retries: 0,
            retry_timeout: Duration::from_secs(5),
            ..RetryConfig::default()
        })
        .build()
        .unwrap();
    Arc::new(store)
}

/// Both sinks on `store`, triggers off (every publish is an explicit drain).
fn sinks(store: &Arc<dyn ObjectStore>) -> (SharedParquetAuditSink, SharedParquetSink) {
    let audit = SharedParquetAuditSink::new(Arc::clone(store), Default::default());
    let sink = SharedParquetSink::new(
        Arc::clone(store),
        audit.clone(),
        RecordSinkConfig {
            target_partition_bytes: usize::MAX,
            ceiling_bytes: usize::MAX,
            zstd: true,
            prefix: String::new(),
        },
    );
    (audit, sink)
}

/// `write_ordered` by hand: the buffered audit events through `write_owned`, then every buffered
/// record partition through `publish_owned`. Returns the audit outcome and the partitions put.
async fn write_audit_then_records(
    audit: &SharedParquetAuditSink,
    sink: &SharedParquetSink,
) -> (ourios_sinks::AuditOutcome, ourios_sinks::PublishReport) {
    let mut groups = RecoverableBatch::new(audit.take_groups(), Arc::new(audit.clone()));
    let outcome = audit.write_owned(&mut groups).await;
    drop(groups);
    let mut slot = Vec::new();
    sink.drain_all(&mut slot);
    let mut records = RecoverableBatch::new(slot, Arc::new(sink.clone()));
    let report = sink.publish_owned(&mut records).await;
    drop(records);
    (outcome, report)
}

/// Parquet files below `dir` on the server's disk.
fn parquet_files(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| e.path())
        .map(|p| {
            if p.is_dir() {
                parquet_files(&p)
            } else {
                usize::from(p.extension().is_some_and(|e| e == "parquet"))
            }
        })
        .sum()
}

/// Records and audit events of two tenants, written audit first through `write_owned` and then
/// `publish_owned` into a real S3 server, read back from it by record id and by audit sequence
/// number: every id and every seq exactly once (no fault was injected, so no put is ambiguous
/// and no duplicate is allowed). A second round appends one more record to a partition that is
/// already in the store, with the same lowest frame lsn, so its object name differs from the
/// first round's only by the process counter: S3 overwrites a key silently, and only the unique
/// name keeps the first round's rows. The objects are on the server's disk, one per put.
///
/// Reasoned mutation (not run as a mutant): drop `-{n:08}` from the `format!` in `unique_name`
/// (store.rs): the second round's put replaces the first round's object for tenant a's 22:00
/// partition and ids (1, 0..3) are missing from the read-back.
#[test]
fn s3_records_and_audit_publish_and_read_back_by_id() {
    let _failpoints = FAILPOINTS.read().unwrap_or_else(PoisonError::into_inner);
    let root = store_root();
    block_on(async {
        let server = Server::start(root.path(), "127.0.0.1:0".parse().unwrap()).await;
        let store = client(server.addr, SECRET);
        let (audit, sink) = sinks(&store);

        let sa = audit.emit(created("a", i128::from(T0), 1));
        let sb = audit.emit(created("b", i128::from(T0 + HOUR), 2));
        let mut expected = Vec::new();
        for (tenant, lsn, n, time, seq) in [
            ("a", 1, 3, T0, sa),
            ("a", 2, 2, T0 + HOUR, sa),
            ("b", 3, 2, T0, sb),
        ] {
            for index in 0..n {
                let _ = sink.append(rec(tenant, lsn, index, time, seq));
                expected.push(RecordId { lsn, index });
            }
        }
        let (outcome, report) = write_audit_then_records(&audit, &sink).await;
        assert!(outcome.all_durable(), "{outcome:?}");
        assert_eq!(outcome.durable(), vec![Tenant::new("a"), Tenant::new("b")]);
        assert!(report.all_durable(), "{report:?}");
        assert_eq!((report.durable, report.durable_records), (3, 7));

        // Round two: same partition (tenant a, 22:00), same lowest lsn, a newer audit event.
        let sa2 = audit.emit(created("a", i128::from(T0), 3));
        let _ = sink.append(rec("a", 1, 3, T0, sa2));
        expected.push(RecordId { lsn: 1, index: 3 });
        let (outcome, report) = write_audit_then_records(&audit, &sink).await;
        assert_eq!(outcome.get(&Tenant::new("a")), Some(&TenantAudit::Durable));
        assert_eq!((report.durable, report.durable_records), (1, 1));

        let ids = count(
            ourios_sinks::read_record_ids(store.as_ref(), "")
                .await
                .unwrap(),
        );
        expected.sort();
        assert_eq!(ids.keys().copied().collect::<Vec<_>>(), expected);
        assert!(ids.values().all(|n| *n == 1), "{ids:?}");

        let events = ourios_sinks::read_audit_events(store.as_ref(), "")
            .await
            .unwrap();
        let seqs = count(
            events
                .iter()
                .map(|(s, e)| (*s, e.tenant.as_str().to_owned())),
        );
        assert_eq!(
            seqs.into_iter().collect::<Vec<_>>(),
            vec![
                ((sa, "a".to_owned()), 1),
                ((sb, "b".to_owned()), 1),
                ((sa2, "a".to_owned()), 1),
            ]
        );
        server.stop().await;
    });
    let bucket = root.path().join(BUCKET);
    assert_eq!(parquet_files(&bucket.join("records")), 4, "one per put");
    assert_eq!(parquet_files(&bucket.join("audit")), 3, "one per put");
}

/// RFC 0056 through a real store: a client signing with the wrong secret key gets the server's
/// SigV4 rejection (HTTP 403 `SignatureDoesNotMatch`); `classify` reads it as `Permanent`, and
/// `write_owned` reports the tenant `PermanentlyFailed` naming the rejection, settles its group
/// (not requeued: nothing to retry until an operator repairs the credentials), marks the tenant
/// failed, and never reports its events durable. Nothing reached the bucket, as a correctly
/// signed client confirms; that client's own put succeeds, so the rejection was the signature.
///
/// Reasoned mutation (not run as a mutant): in `classify`, move `E::PermissionDenied { .. }` out of
/// the permanent arm (it falls to `_ => ErrorClass::Transient`): the rejected put classifies
/// `Transient` (and `write_owned` would retain the tenant and requeue its events forever).
#[test]
fn s3_wrong_secret_is_classified_permanent_and_tenant_audit_fails_permanently() {
    let _failpoints = FAILPOINTS.read().unwrap_or_else(PoisonError::into_inner);
    let root = store_root();
    block_on(async {
        let server = Server::start(root.path(), "127.0.0.1:0".parse().unwrap()).await;
        let good = client(server.addr, SECRET);
        let bad = client(server.addr, "not-the-secret");

        let err = bad
            .put(&object_store::path::Path::from("probe/x"), "x".into())
            .await
            .unwrap_err();
        assert!(
            matches!(err, object_store::Error::PermissionDenied { .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("SignatureDoesNotMatch"), "{err}");
        assert_eq!(classify(&err), ErrorClass::Permanent);

        let (audit, _sink) = sinks(&bad);
        let a = Tenant::new("a");
        let seq = audit.emit(created("a", i128::from(T0), 1));
        let mut batch = RecoverableBatch::new(audit.take_groups(), Arc::new(audit.clone()));
        let outcome = audit.write_owned(&mut batch).await;
        let report = batch.finish();
        match outcome.get(&a) {
            Some(TenantAudit::PermanentlyFailed { reason }) => {
                assert!(reason.contains("SignatureDoesNotMatch"), "{reason}");
            }
            other => panic!("expected a permanent failure, got {other:?}"),
        }
        assert_eq!(outcome.permanently_failed(), vec![a.clone()]);
        assert_eq!((report.durable, report.dropped, report.requeued), (0, 1, 0));
        assert_eq!(audit.buffered_events(), 0, "settled, not requeued");
        assert!(audit.failed_tenants().contains_key(&a));
        assert!(!audit.is_durable_through(&a, seq));

        assert!(
            ourios_sinks::read_audit_events(good.as_ref(), "")
                .await
                .unwrap()
                .is_empty()
        );
        good.put(&object_store::path::Path::from("probe/x"), "x".into())
            .await
            .unwrap();
        server.stop().await;
    });
}

/// A server that went away is transient: after a successful round, the server task is aborted
/// (listener and open connections closed); a put fails with a connection error that `classify`
/// reads as `Transient`, and `write_owned` reports the tenant `Retained` with its events
/// requeued ahead (buffered again, not failed, not durable), so `publish_owned` refuses the
/// dependent record partition (I3) and requeues it. When a server comes back on the same port
/// over the same directory, the same sinks write the retained events and then the records, and
/// every id is read back exactly once.
///
/// The connection error reaches `classify` as `Generic`, with an `io::Error` of kind
/// `ConnectionRefused` (or `ConnectionReset`, if a pooled connection was cut mid-request) at the
/// end of its source chain.
///
/// Reasoned mutation (not run as a mutant): in `classify`'s `E::Generic` arm, change the io-kind
/// match's `_ => ErrorClass::Transient` to `ErrorClass::Permanent`: the refused put classifies
/// `Permanent` (and the tenant would be made terminal by a restart of its server).
#[test]
fn s3_server_gone_is_transient() {
    let _failpoints = FAILPOINTS.read().unwrap_or_else(PoisonError::into_inner);
    let root = store_root();
    block_on(async {
        let server = Server::start(root.path(), "127.0.0.1:0".parse().unwrap()).await;
        let store = client(server.addr, SECRET);
        let (audit, sink) = sinks(&store);
        let a = Tenant::new("a");

        let s1 = audit.emit(created("a", i128::from(T0), 1));
        let _ = sink.append(rec("a", 1, 0, T0, s1));
        let (outcome, report) = write_audit_then_records(&audit, &sink).await;
        assert!(outcome.all_durable() && report.all_durable());

        let addr = server.stop().await;
        let err = store
            .put(&object_store::path::Path::from("probe/x"), "x".into())
            .await
            .unwrap_err();
        assert_eq!(classify(&err), ErrorClass::Transient, "{err:?}");

        let s2 = audit.emit(created("a", i128::from(T0), 2));
        let _ = sink.append(rec("a", 2, 0, T0, s2));
        let (outcome, report) = write_audit_then_records(&audit, &sink).await;
        assert_eq!(outcome.get(&a), Some(&TenantAudit::Retained));
        assert_eq!(audit.buffered_seqs(&a), vec![s2], "requeued");
        assert!(audit.failed_tenants().is_empty());
        assert!(!audit.is_durable_through(&a, s2));
        assert_eq!((report.durable, report.refused_unordered), (0, 1));
        assert_eq!(sink.buffered_ids(&a), vec![RecordId { lsn: 2, index: 0 }]);

        let server = Server::start(root.path(), addr).await;
        let (outcome, report) = write_audit_then_records(&audit, &sink).await;
        assert!(outcome.all_durable() && report.all_durable());
        assert_eq!(report.durable_records, 1);
        let ids = count(
            ourios_sinks::read_record_ids(store.as_ref(), "")
                .await
                .unwrap(),
        );
        assert_eq!(
            ids.into_iter().collect::<Vec<_>>(),
            vec![
                (RecordId { lsn: 1, index: 0 }, 1),
                (RecordId { lsn: 2, index: 0 }, 1),
            ]
        );
        let seqs = ourios_sinks::read_audit_events(store.as_ref(), "")
            .await
            .unwrap();
        assert_eq!(count(seqs.iter().map(|(s, _)| *s)).len(), 2);
        server.stop().await;
    });
}

/// A store URL configures S3 through `object_store`'s own keys: `store_from_url` with the
/// server's endpoint, credentials and a prefix in the query string publishes a record that lands
/// under the prefix on the server's disk and reads back by id through the URL's store; an
/// option `object_store` does not know is refused by name instead of being ignored.
#[test]
fn s3_store_url_options_reach_the_client() {
    let _failpoints = FAILPOINTS.read().unwrap_or_else(PoisonError::into_inner);
    let root = store_root();
    block_on(async {
        let server = Server::start(root.path(), "127.0.0.1:0".parse().unwrap()).await;
        let url = format!(
            "s3://{BUCKET}/tenants/prod?endpoint=http://{}&allow_http=true&region=us-east-1\
             &access_key_id={KEY}&secret_access_key={SECRET}&virtual_hosted_style_request=false",
            server.addr
        );
        let store = ourios_sinks::store_from_url(&url).unwrap();
        let (audit, sink) = sinks(&store);
        let _ = audit.emit(created("a", i128::from(T0), 1));
        let _ = sink.append(rec("a", 7, 0, T0, 1));
        let (outcome, report) = write_audit_then_records(&audit, &sink).await;
        assert_eq!(outcome.durable(), vec![Tenant::new("a")], "{outcome:?}");
        assert_eq!(report.durable, 1, "{report:?}");
        let ids = ourios_sinks::read_record_ids(store.as_ref(), "")
            .await
            .unwrap();
        assert_eq!(ids, vec![RecordId { lsn: 7, index: 0 }]);
        assert_eq!(
            parquet_files(&root.path().join(BUCKET).join("tenants/prod/records")),
            1,
            "the object is below the URL's prefix"
        );
        server.stop().await;
    });
    let bad = format!("s3://{BUCKET}?endpoint=http://127.0.0.1:1&no_such_option=1");
    let e = ourios_sinks::store_from_url(&bad)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("no_such_option"), "{e}");
}
