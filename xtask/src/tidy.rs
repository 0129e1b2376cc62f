//! Tidy checks: ordinary tests that keep the tree honest, run by `cargo test` (and so by
//! `cargo xtask ci`). Each one names what it found wrong and where.

use std::path::{Path, PathBuf};

use crate::rfc;

const CRATES: &[&str] = &[
    "wal",
    "miner",
    "sinks",
    "barrier",
    "publisher",
    "recoverable",
    "node",
];

fn root() -> PathBuf {
    crate::project_root()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "target") {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every crate's `lib.rs` opens with a contract doc of at least three `//!` lines.
/// Reasoned mutation (not run as a mutant): delete the `//!` header of any crate's lib.rs and this
/// fails naming it.
#[test]
fn tidy_every_crate_has_a_contract_doc() {
    for krate in CRATES {
        let lib = root().join(krate).join("src/lib.rs");
        let text = std::fs::read_to_string(&lib).unwrap_or_default();
        let doc_lines = text.lines().take_while(|l| l.starts_with("//!")).count();
        assert!(
            doc_lines >= 3,
            "{} must open with a contract doc (//!), found {doc_lines} lines",
            lib.display()
        );
    }
}

/// Every package is named `ourios-<folder>`.
/// Reasoned mutation (not run as a mutant): rename a package in its Cargo.toml.
#[test]
fn tidy_packages_are_named_after_folders() {
    for krate in CRATES.iter().chain(&["xtask"]) {
        let manifest = std::fs::read_to_string(root().join(krate).join("Cargo.toml")).unwrap();
        assert!(
            manifest.contains(&format!("name = \"ourios-{krate}\"")),
            "{krate}/Cargo.toml must name the package ourios-{krate}"
        );
    }
}

/// Dev-only packages (`xtask/<name>`, named `ourios-<name>`) stay out of the product: no
/// product crate depends on them outside `[dev-dependencies]`, and the node package builds one
/// binary, the node.
/// Moving `ourios-testkit` into the node's `[dependencies]`, or a binary back into
/// `node/src/bin`, fails it with the place named.
#[test]
fn tidy_dev_packages_stay_out_of_the_product() {
    const DEV: &[&str] = &["testkit", "loadgen"];
    for dev in DEV {
        let manifest =
            std::fs::read_to_string(root().join("xtask").join(dev).join("Cargo.toml")).unwrap();
        assert!(
            manifest.contains(&format!("name = \"ourios-{dev}\"")),
            "xtask/{dev}/Cargo.toml must name the package ourios-{dev}"
        );
    }
    for krate in CRATES {
        let manifest = std::fs::read_to_string(root().join(krate).join("Cargo.toml")).unwrap();
        let mut section = "";
        for line in manifest.lines() {
            let line = line.trim();
            if line.starts_with('[') {
                section = line;
                continue;
            }
            for dev in DEV {
                assert!(
                    section == "[dev-dependencies]" || !line.starts_with(&format!("ourios-{dev}")),
                    "{krate}/Cargo.toml: `{line}` in {section}: ourios-{dev} is dev-only"
                );
            }
        }
        if *krate == "node" {
            assert!(
                manifest.matches("[[bin]]").count() <= 1,
                "node/Cargo.toml: the node package builds the node only"
            );
            assert!(
                !root().join("node/src/bin").exists(),
                "node/src/bin: the node package builds the node only; tools go in xtask/"
            );
        }
    }
}

/// A server says it is ready through `--ready-file`, never through a log sentence: no test or
/// tool reads the node's "listening on" line.
/// A harness that parses `listening on` fails it with the file named.
#[test]
fn tidy_readiness_is_the_ready_file() {
    let mut files = Vec::new();
    for dir in CRATES.iter().chain(&["xtask"]) {
        rust_files(&root().join(dir), &mut files);
    }
    let main = root().join("node/src/main.rs");
    let tidy = root().join("xtask/src/tidy.rs");
    for file in files.iter().filter(|f| **f != main && **f != tidy) {
        let text = std::fs::read_to_string(file).unwrap();
        assert!(
            !text.contains("listening on http"),
            "{}: reads a log sentence; wait for the ready file (ourios_testkit::Served)",
            file.display()
        );
    }
}

/// A "Mutation check" note says how the mutation was checked: `(cargo-mutants)`, or tried by
/// hand (`(tried)`, `(tried by hand)`, `(by hand)`, `(both tried)`, `(each tried)`). A claim
/// nobody ran reads "Reasoned mutation (not run as a mutant)", so a reader knows which notes
/// are evidence. An unqualified "Mutation check:" fails this with its place named.
#[test]
fn tidy_mutation_notes_say_how_they_were_checked() {
    const CHECKED: &[&str] = &[
        "Mutation check (cargo-mutants)",
        "Mutation check (tried",
        "Mutation check (by hand)",
        "Mutation check (both tried)",
        "Mutation check (each tried)",
    ];
    let mut files = Vec::new();
    for dir in CRATES.iter().chain(&["xtask"]) {
        rust_files(&root().join(dir), &mut files);
    }
    let tidy = root().join("xtask/src/tidy.rs");
    let mut unqualified = Vec::new();
    for file in files.iter().filter(|f| **f != tidy) {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            if line.contains("Mutation check") && !CHECKED.iter().any(|c| line.contains(c)) {
                unqualified.push(format!("{}:{}", file.display(), n + 1));
            }
        }
    }
    assert!(
        unqualified.is_empty(),
        "mutation notes that do not say how they were checked: {unqualified:?}"
    );
}

/// The RFC tables parse, and every test they name exists as a `fn` in the named crate.
/// Reasoned mutation (not run as a mutant): rename a test function an RFC table names.
#[test]
fn tidy_rfc_tables_parse_and_name_existing_tests() {
    for number in ["0052", "0054", "0056", "0057", "0058"] {
        let path = rfc::rfc_file(&root(), number).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let rows = rfc::parse(&text, &path.display().to_string()).unwrap();
        assert!(
            !rows.is_empty(),
            "{} has no criterion table",
            path.display()
        );
        for row in rows {
            let mut files = Vec::new();
            rust_files(&root().join(&row.krate), &mut files);
            let sources: Vec<String> = files
                .iter()
                .map(|f| std::fs::read_to_string(f).unwrap_or_default())
                .collect();
            for test in &row.tests {
                let needle = format!("fn {test}(");
                assert!(
                    sources.iter().any(|s| s.contains(&needle)),
                    "{}: row {} names `{test}` but no `fn {test}(` exists under {}/",
                    path.display(),
                    row.id,
                    row.krate
                );
            }
        }
    }
}

/// No test is hidden with an ignore attribute.
/// Reasoned mutation (not run as a mutant): put an ignore attribute above any test.
#[test]
fn tidy_no_ignored_tests() {
    let mut files = Vec::new();
    for krate in CRATES {
        rust_files(&root().join(krate), &mut files);
    }
    let attr = concat!("#[", "ignore");
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        assert!(
            !text.contains(attr),
            "{} hides a test with {attr}]",
            f.display()
        );
    }
}

/// Every metric name a crate declares (`"ourios.…"` in its `metrics.rs`) is listed in the
/// README's metrics table, so operators can find what they scrape.
/// Reasoned mutation (not run as a mutant): add a metric constant without a README row.
#[test]
fn tidy_every_metric_is_in_the_readme() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    for krate in CRATES {
        let Ok(text) = std::fs::read_to_string(root().join(krate).join("src/metrics.rs")) else {
            continue;
        };
        for name in text
            .split('"')
            .skip(1)
            .step_by(2)
            .filter(|s| s.starts_with("ourios."))
        {
            assert!(
                readme.contains(&format!("`{name}`")),
                "metric `{name}` ({krate}) is missing from README.md"
            );
        }
    }
}

/// Failpoints are process-wide: a test that configures one fires it in every other test of the
/// same binary that passes it. So a crate's unit tests configure none (move such a test to
/// `tests/it`), and in an integration-test binary that configures one, every test takes the
/// binary's failpoint guard (`FailScenario::setup`, the `FAILPOINTS` lock, or a `Rig`, which
/// takes one), in its own body or in a helper of the same file it calls.
///
/// Reasoned mutation (not run as a mutant): delete the `FailScenario::setup()` line of any test
/// in `node/tests/it` and this fails naming it; it found
/// `e2e::acknowledged_requests_are_counted_on_metrics`, whose node had fired another test's
/// `node::cut::before_stamp` panic.
#[test]
fn tidy_failpoint_tests_take_the_guard() {
    const GUARDS: &[&str] = &["FailScenario::setup", "FAILPOINTS", "Rig::"];
    let mut unguarded = Vec::new();
    for krate in CRATES {
        let mut sources = Vec::new();
        rust_files(&root().join(krate).join("src"), &mut sources);
        for file in &sources {
            let text = std::fs::read_to_string(file).unwrap();
            assert!(
                !text.contains("fail::cfg("),
                "{} configures a failpoint in a unit test; move the test to tests/it",
                file.display()
            );
        }
        // A test binary is a `tests/*.rs` file or a `tests/*/` folder.
        let Ok(entries) = std::fs::read_dir(root().join(krate).join("tests")) else {
            continue;
        };
        for entry in entries.flatten() {
            let mut files = Vec::new();
            if entry.path().is_dir() {
                rust_files(&entry.path(), &mut files);
            } else if entry.path().extension().is_some_and(|e| e == "rs") {
                files.push(entry.path());
            }
            let texts: Vec<(PathBuf, String)> = files
                .into_iter()
                .map(|f| {
                    let text = std::fs::read_to_string(&f).unwrap();
                    (f, text)
                })
                .collect();
            if !texts.iter().any(|(_, t)| t.contains("fail::cfg(")) {
                continue;
            }
            for (file, text) in &texts {
                let fns = functions(text);
                for (name, body, is_test) in &fns {
                    if *is_test && !guarded(body, &fns, GUARDS, &mut Vec::new()) {
                        unguarded.push(format!("{}: {name}", file.display()));
                    }
                }
            }
        }
    }
    assert!(
        unguarded.is_empty(),
        "tests that run beside configured failpoints without their guard: {unguarded:?}"
    );
}

/// Each top-level `fn` of a file: its name, its body (to the next `}` in the first column) and
/// whether a test attribute stands above it.
fn functions(text: &str) -> Vec<(String, String, bool)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let head = line
            .strip_prefix("async fn ")
            .or_else(|| line.strip_prefix("fn "))
            .or_else(|| line.strip_prefix("pub(crate) fn "))
            .or_else(|| line.strip_prefix("pub(crate) async fn "));
        let Some(head) = head else {
            i += 1;
            continue;
        };
        let name: String = head
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let is_test = lines[..i]
            .iter()
            .rev()
            .take_while(|l| l.starts_with("#[") || l.starts_with("///"))
            .any(|l| l.starts_with("#[test]") || l.starts_with("#[tokio::test"));
        let end = (i..lines.len())
            .find(|&j| lines[j] == "}")
            .unwrap_or(lines.len() - 1);
        out.push((name, lines[i..=end].join("\n"), is_test));
        i = end + 1;
    }
    out
}

/// Whether `body` names a guard, or calls a function of `fns` whose body does.
fn guarded(
    body: &str,
    fns: &[(String, String, bool)],
    guards: &[&str],
    seen: &mut Vec<String>,
) -> bool {
    if guards.iter().any(|g| body.contains(g)) {
        return true;
    }
    for (name, callee, _) in fns {
        if !seen.contains(name) && body.contains(&format!("{name}(")) {
            seen.push(name.clone());
            if guarded(callee, fns, guards, seen) {
                return true;
            }
        }
    }
    false
}

/// Every package of the read path's SQL engine (`datafusion*`, `sqlparser*` in Cargo.lock) has
/// its unoptimised `[profile.dev.package.NAME]` in the workspace's Cargo.toml: Cargo has no
/// wildcard for them, and an upgrade that adds one would quietly build it optimised.
/// Mutation check (by hand): deleting the `datafusion-sql` section fails this naming it.
#[test]
fn tidy_sql_engine_builds_unoptimised_in_tests() {
    let lock = std::fs::read_to_string(root().join("Cargo.lock")).unwrap();
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let engine: Vec<&str> = lock
        .lines()
        .filter_map(|l| l.strip_prefix("name = \""))
        .filter_map(|l| l.strip_suffix('"'))
        .filter(|n| n.starts_with("datafusion") || n.starts_with("sqlparser"))
        .collect();
    assert!(!engine.is_empty(), "Cargo.lock names no datafusion package");
    let missing: Vec<&&str> = engine
        .iter()
        .filter(|n| !manifest.contains(&format!("[profile.dev.package.{n}]\nopt-level = 0")))
        .collect();
    assert!(
        missing.is_empty(),
        "Cargo.toml builds these SQL-engine packages optimised in tests; add \
         `[profile.dev.package.NAME]` with `opt-level = 0` for each: {missing:?}"
    );
}
