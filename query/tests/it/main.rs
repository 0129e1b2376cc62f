//! The read path against a store written by the real miner and encoders.

mod support;

use std::sync::Arc;

use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::physical_plan::ExecutionPlan;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};
use ourios_query::{LineQuery, Order, Severity};
use support::{DAY0, HOUR, Line, Writer, ids_and_lines, line, tenant};

const ALL: &str = "SELECT record_lsn, record_index, line FROM logs";

/// Lines no tokenizer sees every day: Unicode, tabs, runs of spaces, trailing space, empty,
/// a long one, one with a newline.
fn awkward_lines() -> Vec<String> {
    let mut lines: Vec<String> = vec![
        "user alice logged in from 10.0.0.1".into(),
        "user bob logged in from 10.0.0.2".into(),
        "user carol   logged in from 10.0.0.3 ".into(),
        "\tindented\tby tabs\t".into(),
        String::new(),
        "ünïcödé ✓ 日本語 id=42".into(),
        "java.lang.IllegalStateException: boom\n\tat a.b.C.d(C.java:10)\n\tat a.b.E.f(E.java:20)"
            .into(),
        "x".repeat(10_000),
    ];
    for i in 0..50 {
        lines.push(format!("GET /api/v1/items/{i} 200 {}ms", i * 7));
    }
    lines
}

/// Proves every stored line comes back byte for byte from the `logs` view, once per record
/// id, for several tenants; the ids are the ones written.
#[tokio::test]
async fn every_line_comes_back_byte_for_byte() {
    let mut w = Writer::new();
    for t in ["acme", "globex"] {
        let lines: Vec<Line> = awkward_lines()
            .iter()
            .enumerate()
            .map(|(i, l)| line(DAY0 + i as i64 * 60_000_000_000, &format!("{t}: {l}")))
            .collect();
        w.write(t, &lines).await;
    }
    let reader = w.reader();
    for t in ["acme", "globex"] {
        let scope = reader.scope(&tenant(t)).await.unwrap();
        let got = ids_and_lines(&scope, ALL).await;
        let want: std::collections::BTreeMap<_, _> = w
            .expected
            .iter()
            .filter(|((tt, _), _)| tt == t)
            .map(|((_, id), l)| (*id, l.clone()))
            .collect();
        assert_eq!(got, want, "tenant {t}");
        // The same through LineQuery's plan (the fast first-copy filter, not the grouping).
        let mut lines = line_texts(&scope, &LineQuery::default()).await;
        lines.sort();
        let mut want: Vec<String> = want.into_values().collect();
        want.sort();
        assert_eq!(lines, want, "tenant {t}, line query");
    }
}

/// The `line` of every row a line query yields, in its order.
async fn line_texts(scope: &ourios_query::TenantScope, q: &LineQuery) -> Vec<String> {
    use futures::TryStreamExt;
    let batches: Vec<_> = q.stream(scope).await.unwrap().try_collect().await.unwrap();
    let mut out = Vec::new();
    for b in &batches {
        let line = datafusion::arrow::compute::cast(
            b.column_by_name("line").unwrap(),
            &arrow_schema::DataType::Utf8,
        )
        .unwrap();
        let line = arrow_array::cast::AsArray::as_string::<i32>(&line);
        out.extend((0..arrow_array::Array::len(line)).map(|i| line.value(i).to_owned()));
    }
    out
}

/// Proves a store holding a duplicate object (the same records under a second name) still
/// reads each record once, while the raw `records` table shows both copies.
#[tokio::test]
async fn a_duplicate_object_reads_once() {
    let mut w = Writer::new();
    let lines: Vec<Line> = (0..20)
        .map(|i| line(DAY0 + i * 1_000_000_000, &format!("request {i} served")))
        .collect();
    let paths = w.write("acme", &lines).await;
    for p in &paths {
        let bytes = w.store.get(p).await.unwrap().bytes().await.unwrap();
        let copy = Path::from(format!(
            "{}.copy.parquet",
            p.as_ref().trim_end_matches(".parquet")
        ));
        w.store.put(&copy, PutPayload::from(bytes)).await.unwrap();
    }
    let scope = w.reader().scope(&tenant("acme")).await.unwrap();
    let got = ids_and_lines(&scope, ALL).await;
    assert_eq!(got.len(), 20);
    let raw = scope
        .sql("SELECT count(*) FROM records")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let raw =
        datafusion::arrow::compute::cast(raw[0].column(0), &arrow_schema::DataType::Int64).unwrap();
    assert_eq!(
        raw.as_any()
            .downcast_ref::<arrow_array::Int64Array>()
            .unwrap()
            .value(0),
        40,
        "both copies are in the store"
    );
    let counted = scope
        .sql("SELECT count(*) FROM logs")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let counted =
        datafusion::arrow::compute::cast(counted[0].column(0), &arrow_schema::DataType::Int64)
            .unwrap();
    assert_eq!(
        counted
            .as_any()
            .downcast_ref::<arrow_array::Int64Array>()
            .unwrap()
            .value(0),
        20
    );
    // LineQuery's first-copy filter, with a limit past the copies and both orders.
    for order in [Order::OldestFirst, Order::NewestFirst] {
        let q = LineQuery {
            order,
            limit: Some(100),
            ..Default::default()
        };
        let lines = line_texts(&scope, &q).await;
        assert_eq!(lines.len(), 20, "{order:?}");
        let unique: std::collections::BTreeSet<_> = lines.iter().collect();
        assert_eq!(unique.len(), 20);
    }
    let q = LineQuery {
        contains: vec!["request 1".into()],
        ..Default::default()
    };
    assert_eq!(
        line_texts(&scope, &q).await.len(),
        11,
        "request 1 and 10-19, once each"
    );
}

/// Proves a record whose template definition is not in the store yet is not read (I3 from the
/// reader's side), and that once the audit object lands a new scope reads it, the registry
/// reading only the new object.
#[tokio::test]
async fn a_record_without_a_readable_template_is_not_read_until_it_is() {
    let mut w = Writer::new();
    let first: Vec<Line> = (0..5)
        .map(|i| line(DAY0 + i, &format!("alpha {i}")))
        .collect();
    w.write("acme", &first).await;
    let (records, events) = w.mine("acme", &[line(DAY0 + 100, "a brand new shape of line")]);
    assert!(!events.is_empty(), "a new template defines its key");
    w.put_records("acme", &records).await;
    let reader = w.reader();
    let scope = reader.scope(&tenant("acme")).await.unwrap();
    let got = ids_and_lines(&scope, ALL).await;
    assert_eq!(
        got.len(),
        5,
        "the record without its definition is left out"
    );
    assert!(!got.values().any(|l| l.contains("brand new")));
    w.put_audit("acme", &events).await;
    let scope = reader.scope(&tenant("acme")).await.unwrap();
    let got = ids_and_lines(&scope, ALL).await;
    assert_eq!(got.len(), 6);
    assert_eq!(
        got.get(&records[0].id).unwrap(),
        "a brand new shape of line"
    );
}

/// Proves the registry refresh reads only audit objects it has not read before.
#[tokio::test]
async fn the_registry_refresh_is_incremental() {
    let mut w = Writer::new();
    w.write("acme", &[line(DAY0, "one shape 1")]).await;
    let mut registry = ourios_query::Registry::default();
    let t = tenant("acme");
    let r = registry.refresh(w.store.as_ref(), "", &t).await.unwrap();
    assert_eq!((r.objects_read, r.keys_added), (1, 1));
    let r = registry.refresh(w.store.as_ref(), "", &t).await.unwrap();
    assert_eq!((r.objects_read, r.keys_added), (0, 0));
    w.write("acme", &[line(DAY0, "another form entirely here")])
        .await;
    let r = registry.refresh(w.store.as_ref(), "", &t).await.unwrap();
    assert_eq!((r.objects_read, r.keys_added), (1, 1));
    assert_eq!(registry.templates().len(), 2);
}

/// Proves one tenant never sees another's rows: not through the view, not by naming the other
/// tenant in a filter, not by DDL naming its prefix, not through a URL table, and not for a
/// tenant whose name is a prefix of another's; a crafted tenant name is refused before any
/// scope exists.
#[tokio::test]
async fn a_scope_sees_one_tenant_only() {
    let mut w = Writer::new();
    w.write("b", &[line(DAY0, "secret of b")]).await;
    w.write("bb", &[line(DAY0, "secret of bb")]).await;
    w.write("a", &[line(DAY0, "line of a")]).await;
    let reader = w.reader();
    let a = reader.scope(&tenant("a")).await.unwrap();
    let all = ids_and_lines(&a, ALL).await;
    assert_eq!(all.values().collect::<Vec<_>>(), vec!["line of a"]);
    for sql in [
        "SELECT record_lsn, record_index, line FROM logs WHERE line LIKE '%secret%'",
        "SELECT record_lsn, record_index, ourios_line(template_key, params, body) FROM records WHERE tenant = 'b'",
    ] {
        assert!(ids_and_lines(&a, sql).await.is_empty(), "{sql}");
    }
    for sql in [
        "CREATE EXTERNAL TABLE other STORED AS PARQUET LOCATION 'ourios://store/records/tenant=b/'",
        "SELECT * FROM 'ourios://store/records/tenant=b/'",
        "INSERT INTO records SELECT * FROM records",
        "SET datafusion.execution.batch_size = 1",
    ] {
        assert!(a.sql(sql).await.is_err(), "{sql} was accepted");
    }
    let b = reader.scope(&tenant("b")).await.unwrap();
    let lines: Vec<String> = ids_and_lines(&b, ALL).await.into_values().collect();
    assert_eq!(lines, vec!["secret of b"], "b does not see bb");
    for crafted in ["a/../b", "a/", "..%2Fb", "", "a b", "tenant=b"] {
        assert!(ourios_wal::TenantId::new(crafted).is_err(), "{crafted:?}");
    }
}

fn files_scanned(plan: &Arc<dyn ExecutionPlan>) -> usize {
    let mut n = 0;
    if let Some(config) = plan
        .downcast_ref::<DataSourceExec>()
        .and_then(|exec| exec.data_source().downcast_ref::<FileScanConfig>())
    {
        n += config.file_groups.iter().map(|g| g.len()).sum::<usize>();
    }
    for child in plan.children() {
        n += files_scanned(child);
    }
    n
}

/// The files a line query's physical plan scans.
async fn files_planned(scope: &ourios_query::TenantScope, q: &LineQuery) -> usize {
    let df = q.dataframe(scope).await.unwrap();
    files_scanned(&df.create_physical_plan().await.unwrap())
}

/// Proves a time-bounded query opens only the partitions in its range: as the store grows by
/// whole days of hourly objects, the files a one-hour query scans stay the same, while an
/// unbounded query's grow.
#[tokio::test]
async fn a_time_bounded_query_scans_only_its_partitions() {
    let mut w = Writer::new();
    let mut bounded = Vec::new();
    let mut unbounded = Vec::new();
    for day in 0..3 {
        for hour in 0..24 {
            let t = DAY0 + (day * 24 + hour) * HOUR;
            let lines: Vec<Line> = (0..3)
                .map(|i| line(t + i, &format!("tick {day} {hour} {i}")))
                .collect();
            w.write("acme", &lines).await;
        }
        let scope = w.reader().scope(&tenant("acme")).await.unwrap();
        let q = LineQuery {
            since: Some(DAY0 + 5 * HOUR + 10),
            until: Some(DAY0 + 6 * HOUR - 10),
            ..Default::default()
        };
        bounded.push(files_planned(&scope, &q).await);
        unbounded.push(files_planned(&scope, &LineQuery::default()).await);
    }
    assert_eq!(
        bounded,
        vec![1, 1, 1],
        "one hour's partition, whatever the store holds"
    );
    assert_eq!(unbounded, vec![24, 48, 72]);
}

/// Pruned row groups and files (by statistics) across the plan's scans, after it ran.
fn pruned_by_statistics(plan: &Arc<dyn ExecutionPlan>) -> (usize, usize) {
    use datafusion::physical_plan::metrics::MetricValue;
    let (mut pruned, mut matched) = (0, 0);
    if let Some(metrics) = plan.metrics() {
        for m in metrics.iter() {
            let MetricValue::PruningMetrics {
                name,
                pruning_metrics,
            } = m.value()
            else {
                continue;
            };
            if name == "row_groups_pruned_statistics" {
                pruned += pruning_metrics.pruned();
                matched += pruning_metrics.matched();
            } else if name == "files_ranges_pruned_statistics" {
                pruned += pruning_metrics.pruned();
            }
        }
    }
    for child in plan.children() {
        let (p, m) = pruned_by_statistics(child);
        pruned += p;
        matched += m;
    }
    (pruned, matched)
}

/// Proves the time filter reaches the Parquet scan through the `logs` view's deduplication:
/// within one hour's partition, an object whose times lie outside the range is skipped by its
/// statistics (its row group never decoded), and a range covering both reads both.
#[tokio::test]
async fn row_groups_outside_the_range_are_skipped_by_statistics() {
    let mut w = Writer::new();
    let hour = DAY0 + 7 * HOUR;
    let minute = 60_000_000_000;
    let early: Vec<Line> = (0..50)
        .map(|i| line(hour + i * 1_000_000, &format!("early {i}")))
        .collect();
    let late: Vec<Line> = (0..50)
        .map(|i| line(hour + 50 * minute + i * 1_000_000, &format!("late {i}")))
        .collect();
    w.write("acme", &early).await;
    w.write("acme", &late).await;
    let scope = w.reader().scope(&tenant("acme")).await.unwrap();
    let run = |since: i64, until: i64| {
        let scope = &scope;
        async move {
            let q = LineQuery {
                since: Some(since),
                until: Some(until),
                ..Default::default()
            };
            let df = q.dataframe(scope).await.unwrap();
            let ctx = scope.context().task_ctx();
            let plan = df.create_physical_plan().await.unwrap();
            let batches = datafusion::physical_plan::collect(Arc::clone(&plan), ctx)
                .await
                .unwrap();
            let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
            (rows, files_scanned(&plan), pruned_by_statistics(&plan))
        }
    };
    let (rows, files, (pruned, matched)) = run(hour, hour + 10 * minute).await;
    assert_eq!(rows, 50);
    assert_eq!(files, 2, "both objects are in the hour's partition");
    assert_eq!(
        (pruned, matched),
        (1, 1),
        "the late object is skipped by its statistics"
    );
    let (rows, _, (pruned, matched)) = run(hour, hour + HOUR).await;
    assert_eq!(rows, 100);
    assert_eq!((pruned, matched), (0, 2));
}

/// Proves the line query's filters: time range (half open), severity, text, regex, attributes
/// (log, then resource), order and limit.
#[tokio::test]
async fn line_query_filters() {
    use futures::TryStreamExt;
    let mut w = Writer::new();
    let mut lines = Vec::new();
    for i in 0..40i64 {
        let mut l = line(
            DAY0 + i * 1_000,
            &format!("job {i} finished with code {}", i % 4),
        );
        l.severity = [9, 13, 17, 5][i as usize % 4];
        l.attributes = vec![("shard".into(), format!("s{}", i % 2))];
        l.service = if i < 20 {
            "api".into()
        } else {
            "worker".into()
        };
        lines.push(l);
    }
    w.write("acme", &lines).await;
    let scope = w.reader().scope(&tenant("acme")).await.unwrap();
    let run = |q: LineQuery| {
        let scope = &scope;
        async move {
            let batches: Vec<_> = q.stream(scope).await.unwrap().try_collect().await.unwrap();
            let mut out = Vec::new();
            for b in &batches {
                ourios_query::write_rows(b, ourios_query::Format::Jsonl, false, &mut out).unwrap();
            }
            String::from_utf8(out)
                .unwrap()
                .lines()
                .map(|l| {
                    serde_json::from_str::<serde_json::Value>(l).unwrap()["line"]
                        .as_str()
                        .unwrap()
                        .to_owned()
                })
                .collect::<Vec<_>>()
        }
    };
    let q = |f: &dyn Fn(&mut LineQuery)| {
        let mut q = LineQuery {
            order: Order::OldestFirst,
            ..Default::default()
        };
        f(&mut q);
        q
    };
    let got = run(q(&|q| {
        q.since = Some(DAY0 + 10_000);
        q.until = Some(DAY0 + 13_000);
    }))
    .await;
    assert_eq!(
        got,
        [
            "job 10 finished with code 2",
            "job 11 finished with code 3",
            "job 12 finished with code 0"
        ]
    );
    let got = run(q(&|q| {
        q.severity = Some(Severity::parse(">=warn").unwrap())
    }))
    .await;
    assert_eq!(got.len(), 20);
    assert!(
        got.iter()
            .all(|l| l.ends_with("code 1") || l.ends_with("code 2"))
    );
    let got = run(q(&|q| q.contains = vec!["job 3".into()])).await;
    assert_eq!(
        got,
        [
            "job 3 finished with code 3",
            "job 30 finished with code 2",
            "job 31 finished with code 3",
            "job 32 finished with code 0",
            "job 33 finished with code 1",
            "job 34 finished with code 2",
            "job 35 finished with code 3",
            "job 36 finished with code 0",
            "job 37 finished with code 1",
            "job 38 finished with code 2",
            "job 39 finished with code 3"
        ]
    );
    let got = run(q(&|q| {
        q.matches = vec![r"^job 1\d ".into()];
        q.excludes = vec!["code 0".into()];
    }))
    .await;
    assert_eq!(got.len(), 8, "jobs 10-19 but 12 and 16");
    let got = run(q(&|q| {
        q.attributes = vec![
            ("shard".into(), "s1".into()),
            ("service.name".into(), "worker".into()),
        ]
    }))
    .await;
    assert_eq!(got.len(), 10);
    assert!(got.iter().all(|l| {
        let n: i64 = l.split(' ').nth(1).unwrap().parse().unwrap();
        n >= 20 && n % 2 == 1
    }));
    let got = run(q(&|q| {
        q.order = Order::NewestFirst;
        q.limit = Some(2);
    }))
    .await;
    assert_eq!(
        got,
        ["job 39 finished with code 3", "job 38 finished with code 2"]
    );
    assert!(
        LineQuery {
            matches: vec!["(".into()],
            ..Default::default()
        }
        .predicate()
        .is_err()
    );
}

/// Proves a record sent with a severity text and no number (OTLP's 0, unspecified, which many
/// clients send) is filtered and labelled by its text, in any case and with OTLP's mapping of
/// the syslog names, while a record's number, when it has one, wins over its text; text that
/// names no level stays unspecified.
/// Mutation check (by hand): filter on `severity_number` alone (as before) and the text-only
/// WARN and Error are missing; drop the `severity_number = 0` guard and the record numbered
/// info with text ERROR comes back as an error.
#[tokio::test]
async fn a_record_without_a_severity_number_is_read_by_its_text() {
    use datafusion::arrow::array::AsArray as _;
    use futures::TryStreamExt;
    let cases: [(i32, &str, &str); 8] = [
        (0, "WARN", "warn"),
        (0, " Error ", "error"),
        (0, "notice", "info"),
        (0, "CRITICAL", "error"),
        (0, "emerg", "fatal"),
        (0, "", "unspecified"),
        (0, "loud", "unspecified"),
        (9, "ERROR", "info"),
    ];
    let mut w = Writer::new();
    let lines: Vec<Line> = cases
        .iter()
        .enumerate()
        .map(|(i, (number, text, _))| {
            let mut l = line(DAY0 + i as i64 * 1_000, &format!("case {i}"));
            l.severity = *number;
            l.severity_text = (*text).to_owned();
            l
        })
        .collect();
    w.write("acme", &lines).await;
    let scope = w.reader().scope(&tenant("acme")).await.unwrap();
    let lines_of = |severity: &str| {
        let q = LineQuery {
            severity: Some(Severity::parse(severity).unwrap()),
            order: Order::OldestFirst,
            ..Default::default()
        };
        let scope = &scope;
        async move {
            let batches: Vec<_> = q.stream(scope).await.unwrap().try_collect().await.unwrap();
            let mut got = Vec::new();
            for b in &batches {
                let line = b.column_by_name("line").unwrap().as_string::<i32>();
                got.extend((0..b.num_rows()).map(|r| line.value(r).to_owned()));
            }
            got
        }
    };
    assert_eq!(
        lines_of(">=warn").await,
        ["case 0", "case 1", "case 3", "case 4"]
    );
    assert_eq!(lines_of("=info").await, ["case 2", "case 7"]);
    assert_eq!(lines_of("fatal").await, ["case 4"]);
    // The `severity` label (Loki's streams and matchers) reads the same way.
    let labels = scope
        .records_once()
        .await
        .unwrap()
        .select(vec![
            datafusion::logical_expr::col("time"),
            ourios_query::loki::label_expr("severity").alias("severity"),
        ])
        .unwrap()
        .sort(vec![
            datafusion::logical_expr::col("time").sort(true, false),
        ])
        .unwrap()
        .collect()
        .await
        .unwrap();
    let mut got = Vec::new();
    for b in &labels {
        let severity = b.column(1).as_string::<i32>();
        got.extend((0..b.num_rows()).map(|r| severity.value(r).to_owned()));
    }
    let expected: Vec<&str> = cases.iter().map(|(_, _, label)| *label).collect();
    assert_eq!(got, expected);
}

#[test]
fn severity_ranges() {
    let s = |t| Severity::parse(t).map(|s| (s.min, s.max)).ok();
    assert_eq!(s(">=warn"), Some((13, 24)));
    assert_eq!(s("warn"), Some((13, 16)));
    assert_eq!(s("=ERROR"), Some((17, 20)));
    assert_eq!(s(">info"), Some((13, 24)));
    assert_eq!(s("<info"), Some((1, 8)));
    assert_eq!(s("<=debug"), Some((1, 8)));
    assert_eq!(s(">=7"), Some((7, 24)));
    assert_eq!(s("loud"), None);
    assert_eq!(s("25"), None);
    assert_eq!(Severity::name_of(14), "warn");
    assert_eq!(Severity::name_of(0), "unspecified");
    assert_eq!(Severity::of_text("Warning"), Some(13));
    assert_eq!(Severity::of_text(" notice "), Some(10));
    assert_eq!(Severity::of_text("warnings"), None);
}

mod s3 {
    //! The read path on a real S3-compatible server (s3s-fs in process, SigV4 checked), the
    //! store opened from its URL as `ourios-node query --store s3://...` opens it.

    use std::sync::Arc;

    use futures::TryStreamExt;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use hyper_util::server::conn::auto::Builder as ConnBuilder;
    use object_store::{ObjectStore, ObjectStoreExt};
    use s3s::auth::SimpleAuth;
    use s3s::service::S3ServiceBuilder;

    use super::support::{DAY0, Line, Writer, ids_and_lines, line, tenant};

    /// Proves lines written to an S3 store come back byte for byte through a reader opened
    /// from an `s3://` URL, and a scope there still sees one tenant.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_s3_store_reads_back_byte_for_byte() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("logs")).unwrap();
        let mut builder = S3ServiceBuilder::new(s3s_fs::FileSystem::new(root.path()).unwrap());
        builder.set_auth(SimpleAuth::from_single("key", "secret"));
        let service = builder.build();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let http = ConnBuilder::new(TokioExecutor::new());
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    continue;
                };
                let conn = http
                    .serve_connection(TokioIo::new(socket), service.clone())
                    .into_owned();
                tokio::spawn(async move {
                    let _ = conn.await;
                });
            }
        });
        let url = format!(
            "s3://logs/prod?endpoint=http://{addr}&allow_http=true&region=us-east-1\
             &access_key_id=key&secret_access_key=secret&virtual_hosted_style_request=false"
        );
        let s3 = ourios_sinks::store_from_url(&url).unwrap();
        // Written the node's way into memory, then copied object for object into the bucket.
        let mut w = Writer::new();
        let lines: Vec<Line> = (0..30)
            .map(|i| line(DAY0 + i * 1_000_000_000, &format!("s3 line {i} ✓\tdone")))
            .collect();
        w.write("acme", &lines).await;
        w.write("other", &[line(DAY0, "not acme's")]).await;
        let objects: Vec<_> = w.store.list(None).try_collect().await.unwrap();
        for meta in objects {
            let bytes = w
                .store
                .get(&meta.location)
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap();
            s3.put(&meta.location, bytes.into()).await.unwrap();
        }
        let reader = ourios_query::Reader::new(s3 as Arc<dyn ObjectStore>, "");
        let scope = reader.scope(&tenant("acme")).await.unwrap();
        let got = ids_and_lines(&scope, "SELECT record_lsn, record_index, line FROM logs").await;
        let want: std::collections::BTreeMap<_, _> = w
            .expected
            .iter()
            .filter(|((t, _), _)| t == "acme")
            .map(|((_, id), l)| (*id, l.clone()))
            .collect();
        assert_eq!(got, want);
        server.abort();
    }
}
