//! Project automation, run as `cargo xtask <task>` (aliased in `.cargo/config.toml`).
//!
//! `cargo xtask ci` runs exactly what CI runs; every other task is a piece of it or a tool for
//! iterating. The tasks shell out to `cargo` with the same toolchain that invoked us and download
//! nothing but the interop check's Python readers (pyarrow, duckdb) into a venv on first use.

mod interop;
mod mutants;
mod rfc;
#[cfg(test)]
mod tidy;

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// Crates whose concurrency boundaries have loom models (`<crate>/tests/loom.rs`): the latch
/// and guards, the ownership handles, the WAL's group commit. The
/// publisher's boundary (the shared completion, park included) is modelled in `barrier`,
/// which owns it; the sinks' I/O stack (tokio, object_store, parquet) is not loom-buildable.
const LOOM_CRATES: &[&str] = &["barrier", "recoverable", "wal"];

/// Loom preemption bound used in CI. With 2 a full model of each boundary finishes in well
/// under a minute per crate on 2 cores; 3 finds nothing more in these models and takes ~10x.
pub(crate) const LOOM_MAX_PREEMPTIONS: &str = "2";

const TASKS: &[(&str, &str)] = &[
    (
        "ci",
        "everything CI runs: fmt, clippy, tests, loom, rustdoc, rfc tables, interop, chaos, fuzz, mutants",
    ),
    (
        "test [crate]",
        "the test suite of the workspace or of one crate (folder name)",
    ),
    ("loom [crate]", "the loom models (all loom crates, or one)"),
    (
        "rfc NNNN [--strict]",
        "run the tests an RFC table names and print id, test, result",
    ),
    (
        "interop",
        "a debug node's Parquet read back with pyarrow and DuckDB (venv in the target dir)",
    ),
    (
        "bench [name]",
        "run one criterion benchmark (or list them); prints ratios vs baselines",
    ),
    (
        "chaos [--secs N] [--debug]",
        "the release node SIGKILLed every 0.5-3 s under 4 writers for N s (60): lost, duplicated",
    ),
    (
        "hostile [--debug]",
        "the hostile-input suite against the release node: refusals by name, stored lines, peak RSS per case",
    ),
    (
        "fuzz [target] [--secs N]",
        "cargo-fuzz targets (nightly) for N s each (60): OTLP bodies, WAL files, snapshots, templates",
    ),
    (
        "mutants [crate...] [--min PCT] [--timeout S] [--shard K/N]",
        "cargo-mutants per crate with its own tests (recoverable, barrier, publisher); fails under 90 %",
    ),
    (
        "bench ingest [flags]",
        "end to end: release node + load generator over HTTP -> target/bench/ingest.md",
    ),
];

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let args: Vec<String> = env::args().skip(1).collect();
    let root = project_root();
    env::set_current_dir(&root)?;
    match args.first().map(String::as_str) {
        None | Some("help" | "-h" | "--help") => {
            print_tasks();
            Ok(())
        }
        Some("ci") => ci(&root),
        Some("test") => test(args.get(1).map(String::as_str)),
        Some("loom") => loom(args.get(1).map(String::as_str)),
        Some("rfc") => {
            let Some(number) = args.get(1) else {
                bail!("usage: cargo xtask rfc NNNN [--strict]")
            };
            let strict = args.iter().any(|a| a == "--strict");
            rfc::run(&root, number, strict)
        }
        Some("interop") => interop::run(&root),
        Some("chaos") => chaos(&args[1..]),
        Some("hostile") => hostile(&args[1..]),
        Some("fuzz") => fuzz(&root, &args[1..]),
        Some("mutants") => mutants::run(&root, &args[1..]),
        Some("bench") if args.get(1).is_some_and(|a| a == "ingest") => bench_ingest(&args[2..]),
        Some("bench") if args.get(1).is_some_and(|a| a == "query") => bench_query(&args[2..]),
        Some("bench") => bench(&root, args.get(1).map(String::as_str)),
        Some(other) => {
            print_tasks();
            bail!("unknown task `{other}`")
        }
    }
}

fn print_tasks() {
    println!("cargo xtask <task>\n\ntasks:");
    for (name, what) in TASKS {
        println!("  {name:<24} {what}");
    }
}

pub(crate) fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

fn ci(root: &Path) -> Result<()> {
    let started = Instant::now();
    step("fmt", || cargo(&["fmt", "--all", "--", "--check"]))?;
    step("clippy", || {
        cargo(&[
            "clippy",
            "--workspace",
            "--all-targets",
            "--locked",
            "--",
            "-D",
            "warnings",
        ])
    })?;
    step("test (unit, integration, doc, tidy)", || test(None))?;
    step("loom", || loom(None))?;
    step("rustdoc", || {
        cargo_env(
            &["doc", "--workspace", "--no-deps", "--locked"],
            &[("RUSTDOCFLAGS", "-D warnings")],
        )
    })?;
    step("rfc 0054", || rfc::run(root, "0054", false))?;
    step("rfc 0056", || rfc::run(root, "0056", false))?;
    step("rfc 0057", || rfc::run(root, "0057", false))?;
    step("rfc 0058", || rfc::run(root, "0058", false))?;
    step("rfc 0059", || rfc::run(root, "0059", false))?;
    step("rfc 0060", || rfc::run(root, "0060", false))?;
    step("interop", || interop_in_ci(root))?;
    // The short form: the debug node (already built), 20 seconds of kills.
    step("chaos (short)", || {
        chaos(&["--secs".into(), "20".into(), "--debug".into()])
    })?;
    // The short form: each cargo-fuzz target for 10 seconds.
    step("fuzz (short)", || fuzz_in_ci(root))?;
    // The short form: one of four shards of each crate's mutants, chosen by the commit.
    step("mutants (one shard)", || mutants::in_ci(root))?;
    println!("xtask ci: all steps passed in {:.0?}", started.elapsed());
    Ok(())
}

/// The independent-reader check needs python3 with venv (and PyPI on first use). `.ci/run` sets
/// `OURIOS_REQUIRE_INTEROP=1`, so in CI a missing python fails the step. Elsewhere a machine
/// with only the Rust toolchain gets a loud notice instead of a failure; where python3 and its
/// venv module exist, the check runs and any failure (pip included) fails the step.
fn interop_in_ci(root: &Path) -> Result<()> {
    let required = env::var_os("OURIOS_REQUIRE_INTEROP").is_some_and(|v| v != "0");
    let python_ok = Command::new("python3")
        .args(["-c", "import venv, ensurepip"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !python_ok && !required {
        println!(
            "interop: NOT RUN: python3 with its venv module is not installed here (CI installs \
             it and requires this step; run `cargo xtask interop` after installing python3-venv)"
        );
        return Ok(());
    }
    interop::run(root)
}

/// The fuzz targets need cargo-fuzz and the nightly toolchain. `.ci/run` installs cargo-fuzz
/// and requires the step; elsewhere a machine without it gets a notice.
fn fuzz_in_ci(root: &Path) -> Result<()> {
    let required = env::var_os("OURIOS_REQUIRE_FUZZ").is_some_and(|v| v != "0");
    let available = Command::new("cargo")
        .args(["+nightly", "fuzz", "--version"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !available && !required {
        println!(
            "fuzz: NOT RUN: cargo-fuzz or the nightly toolchain is not installed here (CI \
             installs cargo-fuzz and requires this step; `cargo install --locked cargo-fuzz`)"
        );
        return Ok(());
    }
    // Unoptimised: the step is a smoke run of each target, and an optimised sanitizer build of
    // the node's dependencies took most of the step's time; the long form stays optimised.
    fuzz(root, &["--secs".into(), "10".into(), "--dev".into()])
}

fn step(name: &str, f: impl FnOnce() -> Result<()>) -> Result<()> {
    println!("\n==> {name}");
    let started = Instant::now();
    let result = f().with_context(|| format!("ci step `{name}` failed"));
    println!("<== {name}: {:.1?}", started.elapsed());
    result
}

fn test(krate: Option<&str>) -> Result<()> {
    match krate {
        None => cargo(&["test", "--workspace", "--locked", "--no-fail-fast"]),
        Some(k) => cargo(&["test", "--locked", "-p", &package(k)]),
    }
}

fn loom(krate: Option<&str>) -> Result<()> {
    let crates: Vec<&str> = match krate {
        Some(k) => vec![k],
        None => LOOM_CRATES.to_vec(),
    };
    let target = loom_target_dir();
    for k in crates {
        if !Path::new(k).join("tests/loom.rs").exists() {
            println!("loom: {k} has no tests/loom.rs yet");
            continue;
        }
        cargo_env(
            &[
                "test",
                "--locked",
                "--release",
                "-p",
                &package(k),
                "--test",
                "loom",
            ],
            &[
                ("RUSTFLAGS", "--cfg loom"),
                (
                    "CARGO_TARGET_DIR",
                    target.to_str().context("target dir is not UTF-8")?,
                ),
                ("LOOM_MAX_PREEMPTIONS", LOOM_MAX_PREEMPTIONS),
            ],
        )?;
    }
    Ok(())
}

/// Loom builds use `--cfg loom`, which changes every crate's fingerprint; a separate target dir
/// keeps them from invalidating the ordinary build cache.
pub(crate) fn loom_target_dir() -> PathBuf {
    target_dir().join("loom")
}

/// Cargo's target directory: `CARGO_TARGET_DIR`, or `<root>/target`.
fn target_dir() -> PathBuf {
    env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| project_root().join("target"))
}

fn bench(root: &Path, name: Option<&str>) -> Result<()> {
    let mut benches = Vec::new();
    for entry in std::fs::read_dir(root)? {
        let dir = entry?.path();
        let Ok(files) = std::fs::read_dir(dir.join("benches")) else {
            continue;
        };
        for file in files {
            let file = file?.path();
            if file.extension().is_some_and(|e| e == "rs") {
                let krate = dir.file_name().unwrap().to_string_lossy().into_owned();
                let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
                benches.push((krate, stem));
            }
        }
    }
    benches.sort();
    let Some(name) = name else {
        println!("benchmarks (cargo xtask bench NAME):");
        for (krate, stem) in &benches {
            println!("  {stem:<20} ({krate})");
        }
        println!(
            "  {:<20} (node; end to end over HTTP, not criterion)",
            "ingest"
        );
        println!(
            "  {:<20} (query; a 10 M record store through the node, against DuckDB)",
            "query"
        );
        return Ok(());
    };
    let Some((krate, stem)) = benches.iter().find(|(_, s)| s == name) else {
        bail!("no benchmark named `{name}`; `cargo xtask bench` lists them")
    };
    cargo(&["bench", "--locked", "-p", &package(krate), "--bench", stem])
}

/// The end-to-end ingest benchmark (issue 8): builds the node's binaries in release, then
/// `ourios-loadgen bench` runs a fresh release `ourios-node` per offered rate and tenant count,
/// and the same generator against a do-nothing HTTP server as the in-run baseline. `flags` go
/// to the generator (`--secs 5`, `--rates 50000,max`, `--tenants 8`, ...). The table is
/// printed and written to `<target>/bench/ingest.md`.
fn bench_ingest(flags: &[String]) -> Result<()> {
    let release = release_binaries(&["ourios-loadgen"])?;
    let target = target_dir();
    let out = target.join("bench");
    let mut cmd = Command::new(release.join("ourios-loadgen"));
    cmd.arg("bench")
        .arg("--node")
        .arg(release.join("ourios-node"))
        .arg("--out")
        .arg(out.join("ingest.md"))
        .arg("--scratch")
        .arg(out.join("ingest-data"))
        .args(flags);
    println!("$ {cmd:?}");
    let status = cmd.status().context("could not run ourios-loadgen")?;
    if !status.success() {
        bail!("ourios-loadgen bench exited with {status}");
    }
    Ok(())
}

/// The read benchmark (issue 15): builds the release node and load generator, fills a store of
/// `--records` (10 M) records through a release node's ingest path (kept in
/// `<target>/bench/query-data` and reused while it holds that many), then times the read path
/// against DuckDB on the same files (`ourios-loadgen read`). The table is printed and written to
/// `<target>/bench/query.md`. Flags: `--records N`, `--hours H`, `--runs N`.
fn bench_query(flags: &[String]) -> Result<()> {
    let mut records: u64 = 10_000_000;
    let mut hours: u64 = 24;
    let mut runs = "3".to_owned();
    let mut it = flags.iter();
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} takes a value"))?;
        match flag.as_str() {
            "--records" => records = value.parse().context("--records takes a number")?,
            "--hours" => hours = value.parse().context("--hours takes a number")?,
            "--runs" => runs = value.clone(),
            other => bail!("unknown flag {other}; bench query takes --records, --hours, --runs"),
        }
    }
    let target = target_dir();
    let python = interop::venv(&target)?;
    let release = release_binaries(&["ourios-loadgen"])?;
    let loadgen = release.join("ourios-loadgen");
    let out = target.join("bench");
    let data = out.join("query-data");
    let marker = data.join("filled");
    let filled = format!("{records} records over {hours} hours\n");
    if std::fs::read_to_string(&marker).ok().as_deref() != Some(filled.as_str()) {
        if data.exists() {
            std::fs::remove_dir_all(&data)?;
        }
        std::fs::create_dir_all(&data)?;
        let mut cmd = Command::new(release.join("ourios-node"));
        cmd.arg("serve")
            .arg("--data-dir")
            .arg(&data)
            .args(["--listen", "127.0.0.1:0"]);
        let mut node =
            ourios_testkit::Served::spawn(cmd, Some("node: ")).map_err(anyhow::Error::msg)?;
        let addr = node
            .wait_ready(Duration::from_secs(120))
            .map_err(anyhow::Error::msg)?;
        let mut fill = Command::new(&loadgen);
        fill.arg("fill")
            .arg("--target")
            .arg(addr.to_string())
            .arg("--records")
            .arg(records.to_string())
            .arg("--hours")
            .arg(hours.to_string());
        println!("$ {fill:?}");
        let status = fill.status().context("could not run ourios-loadgen fill")?;
        if !status.success() {
            bail!("ourios-loadgen fill exited with {status}");
        }
        println!("bench query: stopping the node (its final cut publishes the rest)");
        let exit = node
            .terminate(Duration::from_secs(600))
            .map_err(anyhow::Error::msg)?;
        if !exit.success() {
            bail!("the node exited with {exit} after SIGTERM");
        }
        std::fs::write(&marker, &filled)?;
    } else {
        println!(
            "bench query: reusing the store in {} ({})",
            data.display(),
            filled.trim()
        );
    }
    let mut cmd = Command::new(&loadgen);
    cmd.arg("read")
        .arg("--store")
        .arg(data.join("store"))
        .arg("--python")
        .arg(&python)
        .arg("--out")
        .arg(out.join("query.md"))
        .arg("--runs")
        .arg(&runs);
    println!("$ {cmd:?}");
    let status = cmd.status().context("could not run ourios-loadgen read")?;
    if !status.success() {
        bail!("ourios-loadgen read exited with {status}");
    }
    Ok(())
}

/// Builds the node's release binary; returns where it is.
fn release_node_dir() -> Result<PathBuf> {
    release_binaries(&[])
}

/// Builds the node's release binary and those of the dev-only `packages` (the load generator)
/// in one cargo run, so the crates they share are built once; returns where they are.
fn release_binaries(packages: &[&str]) -> Result<PathBuf> {
    let mut args = vec!["build", "--release", "--locked", "-p", "ourios-node"];
    for p in packages {
        args.extend(["-p", p]);
    }
    args.push("--bins");
    cargo(&args)?;
    Ok(target_dir().join("release"))
}

/// The value of a `--secs` flag.
fn secs_value(value: Option<&String>) -> Result<u64> {
    value
        .and_then(|v| v.parse().ok())
        .context("--secs takes a whole number of seconds")
}

/// `cargo xtask chaos [--secs N] [--debug]`: the crash test in chaos mode against the release
/// node (or the debug one): 4 writers over 4 tenants, a SIGKILL every 0.5-3 s for N seconds,
/// damaged snapshots and other miner settings between some rounds; prints kills, requests,
/// acknowledged lines, lost, duplicated and the frames each restart recovered, and fails if an
/// acknowledged line is missing, stored twice or does not rebuild. Then the two-node test (two
/// processes sharing one store, each killed at its own moment) runs its fixed rounds.
fn chaos(args: &[String]) -> Result<()> {
    let mut secs = 60u64;
    let mut debug = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--secs" => secs = secs_value(it.next())?,
            "--debug" => debug = true,
            other => bail!("chaos: unknown flag `{other}` (expected --secs N, --debug)"),
        }
    }
    let secs = secs.to_string();
    // The two-node test runs its fixed rounds after the timed one, not beside it.
    process_test(
        "crash",
        debug,
        &[("OURIOS_CRASH_SECS", &secs)],
        &["--test-threads=1"],
    )
}

/// Runs the node's process test `test` (its own test binary) with `--nocapture`, against the
/// release node unless `debug` (`OURIOS_CRASH_NODE` names the binary), with `envs` and `args`.
fn process_test(test: &str, debug: bool, envs: &[(&str, &str)], args: &[&str]) -> Result<()> {
    let node = if debug {
        None
    } else {
        Some(
            release_node_dir()?
                .join("ourios-node")
                .display()
                .to_string(),
        )
    };
    let mut envs = envs.to_vec();
    if let Some(node) = node.as_deref() {
        envs.push(("OURIOS_CRASH_NODE", node));
    }
    // `--workspace`, not `-p ourios-node`: the node alone resolves other features of the shared
    // dependencies than the workspace does, and would build DataFusion a second time; the test
    // target exists in the node only.
    let mut cmd = vec![
        "test",
        "--locked",
        "--workspace",
        "--test",
        test,
        "--",
        "--nocapture",
    ];
    cmd.extend_from_slice(args);
    cargo_env(&cmd, &envs)
}

/// `cargo xtask hostile [--debug]`: the hostile-input suite (`node/tests/hostile.rs`) against
/// the release node (or the debug one): each case's refusal names its limit or its lines are
/// stored once, the node still serves, and each case's peak RSS is printed and bounded. CI's
/// test step runs the same suite against the debug node with fewer concurrent clients.
fn hostile(args: &[String]) -> Result<()> {
    let mut debug = false;
    for a in args {
        match a.as_str() {
            "--debug" => debug = true,
            other => bail!("hostile: unknown flag `{other}` (expected --debug)"),
        }
    }
    process_test("hostile", debug, &[], &[])
}

/// The cargo-fuzz targets in `xtask/fuzz` (their own workspace, built with nightly).
const FUZZ_TARGETS: &[&str] = &[
    "otlp_decode",
    "wal_files",
    "miner_snapshot",
    "template_parse",
];

/// `cargo xtask fuzz [target] [--secs N] [--dev]`: runs each cargo-fuzz target (or one) for N
/// seconds (60) with the preinstalled nightly toolchain and prints the executions libFuzzer
/// reports. The targets are built optimised unless `--dev` (CI's short form: a build of a few
/// minutes instead of many, and fewer executions a second).
/// A crash fails the task; libFuzzer leaves the input in `xtask/fuzz/artifacts/<target>/`, and it
/// becomes a regression test. Needs `cargo install --locked cargo-fuzz`.
fn fuzz(root: &Path, args: &[String]) -> Result<()> {
    let mut secs = 60u64;
    let mut only: Option<&str> = None;
    let mut dev = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--secs" => secs = secs_value(it.next())?,
            "--dev" => dev = true,
            t if FUZZ_TARGETS.contains(&t) => only = Some(t),
            other => bail!(
                "fuzz: unknown target or flag `{other}` (targets: {FUZZ_TARGETS:?}; flags: \
                 --secs N, --dev)"
            ),
        }
    }
    let fuzz_dir = root.join("xtask").join("fuzz");
    let mut summary = Vec::new();
    for target in FUZZ_TARGETS
        .iter()
        .filter(|t| only.is_none_or(|o| o == **t))
    {
        let corpus = fuzz_dir.join("corpus").join(target);
        std::fs::create_dir_all(&corpus)?;
        let mut cmd = Command::new("cargo");
        cmd.args(["+nightly", "fuzz", "run", "--fuzz-dir"])
            .arg(&fuzz_dir)
            .args(dev.then_some("--dev"))
            .arg(target)
            .arg(&corpus)
            .arg("--")
            .arg(format!("-max_total_time={secs}"))
            // Its own target dir: nightly and sanitizer builds never share the workspace's.
            .env("CARGO_TARGET_DIR", target_dir().join("fuzz"))
            .stderr(std::process::Stdio::piped());
        println!("$ {cmd:?}");
        let output = cmd
            .output()
            .context("could not run cargo fuzz (cargo install cargo-fuzz)")?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        let done = stderr
            .lines()
            .rev()
            .find(|l| l.starts_with("Done "))
            .unwrap_or("no summary line")
            .to_owned();
        if !output.status.success() {
            eprintln!("{stderr}");
            bail!("fuzz target {target} failed (see xtask/fuzz/artifacts/{target}/)");
        }
        println!("fuzz {target}: {done}");
        summary.push(format!("{target}: {done}"));
    }
    println!("fuzz: {}", summary.join("; "));
    Ok(())
}

fn package(folder: &str) -> String {
    format!("ourios-{folder}")
}

pub(crate) fn cargo(args: &[&str]) -> Result<()> {
    cargo_env(args, &[])
}

pub(crate) fn cargo_env(args: &[&str], envs: &[(&str, &str)]) -> Result<()> {
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut cmd = Command::new(cargo);
    cmd.args(args);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    println!("$ cargo {}", args.join(" "));
    let status = cmd.status().context("could not run cargo")?;
    if !status.success() {
        bail!("`cargo {}` exited with {status}", args.join(" "));
    }
    Ok(())
}
