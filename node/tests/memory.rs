//! Memory per request (DESIGN §14, "decoded cost is bounded"): what an acknowledged request
//! holds until it is published, counted by a counting global allocator.
//!
//! Its own test binary with one test: the allocator counts every thread of the process, so
//! nothing else may run beside the measurement.

use std::alloc::System;
use std::sync::Arc;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use ourios_node::otlp::{self, Format};
use ourios_node::{Config, Node, NodeOptions, ServeArgs};
use prost::Message;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn text(s: String) -> Option<AnyValue> {
    Some(AnyValue {
        value: Some(any_value::Value::StringValue(s)),
    })
}

/// One resource with a `blob_bytes` attribute and `records` short records.
fn request(blob_bytes: usize, records: usize) -> ExportLogsServiceRequest {
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: vec![KeyValue {
                    key: "blob".into(),
                    value: text("b".repeat(blob_bytes)),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            scope_logs: vec![ScopeLogs {
                log_records: (0..records)
                    .map(|i| LogRecord {
                        time_unix_nano: 1_700_000_000_000_000_000 + i as u64,
                        body: text(format!("event {i} done in {} ms", i % 97)),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// Bytes allocated and not freed since `region` began.
fn live(region: &Region<'_, System>) -> isize {
    let c = region.change();
    c.bytes_allocated as isize - c.bytes_deallocated as isize + c.bytes_reallocated
}

/// Proves an acknowledged request holds memory within a small multiple of its decoded size
/// (what `otlp::decode` allocated), however many of its records share a large resource
/// attribute: a 16 KiB resource attribute over 2 000 records (a 91 KiB body, 800 KiB decoded)
/// is held once, shared by every record from decode to the buffer. Copied into every record,
/// as before, the same request held 34 MB (42x its decoded size). The records stay in the
/// record buffer (nothing is detached for publishing), so what the request left behind is what
/// the allocator still counts once `ingest` returns; the second round runs with the tenant,
/// its miner and the WAL's buffers already in place.
#[test]
fn an_acknowledged_request_holds_a_small_multiple_of_its_body() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let args = ServeArgs {
            data_dir: Some(dir.path().to_path_buf()),
            listen: Some("127.0.0.1:0".parse().unwrap()),
            sweep_secs: Some(3600),
            barrier_secs: Some(3600),
            encode_workers: Some(0),
            // Nothing is detached for publishing while the test measures.
            partition_target_bytes: Some(1 << 30),
            buffer_ceiling_bytes: Some(1 << 30),
            ..Default::default()
        };
        let node = Node::start(
            Config::resolve(&args).unwrap(),
            NodeOptions {
                store: Some(Arc::new(object_store::memory::InMemory::new())),
                clock: None,
                install_metrics: false,
                recovery_cut_bytes: None,
                wal_io: None,
            },
        )
        .await
        .unwrap();
        // Warm up: the tenant, its miner, the WAL's buffers exist before the measurement.
        for round in 0..2 {
            let body = request(16 << 10, 2_000).encode_to_vec();
            let decoding = Region::new(GLOBAL);
            let (canonical, decoded) = otlp::decode(
                Format::Protobuf,
                None,
                &body,
                otlp::Limits {
                    body_bytes: 16 << 20,
                    records: 100_000,
                },
            )
            .unwrap();
            // The decoded request's own size: what decode allocated beside the canonical copy.
            let decoded_size = live(&decoding) - canonical.len() as isize;
            let region = Region::new(GLOBAL);
            node.core
                .ingest(&ourios_wal::TenantId::new("t").unwrap(), canonical, decoded)
                .await
                .unwrap();
            let held = live(&region) + decoded_size + body.len() as isize;
            let ratio = held as f64 / decoded_size as f64;
            println!(
                "round {round}: body {} bytes, decoded {decoded_size} bytes, held after the ack \
                 {held} bytes ({ratio:.1}x decoded)",
                body.len()
            );
            if round == 1 {
                assert!(
                    held < 3 * decoded_size,
                    "an acknowledged request holds {held} bytes, {ratio:.1}x its decoded size \
                     {decoded_size}"
                );
            }
        }
        node.shutdown().await.unwrap();
    });
}
