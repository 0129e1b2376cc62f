//! Per-tenant marks: the frontier `X_t` (records of frames `<= X_t` are durable in the store),
//! the snapshot mark `S_t` (a miner snapshot covering frames `<= S_t` is installed) and the
//! in-memory hold. Files live in `<wal dir>/tenants/`:
//!
//! - `<tenant>.marks`: `X_t`, replaced atomically (write a `.tmp`, `fdatasync`, rename, fsync
//!   the directory);
//! - `<tenant>.snap`: the opaque snapshot bytes with `S_t` embedded and a CRC32C over both,
//!   replaced the same way. `S_t` is the lsn inside the snapshot file, so the mark and the
//!   state it describes can never disagree.
//!
//! The WAL keeps `S_t <= X_t`: a snapshot ahead of the frontier would make recovery skip frames
//! whose records were never published (DESIGN §7 skips frames `<= S_t`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::error::{MarkError, OpenError};
use crate::format::{decode_marks, decode_snapshot};
use crate::io::WalIo;
use crate::types::{Lsn, TenantId};

const MARKS_SUFFIX: &str = ".marks";
const SNAPSHOT_SUFFIX: &str = ".snap";
const TMP_SUFFIX: &str = ".tmp";

/// A tenant's marks as the WAL holds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Marks {
    /// `X_t`: records of frames `<= frontier` are durable in the store.
    pub frontier: Lsn,
    /// `S_t`: the installed miner snapshot covers frames `<= snapshot` (`Lsn::ZERO`: none, or
    /// it was discarded on open).
    pub snapshot: Lsn,
    /// The lowest hold: the frontier stays below this frame until restart.
    pub hold: Option<Lsn>,
}

/// How recovery treats a frame of a tenant (DESIGN §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReplayMode {
    /// `lsn <= S_t`: the restored snapshot already holds its miner state, and (as
    /// `S_t <= X_t`) its records are durable. Nothing to do.
    Skipped,
    /// `S_t < lsn <= X_t`: records are durable, the miner state is not: re-mine to advance the
    /// state and emit nothing (no records, no audit events).
    RegenerationOnly,
    /// `lsn > max(S_t, X_t)`: mine and publish normally.
    Normal,
}

impl Marks {
    /// The replay mode of a frame at `lsn` under these marks.
    #[must_use]
    pub fn mode(&self, lsn: Lsn) -> ReplayMode {
        if lsn <= self.snapshot {
            ReplayMode::Skipped
        } else if lsn <= self.frontier.max(self.snapshot) {
            ReplayMode::RegenerationOnly
        } else {
            ReplayMode::Normal
        }
    }

    /// The highest lsn the frontier may take under the hold.
    pub(crate) fn cap(&self) -> Option<Lsn> {
        self.hold.map(|h| Lsn(h.0.saturating_sub(1)))
    }
}

/// Why a snapshot file found on open is not used (the tenant then replays in full).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiscardReason {
    /// Checksum, magic, version or tenant did not verify.
    Corrupt,
    /// Its lsn is above the tenant's frontier (never written by this WAL; using it would skip
    /// unpublished frames).
    AheadOfFrontier,
}

impl DiscardReason {
    /// Short label for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            DiscardReason::Corrupt => "corrupt",
            DiscardReason::AheadOfFrontier => "ahead_of_frontier",
        }
    }
}

/// A snapshot file found on open and not used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscardedSnapshot {
    /// The tenant.
    pub tenant: TenantId,
    /// The file.
    pub path: PathBuf,
    /// Why.
    pub reason: DiscardReason,
}

pub(crate) fn marks_path(dir: &Path, tenant: &TenantId) -> PathBuf {
    dir.join(format!("{tenant}{MARKS_SUFFIX}"))
}

pub(crate) fn snapshot_path(dir: &Path, tenant: &TenantId) -> PathBuf {
    dir.join(format!("{tenant}{SNAPSHOT_SUFFIX}"))
}

pub(crate) fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(TMP_SUFFIX);
    PathBuf::from(name)
}

/// Loads every tenant's marks from `dir`, removing leftover temporary files.
pub(crate) fn load(
    io: &dyn WalIo,
    dir: &Path,
) -> Result<(HashMap<TenantId, Marks>, Vec<DiscardedSnapshot>), OpenError> {
    let io_err = |op, path: &Path| {
        let path = path.to_path_buf();
        move |source| OpenError::Io { op, path, source }
    };
    let mut marks: HashMap<TenantId, Marks> = HashMap::new();
    let mut snapshots = Vec::new();
    let mut removed_tmp = false;
    let names = io.list_dir(dir).map_err(io_err("listing", dir))?;
    for name in names {
        let path = dir.join(&name);
        if name.ends_with(TMP_SUFFIX) {
            io.remove_file(&path)
                .map_err(io_err("removing leftover", &path))?;
            removed_tmp = true;
            continue;
        }
        let (stem, is_marks) = if let Some(stem) = name.strip_suffix(MARKS_SUFFIX) {
            (stem, true)
        } else if let Some(stem) = name.strip_suffix(SNAPSHOT_SUFFIX) {
            (stem, false)
        } else {
            continue;
        };
        let tenant =
            TenantId::new(stem).map_err(|_| OpenError::UnexpectedFile { path: path.clone() })?;
        if is_marks {
            let bytes = io.read_file(&path).map_err(io_err("reading", &path))?;
            let frontier = decode_marks(&bytes, &tenant).ok_or(OpenError::CorruptMarks { path })?;
            marks.entry(tenant).or_default().frontier = frontier;
        } else {
            snapshots.push((tenant, path));
        }
    }
    if removed_tmp {
        io.sync_dir(dir).map_err(io_err("syncing", dir))?;
    }
    let mut discarded = Vec::new();
    for (tenant, path) in snapshots {
        let bytes = io.read_file(&path).map_err(io_err("reading", &path))?;
        let entry = marks.entry(tenant.clone()).or_default();
        let reason = match decode_snapshot(&bytes, &tenant) {
            None => DiscardReason::Corrupt,
            Some((lsn, _)) if lsn > entry.frontier => DiscardReason::AheadOfFrontier,
            Some((lsn, _)) => {
                entry.snapshot = lsn;
                continue;
            }
        };
        discarded.push(DiscardedSnapshot {
            tenant,
            path,
            reason,
        });
    }
    Ok((marks, discarded))
}

/// Writes `bytes` to `path`'s temporary sibling and makes it durable; the caller renames it.
pub(crate) fn write_tmp(io: &dyn WalIo, path: &Path, bytes: &[u8]) -> Result<PathBuf, MarkError> {
    let tmp = tmp_path(path);
    let err = |op| {
        let path = tmp.clone();
        move |source| MarkError::Io { op, path, source }
    };
    match io.remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err("removing stale")(e)),
    }
    let mut file = io.create_new(&tmp).map_err(err("creating"))?;
    file.write_all(bytes).map_err(err("writing"))?;
    file.sync_data().map_err(err("syncing"))?;
    Ok(tmp)
}

/// Reads and verifies `tenant`'s snapshot file, expecting it at `lsn`.
pub(crate) fn read_snapshot(
    io: &dyn WalIo,
    dir: &Path,
    tenant: &TenantId,
    lsn: Lsn,
) -> Result<Vec<u8>, MarkError> {
    let path = snapshot_path(dir, tenant);
    let mut bytes = io.read_file(&path).map_err(|source| MarkError::Io {
        op: "reading",
        path: path.clone(),
        source,
    })?;
    match decode_snapshot(&bytes, tenant) {
        Some((found, range)) if found == lsn => {
            bytes.truncate(range.end);
            bytes.drain(..range.start);
            Ok(bytes)
        }
        _ => Err(MarkError::CorruptSnapshot {
            tenant: tenant.clone(),
            path,
        }),
    }
}
