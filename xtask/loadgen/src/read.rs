//! The read benchmark (`cargo xtask bench query`): `fill` sends a store's worth of records to a
//! running node over OTLP/HTTP (the ingest path), with times spread over the last hours; `read`
//! times the read path on that store, in process, side by side in the same run with DuckDB
//! counting and filtering the same Parquet files.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::TryStreamExt;
use ourios_query::{LineQuery, Order, Reader};
use ourios_testkit::http::{self, Conn};
use ourios_testkit::otlp;
use prost::Message;

use crate::{BATCH, Rng, body, severity};

#[derive(Debug, clap::Args)]
pub(crate) struct FillArgs {
    /// Server address.
    #[arg(long)]
    target: SocketAddr,
    /// Records to send.
    #[arg(long, default_value_t = 10_000_000)]
    records: u64,
    /// The records' times are spread evenly over this many hours, ending 5 minutes ago.
    #[arg(long, default_value_t = 24)]
    hours: u64,
    /// The tenant (`X-Scope-OrgID`).
    #[arg(long, default_value = "bench")]
    tenant: String,
    /// Keep-alive connections (each encodes its own requests).
    #[arg(long, default_value_t = 4)]
    connections: usize,
}

/// Send `args.records` records; each request's records carry consecutive times of the spread.
pub(crate) fn fill(args: &FillArgs) -> Result<()> {
    let requests = args.records.div_ceil(BATCH as u64);
    let span = args.hours * 3_600_000_000_000;
    let end = otlp::now_nanos() - 300_000_000_000;
    let start_time = end - span;
    let step = span / args.records.max(1);
    let next = AtomicU64::new(0);
    let sent = AtomicU64::new(0);
    let started = Instant::now();
    thread::scope(|s| -> Result<()> {
        let mut handles = Vec::new();
        for c in 0..args.connections.max(1) {
            let (next, sent) = (&next, &sent);
            handles.push(s.spawn(move || -> Result<()> {
                let mut conn = Conn::open(args.target, Duration::from_secs(120))?;
                let mut rng = Rng::with_seed(0x5eed + c as u64);
                loop {
                    // Relaxed: a ticket counter; nothing else is published through it.
                    let r = next.fetch_add(1, Ordering::Relaxed);
                    if r >= requests {
                        return Ok(());
                    }
                    let records = (0..BATCH as u64)
                        .map(|i| {
                            let t = start_time + (r * BATCH as u64 + i) * step;
                            otlp::record((t, t), severity(&mut rng), &body(&mut rng), Vec::new())
                        })
                        .collect();
                    let resource = vec![
                        otlp::attr("service.name", &format!("svc-{}", r % 4)),
                        otlp::attr("host.name", "bench-host"),
                    ];
                    let payload = otlp::request(resource, records).encode_to_vec();
                    let head = http::request_head(
                        args.target,
                        "POST",
                        "/v1/logs",
                        &[
                            ("Content-Type", "application/x-protobuf"),
                            ("X-Scope-OrgID", &args.tenant),
                        ],
                        payload.len(),
                        false,
                    );
                    loop {
                        let answer = conn.send(&head, &payload)?;
                        match answer.status {
                            200 => break,
                            // Pushed back while the store catches up: wait as told, retry.
                            503 => thread::sleep(Duration::from_millis(200)),
                            status => bail!("POST /v1/logs answered {status}: {}", answer.text()),
                        }
                    }
                    let done = sent.fetch_add(BATCH as u64, Ordering::Relaxed) + BATCH as u64;
                    if done.is_multiple_of(1_000_000) {
                        eprintln!(
                            "fill: {done} of {} records acknowledged ({:.0?})",
                            args.records,
                            started.elapsed()
                        );
                    }
                }
            }));
        }
        for h in handles {
            h.join()
                .map_err(|_| anyhow::anyhow!("a fill thread panicked"))??;
        }
        Ok(())
    })?;
    eprintln!(
        "fill: {} records acknowledged in {:.1?}",
        sent.load(Ordering::Relaxed),
        started.elapsed()
    );
    Ok(())
}

#[derive(Debug, clap::Args)]
pub(crate) struct ReadArgs {
    /// The store directory (`<data_dir>/store`).
    #[arg(long)]
    store: PathBuf,
    /// The tenant.
    #[arg(long, default_value = "bench")]
    tenant: String,
    /// A python with duckdb importable (the interop venv's).
    #[arg(long)]
    python: PathBuf,
    /// Where the markdown table goes.
    #[arg(long)]
    out: PathBuf,
    /// Timed runs per query (the best is kept, after one warm-up run).
    #[arg(long, default_value_t = 3)]
    runs: usize,
}

/// The best of `runs` timed runs, after one warm-up; and the last run's result.
async fn best<T, F, Fut>(runs: usize, mut f: F) -> Result<(Duration, T)>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut result = f().await?;
    let mut best = Duration::MAX;
    for _ in 0..runs.max(1) {
        let t = Instant::now();
        result = f().await?;
        best = best.min(t.elapsed());
    }
    Ok((best, result))
}

async fn count(df: ourios_query::datafusion::dataframe::DataFrame) -> Result<u64> {
    Ok(df.count().await? as u64)
}

/// DuckDB's best-of-`runs` time and result for `sql`, run in one python process per query
/// (threads = the cores, as DataFusion's).
fn duckdb(python: &Path, store: &Path, sql: &str, runs: usize) -> Result<(Duration, String)> {
    let script = format!(
        r#"
import duckdb, os, sys, time
con = duckdb.connect()
con.execute("SET threads TO {threads}")
q = sys.argv[1].replace("RECORDS", "read_parquet('{records}/*/*/*.parquet', hive_partitioning = true)")
result = con.execute(q).fetchall()
best = None
for _ in range({runs}):
    t = time.perf_counter()
    result = con.execute(q).fetchall()
    best = (time.perf_counter() - t) if best is None else min(best, time.perf_counter() - t)
print(best, result[0][0] if result and len(result[0]) == 1 else len(result))
"#,
        threads = thread::available_parallelism().map_or(2, |n| n.get()),
        records = store.join("records").join("tenant=bench").display(),
        runs = runs.max(1),
    );
    let out = Command::new(python)
        .arg("-c")
        .arg(script)
        .arg(sql)
        .output()
        .context("running duckdb")?;
    if !out.status.success() {
        bail!("duckdb failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let (secs, value) = text
        .trim()
        .split_once(' ')
        .context("duckdb printed no timing")?;
    Ok((Duration::from_secs_f64(secs.parse()?), value.to_owned()))
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// Time the read path on the store and DuckDB on the same files; print and write the table.
pub(crate) fn read(args: &ReadArgs) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(read_async(args))
}

async fn read_async(args: &ReadArgs) -> Result<()> {
    let cores = thread::available_parallelism().map_or(2, |n| n.get());
    let url = format!("file://{}", std::path::absolute(&args.store)?.display());
    let store = ourios_sinks::store_from_url(&url)?;
    let reader = Reader::new(store, "");
    let tenant = ourios_wal::TenantId::new(&args.tenant)?;
    let runs = args.runs;
    let mut table = String::new();
    let mut row = |what: &str, ours: String, duck: String, ratio: String, goal: &str| {
        let line = format!("| {what} | {ours} | {duck} | {ratio} | {goal} |");
        println!("{line}");
        let _ = writeln!(table, "{line}");
    };
    println!("| query | ourios (DataFusion) | DuckDB, same files | ratio | goal |");
    println!("|---|---|---|---|---|");

    // The newest and oldest times, and a one-hour window in the middle.
    let scope = reader.scope(&tenant).await?;
    let span = scope
        .sql("SELECT min(time), max(time), count(*) FROM records")
        .await?
        .collect()
        .await?;
    let cast = |i: usize| -> Result<i64> {
        let c = ourios_query::datafusion::arrow::compute::cast(
            span[0].column(i),
            &ourios_query::datafusion::arrow::datatypes::DataType::Int64,
        )?;
        Ok(c.as_any()
            .downcast_ref::<ourios_query::datafusion::arrow::array::Int64Array>()
            .context("an int64")?
            .value(0))
    };
    let (lo, hi, rows) = (cast(0)?, cast(1)?, cast(2)?);
    if rows < 1_000_000 {
        bail!("the store holds {rows} records; fill it first");
    }
    const HOUR: i64 = 3_600_000_000_000;
    let mid = lo + (hi - lo) / 2;
    let window = (
        mid - mid.rem_euclid(HOUR),
        mid - mid.rem_euclid(HOUR) + HOUR,
    );
    println!("store: {rows} record rows, {} hours", (hi - lo) / HOUR + 1);

    // 0. What every query below pays first: the registry refresh (an audit listing) and a
    //    session with its tables and view.
    let (open, _) = best(runs, || async {
        reader.scope(&tenant).await?;
        Ok(())
    })
    .await?;
    row(
        "open a tenant scope (registry refresh, session), warm",
        ms(open),
        "—".into(),
        "—".into(),
        "in every row below",
    );

    // 1. Count every record once: the line query's plan (first-copy filter), and the SQL
    //    view (grouping) in a row of its own.
    let (ours, n) = best(runs, || async {
        let scope = reader.scope(&tenant).await?;
        count(LineQuery::default().dataframe(&scope).await?).await
    })
    .await?;
    let (view, vn) = best(runs, || async {
        count(
            reader
                .scope(&tenant)
                .await?
                .sql("SELECT * FROM logs")
                .await?,
        )
        .await
    })
    .await?;
    if vn != n {
        bail!("the logs view counts {vn}, the line query {n}");
    }
    let (duck, dn) = duckdb(
        &args.python,
        &args.store,
        "SELECT count(*) FROM (SELECT DISTINCT wal_id, record_lsn, record_index FROM RECORDS)",
        runs,
    )?;
    let (raw, _) = duckdb(
        &args.python,
        &args.store,
        "SELECT count(*) FROM RECORDS",
        runs,
    )?;
    if dn != n.to_string() {
        bail!("counts differ: ours {n}, DuckDB {dn}");
    }
    row(
        &format!("count, each record once ({n})"),
        ms(ours),
        format!("{} (distinct ids; {} counting rows)", ms(duck), ms(raw)),
        format!("{:.2}x", ours.as_secs_f64() / duck.as_secs_f64()),
        "<= 2x",
    );
    row(
        "count, each record once, through the SQL view `logs`",
        ms(view),
        ms(duck),
        format!("{:.2}x", view.as_secs_f64() / duck.as_secs_f64()),
        "—",
    );

    // 2. A one-hour window, warn and above: partitions and row groups pruned.
    let q = LineQuery {
        since: Some(window.0),
        until: Some(window.1),
        severity: Some(ourios_query::Severity::parse(">=warn")?),
        ..Default::default()
    };
    let (ours, n) = best(runs, || async {
        let scope = reader.scope(&tenant).await?;
        count(q.dataframe(&scope).await?).await
    })
    .await?;
    let (date, hour) = {
        let secs = window.0 / 1_000_000_000;
        let day = secs.div_euclid(86_400);
        (
            ourios_sinks::Day::from_days_since_epoch(day).to_string(),
            format!("{:02}", secs.rem_euclid(86_400) / 3600),
        )
    };
    let (duck, dn) = duckdb(
        &args.python,
        &args.store,
        &format!(
            "SELECT count(*) FROM (SELECT DISTINCT wal_id, record_lsn, record_index FROM RECORDS \
             WHERE date = '{date}' AND hour = '{hour}' AND severity_number >= 13)"
        ),
        runs,
    )?;
    if dn != n.to_string() {
        bail!("one-hour counts differ: ours {n}, DuckDB {dn}");
    }
    row(
        &format!("count, one hour, severity >= warn ({n})"),
        ms(ours),
        ms(duck),
        format!("{:.2}x", ours.as_secs_f64() / duck.as_secs_f64()),
        "<= 2x",
    );

    // 3. Text search on rebuilt lines, every record: lines/s per core. DuckDB searches the
    //    params of the same rows (it cannot rebuild lines); the needle is digits, which only
    //    params hold, so both count the same rows.
    let needle = "77777";
    let q = LineQuery {
        contains: vec![needle.to_owned()],
        ..Default::default()
    };
    let (ours, n) = best(runs, || async {
        let scope = reader.scope(&tenant).await?;
        count(q.dataframe(&scope).await?).await
    })
    .await?;
    let (duck, dn) = duckdb(
        &args.python,
        &args.store,
        &format!(
            "SELECT count(*) FROM (SELECT DISTINCT wal_id, record_lsn, record_index FROM RECORDS \
             WHERE contains(array_to_string(params, ' '), '{needle}'))"
        ),
        runs,
    )?;
    if dn != n.to_string() {
        bail!("text-search counts differ: ours {n}, DuckDB {dn}");
    }
    let per_core = rows as f64 / ours.as_secs_f64() / cores as f64;
    row(
        &format!("text search, every line rebuilt ({n} of {rows} match)"),
        format!("{} ({:.2} M lines/s per core)", ms(ours), per_core / 1e6),
        format!("{} (on params)", ms(duck)),
        format!("{:.2}x", ours.as_secs_f64() / duck.as_secs_f64()),
        ">= 1 M lines/s per core",
    );

    // 4. First line of a time-bounded query (newest first, limit 100), warm: scope, plan,
    //    first batch.
    let q = LineQuery {
        since: Some(window.0),
        until: Some(window.1),
        limit: Some(100),
        order: Order::NewestFirst,
        ..Default::default()
    };
    let (first, _) = best(runs, || async {
        let scope = reader.scope(&tenant).await?;
        let mut stream = q.stream(&scope).await?;
        let batch = stream.try_next().await?;
        Ok(batch.map_or(0, |b| b.num_rows()))
    })
    .await?;
    row(
        "first line, one-hour window, newest first",
        ms(first),
        "—".into(),
        "—".into(),
        "< 100 ms",
    );

    // 5. Every line of the hour, rebuilt and written as text.
    let q = LineQuery {
        since: Some(window.0),
        until: Some(window.1),
        order: Order::OldestFirst,
        ..Default::default()
    };
    let (all, lines) = best(runs, || async {
        let scope = reader.scope(&tenant).await?;
        let mut stream = q.stream(&scope).await?;
        let mut sink = std::io::sink();
        let mut n = 0u64;
        let mut first = true;
        while let Some(batch) = stream.try_next().await? {
            n += batch.num_rows() as u64;
            ourios_query::write_rows(&batch, ourios_query::Format::Text, first, &mut sink)?;
            first = false;
        }
        Ok(n)
    })
    .await?;
    row(
        &format!("full lines out, one hour ({lines} lines, text)"),
        format!(
            "{} ({:.2} M lines/s)",
            ms(all),
            lines as f64 / all.as_secs_f64() / 1e6
        ),
        "—".into(),
        "—".into(),
        "—",
    );

    let header = format!(
        "# cargo xtask bench query\n\n{rows} record rows of tenant `{}`, written through the \
         node's ingest path; {cores} cores; best of {runs} warm runs each.\n\n| query | ourios \
         (DataFusion) | DuckDB, same files | ratio | goal |\n|---|---|---|---|---|\n",
        args.tenant
    );
    if let Some(dir) = args.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&args.out, header + &table)?;
    println!("written to {}", args.out.display());
    Ok(())
}
