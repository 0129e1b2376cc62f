//! `cargo xtask rfc NNNN`: the criterion -> test tables in `rfcs/`, run for real.
//!
//! Each `rfcs/NNNN-*.md` holds one or more markdown tables whose header has the columns
//! `id`, `crate` and `test`. A `crate` cell is a folder name, optionally `/loom` for a loom
//! model (`barrier/loom`). A `test` cell lists test function names in backticks (several are
//! separated by `<br>`); `—` means no test exists yet. A row whose text says `(partial` names
//! tests that prove its criterion only in part: they run, print `pass (partial)`, and fail the
//! table under `--strict`. The task runs every named test once, per crate, and prints
//! `id  test  result`. It fails when a named test fails or does not exist; a row with no test
//! is `missing` and fails only with `--strict`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

/// One row of an RFC table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Row {
    pub(crate) id: String,
    pub(crate) krate: String,
    pub(crate) loom: bool,
    pub(crate) tests: Vec<String>,
    /// The row says its tests prove the criterion only in part.
    pub(crate) partial: bool,
}

pub(crate) fn rfc_file(root: &Path, number: &str) -> Result<PathBuf> {
    let dir = root.join("rfcs");
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if name.starts_with(&format!("{number}-")) && name.ends_with(".md") {
            return Ok(path);
        }
    }
    bail!("no rfcs/{number}-*.md")
}

/// Parses every table with `id`, `crate` and `test` columns. Errors name the file and line.
pub(crate) fn parse(text: &str, file: &str) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let mut columns: Option<(usize, usize, usize)> = None;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if !line.starts_with('|') {
            columns = None;
            continue;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        if cells
            .iter()
            .all(|c| c.chars().all(|ch| ch == '-' || ch == ':'))
        {
            continue; // the |---|---| separator
        }
        let Some((id_col, crate_col, test_col)) = columns else {
            let find = |name: &str| cells.iter().position(|c| c.eq_ignore_ascii_case(name));
            if let (Some(i), Some(c), Some(t)) = (find("id"), find("crate"), find("test")) {
                columns = Some((i, c, t));
            }
            continue;
        };
        let cell = |i: usize| {
            cells
                .get(i)
                .copied()
                .with_context(|| format!("{file}:{}: row has no column {i}", n + 1))
        };
        let id = cell(id_col)?.trim_matches('*').to_owned();
        let krate_cell = cell(crate_col)?.trim_matches('`');
        let (krate, loom) = match krate_cell.strip_suffix("/loom") {
            Some(k) => (k.to_owned(), true),
            None => (krate_cell.to_owned(), false),
        };
        let test_cell = cell(test_col)?;
        let tests: Vec<String> = test_cell
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect();
        if id.is_empty() {
            bail!("{file}:{}: row without an id", n + 1);
        }
        if tests.is_empty() && !test_cell.is_empty() && test_cell != "—" && test_cell != "-" {
            bail!("{file}:{}: test cell `{test_cell}` names no `test`", n + 1);
        }
        for t in &tests {
            if t.is_empty() || !t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                bail!("{file}:{}: `{t}` is not a test function name", n + 1);
            }
        }
        if !tests.is_empty() && krate.is_empty() {
            bail!("{file}:{}: row {id} names tests but no crate", n + 1);
        }
        rows.push(Row {
            id,
            krate,
            loom,
            tests,
            partial: line.contains("(partial"),
        });
    }
    Ok(rows)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Pass,
    Fail,
    Ignored,
    NotFound,
}

pub(crate) fn run(root: &Path, number: &str, strict: bool) -> Result<()> {
    let path = rfc_file(root, number)?;
    let text = std::fs::read_to_string(&path)?;
    let rows = parse(&text, &path.display().to_string())?;
    if rows.is_empty() {
        bail!(
            "{} has no criterion table (columns id, crate, test)",
            path.display()
        );
    }

    // One cargo invocation per (crate, loom) with every named test as a filter.
    let mut groups: BTreeMap<(String, bool), Vec<String>> = BTreeMap::new();
    for row in &rows {
        for t in &row.tests {
            groups
                .entry((row.krate.clone(), row.loom))
                .or_default()
                .push(t.clone());
        }
    }
    let mut results: BTreeMap<(String, bool, String), Outcome> = BTreeMap::new();
    for ((krate, loom), tests) in &groups {
        let found = run_group(krate, *loom, tests)?;
        for t in tests {
            let outcome = found.get(t).copied().unwrap_or(Outcome::NotFound);
            results.insert((krate.clone(), *loom, t.clone()), outcome);
        }
    }

    let (mut pass, mut fail, mut missing) = (0, 0, 0);
    let partial = rows
        .iter()
        .filter(|r| r.partial && !r.tests.is_empty())
        .count();
    println!(
        "\nRFC {number} ({})",
        path.file_name().unwrap().to_string_lossy()
    );
    println!("{:<14} {:<70} result", "id", "test");
    for row in &rows {
        if row.tests.is_empty() {
            missing += 1;
            println!("{:<14} {:<70} missing", row.id, "—");
            continue;
        }
        for t in &row.tests {
            let label = if row.loom {
                format!("{}/loom::{t}", row.krate)
            } else {
                format!("{}::{t}", row.krate)
            };
            let outcome = results[&(row.krate.clone(), row.loom, t.clone())];
            let word = match outcome {
                Outcome::Pass if row.partial => {
                    pass += 1;
                    "pass (partial)"
                }
                Outcome::Pass => {
                    pass += 1;
                    "pass"
                }
                Outcome::Fail | Outcome::Ignored => {
                    fail += 1;
                    "FAIL"
                }
                Outcome::NotFound => {
                    fail += 1;
                    "FAIL (no such test)"
                }
            };
            println!("{:<14} {label:<70} {word}", row.id);
        }
    }
    println!(
        "rfc {number}: {pass} passed, {fail} failed, {missing} rows without a test, {partial} \
         rows proved only in part"
    );
    if fail > 0 {
        bail!("rfc {number}: {fail} named test(s) failed or do not exist");
    }
    if strict && missing > 0 {
        bail!("rfc {number}: {missing} row(s) have no test (--strict)");
    }
    if strict && partial > 0 {
        bail!("rfc {number}: {partial} row(s) are proved only in part (--strict)");
    }
    Ok(())
}

/// Runs `tests` in one crate and returns the outcome of each test function found, keyed by the
/// last segment of its path. A name found in several binaries fails if any instance fails.
fn run_group(krate: &str, loom: bool, tests: &[String]) -> Result<BTreeMap<String, Outcome>> {
    let package = format!("ourios-{krate}");
    if !loom {
        return run_workspace_binaries(&package, tests);
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut cmd = Command::new(cargo);
    cmd.args([
        "test",
        "--locked",
        "-p",
        &package,
        "--release",
        "--test",
        "loom",
    ])
    .env("RUSTFLAGS", "--cfg loom")
    .env("CARGO_TARGET_DIR", crate::loom_target_dir())
    .env("LOOM_MAX_PREEMPTIONS", crate::LOOM_MAX_PREEMPTIONS)
    .arg("--")
    .args(tests)
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit());
    eprintln!("$ cargo test -p {package} (loom) -- {}", tests.join(" "));
    let output = cmd.output().context("could not run cargo test")?;
    let found = parse_libtest(&String::from_utf8_lossy(&output.stdout), tests);
    if found.is_empty() && !output.status.success() {
        bail!("cargo test -p {package} (loom) failed before running any test (build error?)");
    }
    Ok(found)
}

/// Runs the named tests in every test executable of `package` as the workspace build makes
/// them (`cargo test --workspace --no-run`: the features `cargo xtask ci`'s test step already
/// built, so nothing is rebuilt per crate), each from the package's directory as cargo would.
fn run_workspace_binaries(package: &str, tests: &[String]) -> Result<BTreeMap<String, Outcome>> {
    let mut found = BTreeMap::new();
    let all = test_executables()?;
    let Some(exes) = all.get(package) else {
        bail!("no test executable found for {package}");
    };
    for (exe, dir) in exes {
        let output = Command::new(exe)
            .args(tests)
            .current_dir(dir)
            .env("CARGO_MANIFEST_DIR", dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .output()
            .with_context(|| format!("could not run {}", exe.display()))?;
        for (name, outcome) in parse_libtest(&String::from_utf8_lossy(&output.stdout), tests) {
            let slot = found.entry(name).or_insert(outcome);
            if outcome != Outcome::Pass {
                *slot = outcome;
            }
        }
    }
    Ok(found)
}

/// Every test executable of the workspace test build, by package, with the package directory.
/// Asked of cargo once per process.
fn test_executables() -> Result<&'static BTreeMap<String, Vec<(PathBuf, PathBuf)>>> {
    static CACHE: std::sync::OnceLock<BTreeMap<String, Vec<(PathBuf, PathBuf)>>> =
        std::sync::OnceLock::new();
    if let Some(map) = CACHE.get() {
        return Ok(map);
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    eprintln!("$ cargo test --workspace --no-run --message-format=json");
    let output = Command::new(cargo)
        .args([
            "test",
            "--workspace",
            "--locked",
            "--no-run",
            "--message-format=json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()
        .context("could not run cargo test --no-run")?;
    if !output.status.success() {
        bail!("cargo test --workspace --no-run failed (build error?)");
    }
    let mut map: BTreeMap<String, Vec<(PathBuf, PathBuf)>> = BTreeMap::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        // One JSON object per line; the fields needed are plain strings, so a field lookup
        // by text keeps xtask free of a JSON dependency.
        let Some(exe) = json_string(line, "executable") else {
            continue;
        };
        // The unit-test executables of binaries (the node, the load generator, the WAL's crash
        // appender) hold no RFC test, and run with test names as arguments they are the
        // programs themselves: only test harnesses of libraries and test targets are run.
        if line.contains(r#""kind":["bin"]"#) {
            continue;
        }
        let Some(manifest) = json_string(line, "manifest_path") else {
            continue;
        };
        let Some(id) = json_string(line, "package_id") else {
            continue;
        };
        // `path+file:///src/ourios/sinks#ourios-sinks@0.1.0`
        let Some(name) = id.rsplit('#').next().and_then(|n| n.split('@').next()) else {
            continue;
        };
        let dir = PathBuf::from(&manifest)
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        map.entry(name.to_owned())
            .or_default()
            .push((PathBuf::from(exe), dir));
    }
    Ok(CACHE.get_or_init(|| map))
}

/// The value of the first `"key":"value"` string field in a JSON line (no escapes expected in
/// paths and ids cargo prints for this workspace; a value with escapes is refused).
fn json_string(line: &str, key: &str) -> Option<String> {
    let needle = format!("\"{key}\":\"");
    let start = line.find(&needle)? + needle.len();
    let rest = &line[start..];
    let end = rest.find('"')?;
    let value = &rest[..end];
    (!value.contains('\\')).then(|| value.to_owned())
}

fn parse_libtest(stdout: &str, wanted: &[String]) -> BTreeMap<String, Outcome> {
    let mut found: BTreeMap<String, Outcome> = BTreeMap::new();
    for line in stdout.lines() {
        let Some(rest) = line.strip_prefix("test ") else {
            continue;
        };
        let Some((path, result)) = rest.rsplit_once(" ... ") else {
            continue;
        };
        let name = path.rsplit("::").next().unwrap_or(path).trim();
        if !wanted.iter().any(|w| w == name) {
            continue;
        }
        let outcome = match result.trim() {
            "ok" => Outcome::Pass,
            r if r.starts_with("ignored") => Outcome::Ignored,
            _ => Outcome::Fail,
        };
        let slot = found.entry(name.to_owned()).or_insert(outcome);
        if outcome != Outcome::Pass {
            *slot = outcome;
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The parser reads the id, crate (with `/loom`) and backticked test names of a table row.
    /// Reasoned mutation (not run as a mutant): drop the `strip_suffix("/loom")` arm and `loom`
    /// stays false.
    #[test]
    fn rfc_table_rows_parse() {
        let text = "| id | what | crate | test | status |\n|---|---|---|---|---|\n\
                    | RFC0054.4 | latch | barrier/loom | `loom_a`<br>`loom_b` | proved |\n\
                    | L.2 | x | publisher | — | open |\n";
        let rows = parse(text, "t.md").unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].id, "RFC0054.4");
        assert!(rows[0].loom);
        assert_eq!(rows[0].krate, "barrier");
        assert_eq!(rows[0].tests, vec!["loom_a", "loom_b"]);
        assert!(rows[1].tests.is_empty());
        assert!(!rows[0].partial);
        let partial = parse(
            "| id | what | crate | test |\n|---|---|---|---|\n| U.5 | waits (partial: no wait shown) | node | `t` |\n",
            "t.md",
        )
        .unwrap();
        assert!(partial[0].partial, "a row that says so is partial");
    }

    /// A malformed test name is an error naming the file and line, not a silently skipped row.
    /// Reasoned mutation (not run as a mutant): remove the name-character check and this parses.
    #[test]
    fn rfc_table_rejects_bad_test_name() {
        let text = "| id | crate | test |\n|---|---|---|\n| X | wal | `not a name` |\n";
        let err = parse(text, "t.md").unwrap_err().to_string();
        assert!(err.contains("t.md:3"), "{err}");
    }

    /// Cargo's JSON lines give the executable, manifest and package id as plain strings.
    /// Reasoned mutation (not run as a mutant): drop the `+ needle.len()` offset and the value
    /// starts at the key.
    #[test]
    fn json_string_reads_cargo_artifact_fields() {
        let line = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/sinks#ourios-sinks@0.1.0","manifest_path":"/w/sinks/Cargo.toml","executable":"/t/debug/deps/it-1"}"#;
        assert_eq!(
            json_string(line, "executable").as_deref(),
            Some("/t/debug/deps/it-1")
        );
        assert_eq!(
            json_string(line, "manifest_path").as_deref(),
            Some("/w/sinks/Cargo.toml")
        );
        assert_eq!(json_string(line, "missing"), None);
        assert_eq!(json_string(r#"{"executable":null}"#, "executable"), None);
    }

    /// libtest lines map to outcomes by the last path segment; a failure in any binary wins.
    /// Reasoned mutation (not run as a mutant): make the `entry` keep the first outcome and the
    /// FAILED line is lost.
    #[test]
    fn libtest_output_parses() {
        let out = "test a::b::t1 ... ok\ntest c::t1 ... FAILED\ntest d::t2 ... ok\ntest d::t3 ... ignored\n";
        let wanted: Vec<String> = ["t1", "t2", "t3"].map(String::from).to_vec();
        let got = parse_libtest(out, &wanted);
        assert_eq!(got["t1"], Outcome::Fail);
        assert_eq!(got["t2"], Outcome::Pass);
        assert_eq!(got["t3"], Outcome::Ignored);
    }
}
