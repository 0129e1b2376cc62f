//! The WAL: its state and open/recovery here; appends and the group commit in `commit`,
//! rotation and truncation in `segments`, frontiers, snapshots and holds in `frontiers`.

use std::collections::HashMap;
use std::fmt;
use std::mem;
use std::path::{Path, PathBuf};
use std::task::Waker;
use std::time::{Duration, Instant};

use crate::error::{AppendError, FailStage, MarkError, OpenError, SegmentError, WalFailure};
use crate::format::{FramePrefix, segment_header};
use crate::identity::{self, WalId};
use crate::io::{SegmentFile, StdIo, WalIo};
use crate::marks::{self, DiscardedSnapshot, Marks};
use crate::metrics as m;
use crate::segment::{self, SegmentMeta, TornTail};
use crate::sync::{Condvar, Mutex, StdArc, lock, wait};
use crate::types::{Lsn, TenantId};

mod commit;
mod committer;
mod frontiers;
mod segments;

pub use committer::{CommitThread, Durable};
use segments::create_segment;

/// Default [`WalConfig::max_frame_bytes`]: 8 MiB.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 8 << 20;
/// Default [`WalConfig::max_segment_bytes`]: 64 MiB.
pub const DEFAULT_MAX_SEGMENT_BYTES: u64 = 64 << 20;
/// Default [`WalConfig::max_segment_age`]: 10 minutes.
pub const DEFAULT_MAX_SEGMENT_AGE: Duration = Duration::from_secs(600);

/// Where the WAL lives and when it rotates.
#[derive(Debug, Clone)]
pub struct WalConfig {
    /// The WAL directory (`segments/`, `tenants/` and a `LOCK` file inside).
    pub dir: PathBuf,
    /// Largest encoded frame accepted (header, tenant and payload).
    pub max_frame_bytes: usize,
    /// A segment is sealed before a batch would take it past this size (a segment holding a
    /// single batch larger than this is allowed, so one batch is never split).
    pub max_segment_bytes: u64,
    /// A segment with frames older than this (since it was created or reopened) is sealed at
    /// the next append. `None`: size only. Checked on append; an idle WAL does not rotate.
    pub max_segment_age: Option<Duration>,
}

impl WalConfig {
    /// Defaults for a WAL in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            max_segment_bytes: DEFAULT_MAX_SEGMENT_BYTES,
            max_segment_age: Some(DEFAULT_MAX_SEGMENT_AGE),
        }
    }
}

/// What opening the WAL found and healed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Segments on disk after recovery.
    pub segments: usize,
    /// Valid frames found.
    pub frames: u64,
    /// The last lsn on disk (appends continue above it).
    pub last_lsn: Lsn,
    /// The torn tail cut from the newest segment, if any (also counted on
    /// `ourios.wal.torn_tail_truncations`).
    pub torn_tail: Option<TornTail>,
    /// Snapshot files not used; those tenants replay in full.
    pub discarded_snapshots: Vec<DiscardedSnapshot>,
}

/// One tenant's update in a [`Wal::stamp`] call: the frontier a successful cut reached and,
/// optionally, the miner snapshot taken at that same position.
#[derive(Debug, Clone, Copy)]
pub struct Stamp<'a> {
    /// The tenant.
    pub tenant: &'a TenantId,
    /// Requested `X_t`: records of this tenant's frames `<= frontier` are durable.
    pub frontier: Lsn,
    /// Miner state after this tenant's frames `<= frontier` (installed as `S_t = frontier`).
    pub snapshot: Option<&'a [u8]>,
}

/// What a stamp did to a tenant's frontier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrontierOutcome {
    /// Moved up to `to` as requested.
    Advanced {
        /// Previous frontier.
        from: Lsn,
        /// New frontier.
        to: Lsn,
    },
    /// A hold kept it below the requested value; it moved to `to` (possibly `from`).
    Held {
        /// Previous frontier.
        from: Lsn,
        /// New frontier (`hold - 1`, or `from` if that was already there).
        to: Lsn,
        /// What was asked for.
        requested: Lsn,
        /// The hold.
        hold: Lsn,
    },
    /// The request was not above the current frontier; frontiers never move back, so it was
    /// ignored.
    Unchanged {
        /// The frontier, unchanged.
        current: Lsn,
    },
}

/// What a stamp did with a tenant's snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotOutcome {
    /// No snapshot was given.
    NotGiven,
    /// Installed: `S_t` is now `lsn`.
    Installed {
        /// The new `S_t`.
        lsn: Lsn,
    },
    /// Not above the current `S_t`; ignored (snapshot marks never move back).
    Stale {
        /// The current `S_t`.
        current: Lsn,
    },
    /// Its position is above the frontier the stamp left (a hold clamped it); installing it
    /// would let recovery skip unpublished frames, so it was not written.
    AheadOfFrontier {
        /// The frontier after the stamp.
        frontier: Lsn,
    },
}

/// What [`Wal::stamp`] did for one tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StampOutcome {
    /// The tenant.
    pub tenant: TenantId,
    /// Frontier result.
    pub frontier: FrontierOutcome,
    /// Snapshot result.
    pub snapshot: SnapshotOutcome,
}

/// What [`Wal::hold`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum HoldOutcome {
    /// The frontier now stays below `frame` (the lowest hold of the tenant) until restart.
    Held {
        /// The effective (lowest) held frame.
        frame: Lsn,
    },
    /// The frontier had already reached the frame: a stamp crossed it before the hold.
    AlreadyPast {
        /// The tenant's frontier.
        frontier: Lsn,
    },
}

/// What [`Wal::truncate`] deleted.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TruncateReport {
    /// Deleted segment files.
    pub deleted: Vec<PathBuf>,
    /// Their total size.
    pub bytes: u64,
    /// Segments left (sealed plus active).
    pub remaining: usize,
    /// Nothing was deleted because a [`crate::Replay`] is reading the segments.
    pub deferred: bool,
}

/// A tenant's miner snapshot as installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// `S_t`: the state covers the tenant's frames `<= lsn`.
    pub lsn: Lsn,
    /// The opaque state bytes.
    pub state: Vec<u8>,
}

/// Counters and positions, for tests, benchmarks and health endpoints.
#[derive(Debug, Clone)]
pub struct WalStats {
    /// The lsn the next append gets.
    pub next_lsn: Lsn,
    /// The highest acknowledged lsn.
    pub durable_lsn: Lsn,
    /// Frames appended but not yet taken by a commit.
    pub queued_frames: usize,
    /// Frames acknowledged since open.
    pub appends: u64,
    /// Group-commit syncs since open.
    pub syncs: u64,
    /// Frame bytes acknowledged since open.
    pub bytes: u64,
    /// Segment files (sealed plus active).
    pub segments: usize,
    /// Rotations since open.
    pub rotations: u64,
    /// The failure that made the WAL read-only, if any.
    pub failure: Option<WalFailure>,
    /// A [`CommitThread`] runs and has not been told to stop.
    pub commit_thread: bool,
}

/// Frames waiting for a group commit: their encoded bytes back to back, and who they are.
#[derive(Debug, Default)]
struct Batch {
    bytes: Vec<u8>,
    frames: Vec<(Lsn, TenantId)>,
}

/// Per-tenant newest durable lsn and frontier, for the lag gauge.
#[derive(Debug, Default, Clone, Copy)]
struct Progress {
    newest: Lsn,
    frontier: Lsn,
}

impl Progress {
    fn lag(self) -> u64 {
        self.newest.0.saturating_sub(self.frontier.0)
    }
}

/// A tenant's progress entry, cloning its id only when it is new.
fn progress_of<'a>(
    map: &'a mut HashMap<TenantId, Progress>,
    tenant: &TenantId,
) -> &'a mut Progress {
    if !map.contains_key(tenant) {
        map.insert(tenant.clone(), Progress::default());
    }
    map.get_mut(tenant).expect("inserted above")
}

/// State shared by appenders; held only for short, non-blocking sections.
#[derive(Debug)]
struct CommitState {
    next_lsn: u64,
    /// Frames not yet taken by a leader.
    batch: Batch,
    /// A cleared batch kept for its capacity.
    spare: Batch,
    /// A thread is writing and syncing a batch.
    leader_active: bool,
    /// Batches taken by leaders so far; the one in flight (if any) is number `taken`.
    taken: u64,
    /// Last lsn of the newest batch taken.
    taken_last: Lsn,
    /// Highest lsn covered by a successful sync.
    durable: Lsn,
    /// Set once by the first failed write/sync/rotation; the WAL is read-only after.
    failure: Option<WalFailure>,
    progress: HashMap<TenantId, Progress>,
    appends: u64,
    syncs: u64,
    bytes: u64,
    /// Copies of the log state's counts, so `stats` never waits for a commit's I/O.
    segments: usize,
    rotations: u64,
    /// Async waiters ([`Wal::durable`]): each frame's lsn and the waker to call once a commit
    /// covering it has ended (or the WAL failed, or the commit thread stopped).
    wakers: Vec<(Lsn, Waker)>,
    /// The commit thread's state ([`CommitThread`]).
    committer: Committer,
}

/// Whether a [`CommitThread`] runs, and what it is doing.
#[derive(Debug, Default, Clone, Copy)]
struct Committer {
    running: bool,
    /// Asleep on `Wal::work`: notify it to lead a commit.
    idle: bool,
    /// Its handle was dropped: finish and exit.
    stop: bool,
}

#[derive(Debug)]
struct Active {
    meta: SegmentMeta,
    file: Box<dyn SegmentFile>,
    opened: Instant,
}

/// Segment state, held while a batch is written and synced (the "I/O lock").
#[derive(Debug)]
struct LogState {
    active: Active,
    /// Sealed segments, oldest first. Everything in them is synced.
    sealed: Vec<SegmentMeta>,
    /// Segments truncation renamed to their retired names and has yet to remove (a removal
    /// that failed, or the directory sync before it): the next truncation tries again.
    retired: Vec<PathBuf>,
    replays_live: usize,
}

impl LogState {
    fn segment_count(&self) -> usize {
        self.sealed.len() + 1
    }
}

/// The write-ahead log. Share it across threads by reference or `Arc`.
///
/// Lock order (never reversed): `log` before `commit`; `marks` before `commit`; `log` and
/// `marks` are never held together. `commit` is never held across I/O.
pub struct Wal {
    config: WalConfig,
    io: StdArc<dyn WalIo>,
    segment_dir: PathBuf,
    tenant_dir: PathBuf,
    commit: Mutex<CommitState>,
    /// Waiters of batch `n` sleep on `committed[n % 2]`: a finished batch wakes all of its own
    /// waiters and one waiter of the next batch (to lead it), not every appender.
    committed: [Condvar; 2],
    /// The commit thread sleeps here while it has nothing to commit.
    work: Condvar,
    log: Mutex<LogState>,
    marks: Mutex<HashMap<TenantId, Marks>>,
    id: WalId,
    _lock: Box<dyn fmt::Debug + Send + Sync>,
}

impl fmt::Debug for Wal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wal")
            .field("dir", &self.config.dir)
            .finish_non_exhaustive()
    }
}

fn open_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> OpenError + 'a {
    move |source| OpenError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

fn tenant_label(tenant: &TenantId) -> [(&'static str, String); 1] {
    [(m::LABEL_TENANT, tenant.as_str().to_owned())]
}

impl Wal {
    /// Opens (or creates) the WAL in `config.dir` with real file I/O, recovering what is on
    /// disk: every segment is verified, a torn tail on the newest segment is cut off and
    /// counted, corruption anywhere else is an error naming the segment and byte offset.
    ///
    /// # Errors
    /// [`OpenError`]: I/O failure, the directory is locked by another open WAL, corruption, or
    /// a damaged marks file.
    pub fn open(config: WalConfig) -> Result<(Wal, RecoveryReport), OpenError> {
        Self::open_with_io(config, StdArc::new(StdIo))
    }

    /// As [`Wal::open`], over the given I/O implementation.
    ///
    /// # Errors
    /// As [`Wal::open`].
    pub fn open_with_io(
        config: WalConfig,
        io: StdArc<dyn WalIo>,
    ) -> Result<(Wal, RecoveryReport), OpenError> {
        let dir = config.dir.clone();
        let segment_dir = dir.join("segments");
        let tenant_dir = dir.join("tenants");
        for d in [&segment_dir, &tenant_dir] {
            io.create_dir_all(d).map_err(open_err("creating", d))?;
        }
        // Make the directories themselves durable (a fresh WAL directory's entry lives in its
        // parent).
        for d in [
            Some(dir.as_path()),
            dir.parent().filter(|p| !p.as_os_str().is_empty()),
        ]
        .into_iter()
        .flatten()
        {
            io.sync_dir(d).map_err(open_err("syncing", d))?;
        }
        let dir_lock = io.lock_dir(&dir).map_err(|source| {
            if source.kind() == std::io::ErrorKind::WouldBlock {
                OpenError::Locked { dir: dir.clone() }
            } else {
                OpenError::Io {
                    op: "locking",
                    path: dir.clone(),
                    source,
                }
            }
        })?;

        let id = identity::load_or_create(&*io, &dir)?;
        let (marks, discarded) = marks::load(&*io, &tenant_dir)?;
        let scan = segment::scan(&*io, &segment_dir)?;
        let max_mark = marks
            .values()
            .map(|m| m.frontier)
            .max()
            .unwrap_or(Lsn::ZERO);
        let next_lsn = scan.last.max(max_mark).0 + 1;

        let mut sealed = scan.segments;
        let active = match sealed.pop() {
            Some(meta) => {
                let mut file = io
                    .open_append(&meta.path)
                    .map_err(open_err("opening", &meta.path))?;
                // What recovery read may have been in the page cache only (a killed process's
                // unsynced writes): make it durable before anything builds on it.
                file.sync_data().map_err(open_err("syncing", &meta.path))?;
                Active {
                    meta,
                    file,
                    opened: Instant::now(),
                }
            }
            None => {
                let (meta, file) = create_segment(&*io, &segment_dir, Lsn(next_lsn)).map_err(
                    |(path, source)| OpenError::Io {
                        op: "creating segment",
                        path,
                        source,
                    },
                )?;
                Active {
                    meta,
                    file,
                    opened: Instant::now(),
                }
            }
        };

        let mut progress: HashMap<TenantId, Progress> = HashMap::new();
        for meta in sealed.iter().chain([&active.meta]) {
            for (tenant, &lsn) in &meta.tenants {
                let p = progress.entry(tenant.clone()).or_default();
                p.newest = p.newest.max(lsn);
            }
        }
        for (tenant, mark) in &marks {
            progress.entry(tenant.clone()).or_default().frontier = mark.frontier;
        }

        let report = RecoveryReport {
            segments: sealed.len() + 1,
            frames: scan.frames,
            last_lsn: Lsn(next_lsn - 1),
            torn_tail: scan.torn,
            discarded_snapshots: discarded,
        };
        if let Some(torn) = &report.torn_tail {
            metrics::counter!(m::TORN_TAIL_TRUNCATIONS).increment(1);
            metrics::counter!(m::TORN_TAIL_BYTES).increment(torn.bytes);
        }
        for d in &report.discarded_snapshots {
            metrics::counter!(m::SNAPSHOTS_DISCARDED, &tenant_label(&d.tenant)).increment(1);
        }
        metrics::gauge!(m::SEGMENTS).set(report.segments as f64);
        metrics::gauge!(m::POISONED).set(0.0);
        for (tenant, p) in &progress {
            metrics::gauge!(m::TENANT_FRONTIER_LAG, &tenant_label(tenant)).set(p.lag() as f64);
        }

        let wal = Wal {
            config,
            io,
            segment_dir,
            tenant_dir,
            commit: Mutex::new(CommitState {
                next_lsn,
                batch: Batch::default(),
                spare: Batch::default(),
                leader_active: false,
                taken: 0,
                taken_last: Lsn(next_lsn - 1),
                durable: Lsn(next_lsn - 1),
                failure: None,
                progress,
                appends: 0,
                syncs: 0,
                bytes: 0,
                segments: report.segments,
                rotations: 0,
                wakers: Vec::new(),
                committer: Committer::default(),
            }),
            committed: [Condvar::new(), Condvar::new()],
            work: Condvar::new(),
            log: Mutex::new(LogState {
                active,
                sealed,
                retired: Vec::new(),
                replays_live: 0,
            }),
            marks: Mutex::new(marks),
            id,
            _lock: dir_lock,
        };
        Ok((wal, report))
    }

    /// The configuration the WAL was opened with.
    pub fn config(&self) -> &WalConfig {
        &self.config
    }

    /// The highest acknowledged lsn.
    pub fn durable_lsn(&self) -> Lsn {
        lock(&self.commit).durable
    }

    /// The failure that made the WAL read-only, if any.
    pub fn failure(&self) -> Option<WalFailure> {
        lock(&self.commit).failure.clone()
    }

    /// This WAL's identity: random, created with the WAL and kept in it, so
    /// `(id, lsn, index)` names one record even when many nodes write one store.
    pub fn id(&self) -> WalId {
        self.id
    }

    /// Counters and positions. Never waits for a commit in progress.
    pub fn stats(&self) -> WalStats {
        let state = lock(&self.commit);
        WalStats {
            next_lsn: Lsn(state.next_lsn),
            durable_lsn: state.durable,
            queued_frames: state.batch.frames.len(),
            appends: state.appends,
            syncs: state.syncs,
            bytes: state.bytes,
            segments: state.segments,
            rotations: state.rotations,
            failure: state.failure.clone(),
            commit_thread: state.committer.running && !state.committer.stop,
        }
    }

    /// Segment files in order, with the bytes of each that are verified and synced.
    /// Registers a live replay (truncation defers until it ends).
    pub(crate) fn begin_replay(&self) -> Vec<(PathBuf, Lsn, u64)> {
        let mut log = lock(&self.log);
        log.replays_live += 1;
        log.sealed
            .iter()
            .chain([&log.active.meta])
            .map(|meta| (meta.path.clone(), meta.base, meta.len))
            .collect()
    }

    pub(crate) fn end_replay(&self) {
        let mut log = lock(&self.log);
        log.replays_live = log.replays_live.saturating_sub(1);
    }

    pub(crate) fn io(&self) -> &dyn WalIo {
        &*self.io
    }

    /// Paths of the segment files, oldest first (sealed, then the active one). Waits for a
    /// commit in progress.
    pub fn segment_paths(&self) -> Vec<PathBuf> {
        let log = lock(&self.log);
        log.sealed
            .iter()
            .chain([&log.active.meta])
            .map(|meta| meta.path.clone())
            .collect()
    }
}
