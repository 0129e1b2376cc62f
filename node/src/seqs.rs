//! Audit sequence numbers that never repeat across restarts.
//!
//! The audit sink numbers events from a base. Each process reserves a range of `SEQ_RANGE`
//! numbers: it reads the base the previous process left in `<data_dir>/audit-seq`, durably
//! writes base + `SEQ_RANGE` there for the next one, and only then numbers from base + 1. A crash
//! at any point leaves either the old file (the range is reserved again: nothing was numbered
//! from it) or the new one. One process would need 2^40 template events to leave its range.

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;

use anyhow::Context;

/// Numbers reserved per process.
pub const SEQ_RANGE: u64 = 1 << 40;

const FILE: &str = "audit-seq";

/// Reserves this process's range in `data_dir`: returns its base (the first number handed out
/// is base + 1).
///
/// # Errors
/// The file cannot be read, is not a number, is exhausted, or the new value cannot be made
/// durable.
pub fn reserve(data_dir: &Path) -> anyhow::Result<u64> {
    let path = data_dir.join(FILE);
    let base = match fs::read_to_string(&path) {
        Ok(text) => text
            .trim()
            .parse::<u64>()
            .with_context(|| format!("{} does not hold a number", path.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let next = base
        .checked_add(SEQ_RANGE)
        .with_context(|| format!("{} is exhausted ({base})", path.display()))?;
    fs::create_dir_all(data_dir).with_context(|| format!("creating {}", data_dir.display()))?;
    let tmp = data_dir.join(format!("{FILE}.tmp"));
    let mut file = File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    writeln!(file, "{next}")?;
    file.sync_all()
        .with_context(|| format!("syncing {}", tmp.display()))?;
    fs::rename(&tmp, &path).with_context(|| format!("renaming to {}", path.display()))?;
    File::open(data_dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing {}", data_dir.display()))?;
    Ok(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reservation_starts_past_the_last() {
        let dir = tempfile::tempdir().unwrap();
        let a = reserve(dir.path()).unwrap();
        let b = reserve(dir.path()).unwrap();
        let c = reserve(dir.path()).unwrap();
        assert_eq!((a, b, c), (0, SEQ_RANGE, 2 * SEQ_RANGE));
        fs::write(dir.path().join(FILE), "garbage").unwrap();
        assert!(
            reserve(dir.path()).is_err(),
            "a damaged file is refused, not reset"
        );
    }
}
