//! `cargo xtask mutants [crate...] [--min PCT] [--timeout S] [--shard K/N]`: cargo-mutants over
//! each crate with that crate's own tests, and a score per crate.
//!
//! The score is caught / viable, where viable = caught + missed + timed out, and a mutant that
//! makes the tests hang until the timeout counts as caught (the tests did not pass; every test
//! that waits on the code under test is bounded, so a hang is a detection, not a pass).
//! `.cargo/mutants.toml` excludes formatting impls and code only `--cfg loom` compiles. The task fails when a crate scores under
//! `--min` (90) and lists the survivors.
//!
//! The mutants are applied in place (cargo-mutants restores each file after its mutant), so the
//! builds reuse the target directory instead of building a copy of the workspace from cold. The
//! crate's sources must therefore be committed: the task refuses a dirty crate.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};

/// The crates CI scores: the ownership handles, the barrier and the publisher.
pub(crate) const CI_CRATES: &[&str] = &["recoverable", "barrier", "publisher"];

struct Options {
    crates: Vec<String>,
    min_percent: f64,
    timeout_secs: u64,
    shard: Option<String>,
}

fn parse(args: &[String]) -> Result<Options> {
    let mut o = Options {
        crates: Vec::new(),
        min_percent: 90.0,
        timeout_secs: 30,
        shard: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--min" => {
                o.min_percent = it
                    .next()
                    .context("--min needs a percentage")?
                    .parse()
                    .context("--min needs a number")?;
            }
            "--timeout" => {
                o.timeout_secs = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .context("--timeout takes a whole number of seconds")?;
            }
            "--shard" => o.shard = Some(it.next().context("--shard needs K/N")?.clone()),
            flag if flag.starts_with('-') => bail!(
                "mutants: unknown flag `{flag}` (expected --min PCT, --timeout S, --shard K/N)"
            ),
            krate => o.crates.push(krate.to_owned()),
        }
    }
    if o.crates.is_empty() {
        o.crates = CI_CRATES.iter().map(|c| (*c).to_owned()).collect();
    }
    Ok(o)
}

/// Whether `cargo mutants` runs here.
fn installed() -> bool {
    Command::new("cargo")
        .args(["mutants", "--version"])
        .output()
        .is_ok_and(|out| out.status.success())
}

/// One crate's tally, read from cargo-mutants' `outcomes.json`.
#[derive(Debug)]
struct Score {
    caught: u64,
    missed: u64,
    timeout: u64,
    unviable: u64,
    survivors: Vec<String>,
    /// The tests failed on the unmutated tree: no mutant was tested.
    baseline_failed: bool,
}

impl Score {
    fn viable(&self) -> u64 {
        self.caught + self.missed + self.timeout
    }

    fn percent(&self) -> f64 {
        if self.viable() == 0 {
            return 100.0;
        }
        (self.caught + self.timeout) as f64 * 100.0 / self.viable() as f64
    }
}

/// Runs `cmd` (cargo-mutants for `krate`) and reads its outcomes.
///
/// The mutants are applied in place and each is built; cargo-mutants then restores the files,
/// but the last mutant's build stays in the target directory, and a checkout whose files are
/// older than it (another clone sharing the target directory) would take it as fresh: its
/// tests would run a mutant. So the crate's sources are touched before the run (the baseline
/// builds the real code) and after it.
fn run_cargo_mutants(cmd: &mut Command, outcomes: &Path, krate: &Path) -> Result<Score> {
    touch_sources(krate)?;
    // cargo-mutants exits non-zero when any mutant survives; the score decides here.
    let status = cmd.status().context("running cargo mutants");
    touch_sources(krate)?;
    let status = status?;
    if !outcomes.exists() {
        bail!(
            "cargo mutants for {} wrote no outcomes ({status})",
            krate.display()
        );
    }
    read_score(outcomes)
}

/// Sets the modification time of every `.rs` file under `dir` to now, so cargo rebuilds them.
fn touch_sources(dir: &Path) -> Result<()> {
    let now = std::time::SystemTime::now();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            touch_sources(&path)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            std::fs::File::options()
                .append(true)
                .open(&path)
                .and_then(|f| f.set_modified(now))
                .with_context(|| format!("touching {}", path.display()))?;
        }
    }
    Ok(())
}

fn read_score(outcomes: &Path) -> Result<Score> {
    let text = std::fs::read_to_string(outcomes)
        .with_context(|| format!("reading {}", outcomes.display()))?;
    let json: serde_json::Value = serde_json::from_str(&text)?;
    let count = |k: &str| json[k].as_u64().unwrap_or(0);
    let survivors = json["outcomes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|o| o["summary"] == "MissedMutant")
        .filter_map(|o| o["scenario"]["Mutant"]["name"].as_str().map(str::to_owned))
        .collect();
    let baseline_failed = json["outcomes"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|o| o["scenario"] == "Baseline" && o["summary"] != "Success");
    Ok(Score {
        baseline_failed,
        caught: count("caught"),
        missed: count("missed"),
        timeout: count("timeout"),
        unviable: count("unviable"),
        survivors,
    })
}

pub(crate) fn run(root: &Path, args: &[String]) -> Result<()> {
    let o = parse(args)?;
    ensure!(
        installed(),
        "cargo-mutants is not installed (`cargo install --locked cargo-mutants`)"
    );
    let mut lines = Vec::new();
    let mut failed = Vec::new();
    for krate in &o.crates {
        ensure!(
            root.join(krate).join("Cargo.toml").exists(),
            "mutants: no crate folder `{krate}`"
        );
        let clean = Command::new("git")
            .args(["diff", "--quiet", "HEAD", "--"])
            .arg(krate)
            .status()
            .context("running git diff")?
            .success();
        ensure!(
            clean,
            "mutants: `{krate}` has uncommitted changes; the mutants are applied in place, so \
             commit or stash them first"
        );
        let out_dir = crate::target_dir().join("mutants").join(krate);
        std::fs::create_dir_all(&out_dir)?;
        let package = crate::package(krate);
        let timeout = o.timeout_secs.to_string();
        let mut cmd = Command::new("cargo");
        cmd.args(["mutants", "--in-place", "--no-shuffle", "-p", &package])
            .args(["--test-package", &package, "--timeout", &timeout])
            .arg("-o")
            .arg(&out_dir);
        if let Some(shard) = &o.shard {
            cmd.args(["--shard", shard]);
        }
        // Unit and integration tests only: doctests compile once per mutant and prove nothing
        // the crate's tests do not (CI's test step runs them).
        cmd.args(["--", "--tests"]);
        // A proptest failing under a mutant must not write a regression file into the tree.
        cmd.env("PROPTEST_DISABLE_FAILURE_PERSISTENCE", "1");
        println!("$ {cmd:?}");
        let outcomes = out_dir.join("mutants.out").join("outcomes.json");
        // The tests must pass on the unmutated tree, or no mutant is tested and the score
        // means nothing. A failing baseline is shown and run once more, so a flaky test is
        // named in the output; failing twice fails the step.
        let mut score = run_cargo_mutants(&mut cmd, &outcomes, &root.join(krate))?;
        if score.baseline_failed {
            println!(
                "mutants {krate}: THE TESTS FAILED ON THE UNMUTATED TREE (a flaky test?); its log: \
                 {}; running it once more",
                out_dir.join("mutants.out/log/baseline.log").display()
            );
            score = run_cargo_mutants(&mut cmd, &outcomes, &root.join(krate))?;
            ensure!(
                !score.baseline_failed,
                "mutants: the tests of {krate} fail on the unmutated tree twice; no mutant was tested"
            );
        }
        let line = format!(
            "{krate}: {:.1} % ({} caught, {} by timeout, {} missed of {} viable; {} unviable)",
            score.percent(),
            score.caught,
            score.timeout,
            score.missed,
            score.viable(),
            score.unviable
        );
        println!("mutants {line}");
        for s in &score.survivors {
            println!("  survived: {s}");
        }
        if score.percent() < o.min_percent {
            failed.push(krate.clone());
        }
        lines.push(line);
    }
    println!("mutants:");
    for l in &lines {
        println!("  {l}");
    }
    ensure!(
        failed.is_empty(),
        "mutants: under {} % caught: {}",
        o.min_percent,
        failed.join(", ")
    );
    Ok(())
}

/// The shards CI splits each crate's mutants into; one shard runs per CI run.
const CI_SHARDS: u32 = 4;

/// CI's short form: shard `k` of [`CI_SHARDS`] of every crate in [`CI_CRATES`], where `k` is
/// the commit's first hex digit modulo the shard count, so consecutive commits cover different
/// shards and a rerun of one commit runs the same one. Needs cargo-mutants; `.ci/run` installs
/// it and requires the step (`OURIOS_REQUIRE_MUTANTS=1`), elsewhere a missing tool is a notice.
pub(crate) fn in_ci(root: &Path) -> Result<()> {
    let required = std::env::var_os("OURIOS_REQUIRE_MUTANTS").is_some_and(|v| v != "0");
    if !installed() && !required {
        println!(
            "mutants: NOT RUN: cargo-mutants is not installed here (CI installs it and requires \
             this step; `cargo install --locked cargo-mutants`)"
        );
        return Ok(());
    }
    let head = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .output()
        .context("running git rev-parse")?;
    let digit = String::from_utf8_lossy(&head.stdout)
        .chars()
        .next()
        .and_then(|c| c.to_digit(16))
        .unwrap_or(0);
    let shard = format!("{}/{CI_SHARDS}", digit % CI_SHARDS);
    run(root, &["--shard".to_owned(), shard])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A baseline that failed (the tests fail on the unmutated tree) is seen, so the step
    /// cannot report 100 % over no tested mutant; a passing one is not.
    #[test]
    fn a_failed_baseline_is_seen() {
        let outcomes =
            std::env::temp_dir().join(format!("ourios-xtask-outcomes-{}.json", std::process::id()));
        let write = |summary: &str| {
            std::fs::write(
                &outcomes,
                format!(
                    r#"{{"total_mutants":0,"missed":0,"caught":0,"timeout":0,"unviable":0,
                        "outcomes":[{{"scenario":"Baseline","summary":"{summary}"}}]}}"#
                ),
            )
            .unwrap();
        };
        write("Failure");
        assert!(read_score(&outcomes).unwrap().baseline_failed);
        write("Success");
        assert!(!read_score(&outcomes).unwrap().baseline_failed);
        let _ = std::fs::remove_file(&outcomes);
    }
}
