//! Error enums, one per operation family. Messages are lower case and name what an operator
//! needs: the segment file, the byte offset, the tenant, the lsns.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use crate::format::BadFrame;
use crate::types::{Lsn, TenantId};

/// Which step of a group commit failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailStage {
    /// Creating the next segment (file, header, its sync or the directory sync).
    Rotate,
    /// Writing the batch into the active segment.
    Write,
    /// The `fdatasync` covering the batch.
    Sync,
    /// The thread leading the commit panicked part-way.
    Panic,
}

impl fmt::Display for FailStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FailStage::Rotate => "segment rotation",
            FailStage::Write => "write",
            FailStage::Sync => "fdatasync",
            FailStage::Panic => "commit (the leading thread panicked)",
        })
    }
}

/// The failure that stopped the WAL accepting appends: which step, on which segment, which
/// lsns the failed batch held, and the I/O error.
#[derive(Debug, Clone)]
pub struct WalFailure {
    /// The step that failed.
    pub stage: FailStage,
    /// The segment file being written (or created).
    pub segment: PathBuf,
    /// First and last lsn of the failed batch (`None` for an explicit rotation, which fails
    /// no batch).
    pub batch: Option<(Lsn, Lsn)>,
    /// The I/O error (shared: every waiter of the batch receives it).
    pub source: Arc<io::Error>,
}

impl fmt::Display for WalFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of wal segment {} failed",
            self.stage,
            self.segment.display()
        )?;
        if let Some((first, last)) = self.batch {
            write!(f, " for lsns {first}..={last}")?;
        }
        write!(f, ": {}", self.source)
    }
}

/// Why [`crate::Wal::append`] did not acknowledge a frame.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AppendError {
    /// The encoded frame is larger than the configured maximum; nothing was written.
    #[error("frame for tenant {tenant} is {size} bytes, above the wal's {max}-byte limit")]
    FrameTooLarge {
        /// The tenant of the refused frame.
        tenant: TenantId,
        /// Its encoded size.
        size: usize,
        /// The configured maximum (`WalConfig::max_frame_bytes`).
        max: usize,
    },
    /// The write or sync that covered this frame failed: it is not acknowledged (it may or may
    /// not be found on replay). The WAL is now read-only.
    #[error("wal {0}; the frame is not acknowledged and the wal is read-only until reopened")]
    Failed(WalFailure),
    /// An earlier failure made the WAL read-only; this frame was never written.
    #[error("wal is read-only after an earlier failure, reopen it to re-validate from disk: {0}")]
    Poisoned(WalFailure),
}

/// What is wrong at a corrupt position of a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Corruption {
    /// The bytes at the offset are not a valid frame (in a sealed segment, or a problem a torn
    /// write cannot produce).
    Frame(BadFrame),
    /// The newest segment holds a bad frame with a valid frame after it, so it is not a torn
    /// tail.
    FrameBeforeValid {
        /// What is wrong with the bad frame.
        problem: BadFrame,
        /// Byte offset of the valid frame found after it.
        valid_at: u64,
    },
    /// The header of a sealed segment is damaged.
    Header,
    /// The newest segment's header is damaged but valid frames follow it, so it is not a
    /// segment torn while being created.
    HeaderBeforeValid {
        /// Byte offset of the first valid frame found.
        valid_at: u64,
    },
    /// The header's base lsn differs from the one in the file name.
    BaseMismatch {
        /// Base lsn in the file name.
        name: Lsn,
        /// Base lsn in the header.
        header: Lsn,
    },
    /// The segment's base lsn is not above the last lsn of the segment before it.
    BaseNotIncreasing {
        /// This segment's base lsn.
        base: Lsn,
        /// Last lsn of the previous segment.
        previous: Lsn,
    },
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Corruption::Frame(p) => write!(f, "{p}"),
            Corruption::FrameBeforeValid { problem, valid_at } => write!(
                f,
                "{problem}, followed by a valid frame at byte offset {valid_at} (not a torn tail)"
            ),
            Corruption::Header => f.write_str("segment header is damaged"),
            Corruption::HeaderBeforeValid { valid_at } => write!(
                f,
                "segment header is damaged, followed by a valid frame at byte offset {valid_at} \
                 (not a torn segment)"
            ),
            Corruption::BaseMismatch { name, header } => write!(
                f,
                "header base lsn {header} differs from the file name's base lsn {name}"
            ),
            Corruption::BaseNotIncreasing { base, previous } => write!(
                f,
                "base lsn {base} is not above the previous segment's last lsn {previous}"
            ),
        }
    }
}

/// Why [`crate::Wal::open`] failed.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// An I/O operation failed.
    #[error("wal open: {op} {path}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// On which path.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// Another open WAL holds the directory.
    #[error("wal directory {dir} is already open (locked by another wal instance)")]
    Locked {
        /// The WAL directory.
        dir: PathBuf,
    },
    /// A segment is corrupt somewhere other than a torn tail of the newest segment.
    #[error("wal segment {segment} is corrupt at byte offset {offset}: {problem}")]
    Corrupt {
        /// The segment file.
        segment: PathBuf,
        /// Byte offset of the bad frame (0 for the header).
        offset: u64,
        /// What is wrong.
        problem: Corruption,
    },
    /// A tenant's marks file is damaged. It is replaced atomically, so this is not a torn
    /// write; deleting the file resets the tenant's frontier to 0 (full replay, duplicates in
    /// the store but no loss).
    #[error("wal marks file {path} is corrupt (delete it to replay the tenant in full)")]
    CorruptMarks {
        /// The marks file.
        path: PathBuf,
    },
    /// A file with a WAL extension whose name does not parse (a segment or tenant file).
    #[error("unexpected file in the wal directory: {path}")]
    UnexpectedFile {
        /// The file.
        path: PathBuf,
    },
}

/// Why [`crate::Replay`] stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// Reading a segment failed.
    #[error("wal replay: reading segment {segment}")]
    Io {
        /// The segment file.
        segment: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// A frame no longer verifies (the file changed after open).
    #[error("wal replay: segment {segment} is corrupt at byte offset {offset}: {problem}")]
    Corrupt {
        /// The segment file.
        segment: PathBuf,
        /// Byte offset of the bad frame (0 for the header).
        offset: u64,
        /// What is wrong.
        problem: Corruption,
    },
}

/// Why a stamp or a snapshot read failed.
#[derive(Debug, thiserror::Error)]
pub enum MarkError {
    /// A frontier above the WAL's durable lsn was requested: stamping it would let recovery
    /// suppress frames not yet written. Nothing was stamped.
    #[error(
        "refusing to stamp tenant {tenant} frontier {requested}: above the wal's durable lsn {durable}"
    )]
    BeyondDurable {
        /// The tenant.
        tenant: TenantId,
        /// The requested frontier.
        requested: Lsn,
        /// The WAL's durable lsn at the time.
        durable: Lsn,
    },
    /// The same tenant appears twice in one stamp.
    #[error("tenant {tenant} appears more than once in one stamp")]
    DuplicateTenant {
        /// The tenant.
        tenant: TenantId,
    },
    /// Writing or reading a marks or snapshot file failed. Marks already persisted by the
    /// same call stay; the in-memory marks only reflect what is durable.
    #[error("wal marks: {op} {path}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// On which path.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The tenant's snapshot file no longer verifies (it changed after open).
    #[error("snapshot file {path} of tenant {tenant} is corrupt")]
    CorruptSnapshot {
        /// The tenant.
        tenant: TenantId,
        /// The snapshot file.
        path: PathBuf,
    },
}

/// Why a rotation or a truncation failed.
#[derive(Debug, thiserror::Error)]
pub enum SegmentError {
    /// This rotation failed; the WAL is now read-only (the segment directory's state is
    /// unknown, so appending on to the old segment could leave it behind a stray newer file).
    #[error("wal rotation failed, the wal is read-only until reopened: {0}")]
    RotateFailed(WalFailure),
    /// The WAL is read-only after a failed write or sync.
    #[error("wal is read-only after an earlier failure: {0}")]
    Poisoned(WalFailure),
    /// An I/O operation failed.
    #[error("wal segments: {op} {path}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// On which path.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
}
