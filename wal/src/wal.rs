//! The WAL: open/recovery, group-committed appends, rotation, truncation, marks and holds.

use std::collections::HashMap;
use std::fmt;
use std::mem;
use std::path::{Path, PathBuf};
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
}

/// Frames waiting for a group commit: their encoded bytes back to back, and who they are.
#[derive(Debug, Default)]
struct Batch {
    bytes: Vec<u8>,
    frames: Vec<(Lsn, TenantId)>,
}

impl Batch {
    fn range(&self) -> (Lsn, Lsn) {
        (self.frames[0].0, self.frames[self.frames.len() - 1].0)
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.frames.clear();
    }
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

/// Creates a segment: file, header, `fdatasync`, directory fsync — all before any frame in it
/// can be acknowledged.
fn create_segment(
    io: &dyn WalIo,
    dir: &Path,
    base: Lsn,
) -> Result<(SegmentMeta, Box<dyn SegmentFile>), (PathBuf, std::io::Error)> {
    let path = dir.join(segment::segment_name(base));
    let make = || {
        let mut file = io.create_new(&path)?;
        file.write_all(&segment_header(base))?;
        file.sync_data()?;
        io.sync_dir(dir)?;
        Ok(file)
    };
    match make() {
        Ok(file) => Ok((SegmentMeta::new(base, path), file)),
        Err(e) => Err((path, e)),
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
            }),
            committed: [Condvar::new(), Condvar::new()],
            log: Mutex::new(LogState {
                active,
                sealed,
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

    /// Appends one frame for `tenant` and returns its lsn once a `fdatasync` covering it has
    /// succeeded. Concurrent callers share syncs (group commit): the first waiter without a
    /// commit in progress writes and syncs every queued frame for all of them.
    ///
    /// After a failed write, sync or rotation the WAL is read-only: every frame that failure
    /// covered gets [`AppendError::Failed`], every later call [`AppendError::Poisoned`]. It
    /// does not retry: after a failed `fsync` the kernel may have dropped the dirty pages and
    /// cleared the error, so a retry could "succeed" without the data on disk, and the state of
    /// the page cache is unknown. Reopening re-validates from disk.
    ///
    /// # Errors
    /// [`AppendError`]; on any error the frame is not acknowledged.
    pub fn append(&self, tenant: &TenantId, payload: &[u8]) -> Result<Lsn, AppendError> {
        let prefix = FramePrefix::new(tenant, payload)
            .filter(|p| p.encoded_len() <= self.config.max_frame_bytes)
            .ok_or_else(|| {
                count_error("frame_too_large");
                AppendError::FrameTooLarge {
                    tenant: tenant.clone(),
                    size: crate::format::frame_len(tenant, payload.len()),
                    max: self.config.max_frame_bytes,
                }
            })?;
        let mut state = lock(&self.commit);
        if let Some(failure) = &state.failure {
            count_error("poisoned");
            return Err(AppendError::Poisoned(failure.clone()));
        }
        let lsn = Lsn(state.next_lsn);
        state.next_lsn += 1;
        prefix.encode_into(&mut state.batch.bytes, lsn, tenant, payload);
        state.batch.frames.push((lsn, tenant.clone()));
        loop {
            if state.durable >= lsn {
                return Ok(lsn);
            }
            if let Some(failure) = &state.failure {
                let covered = failure
                    .batch
                    .is_some_and(|(first, last)| first <= lsn && lsn <= last);
                return Err(if covered {
                    count_error(match failure.stage {
                        FailStage::Sync => "sync_failed",
                        FailStage::Write => "write_failed",
                        FailStage::Rotate => "rotate_failed",
                        FailStage::Panic => "commit_panicked",
                    });
                    AppendError::Failed(failure.clone())
                } else {
                    count_error("poisoned");
                    AppendError::Poisoned(failure.clone())
                });
            }
            if !state.leader_active && !state.batch.frames.is_empty() {
                state.leader_active = true;
                state.taken += 1;
                let spare = mem::take(&mut state.spare);
                let batch = mem::replace(&mut state.batch, spare);
                state.taken_last = batch.range().1;
                drop(state);
                self.lead(batch);
                state = lock(&self.commit);
                continue;
            }
            // My frame is in the batch in flight, or queued for the next one.
            let mine = if lsn <= state.taken_last {
                state.taken
            } else {
                state.taken + 1
            };
            state = wait(&self.committed[(mine % 2) as usize], state);
        }
    }

    /// Writes and syncs `batch` as the commit leader, then publishes the outcome to every
    /// waiter. A panic on the way is turned into a failure by `LeadGuard`.
    fn lead(&self, mut batch: Batch) {
        let (first, last) = batch.range();
        let mut guard = LeadGuard {
            wal: self,
            batch: Some((first, last)),
            done: false,
        };
        let result = self.write_batch(&batch);
        let (frames, bytes) = (batch.frames.len() as u64, batch.bytes.len() as u64);
        let mut lags = Vec::new();
        let mut state = lock(&self.commit);
        let ok = result.is_ok();
        match result {
            Ok(()) => {
                state.durable = last;
                state.appends += frames;
                state.syncs += 1;
                state.bytes += bytes;
                // Newest first, so each tenant's first hit is its highest lsn in the batch.
                for (lsn, tenant) in batch.frames.iter().rev() {
                    let p = progress_of(&mut state.progress, tenant);
                    if p.newest < *lsn {
                        p.newest = *lsn;
                        lags.push((tenant.clone(), p.lag()));
                    }
                }
            }
            Err(failure) => state.failure = Some(failure),
        }
        state.leader_active = false;
        let this = (state.taken % 2) as usize;
        batch.clear();
        if state.spare.bytes.capacity() < batch.bytes.capacity() {
            state.spare = batch;
        }
        drop(state);
        guard.done = true;
        if ok {
            // Every waiter of this batch returns; one waiter of the next batch leads it.
            self.committed[this].notify_all();
            self.committed[1 - this].notify_one();
        } else {
            self.wake_all();
        }

        if ok {
            metrics::counter!(m::APPENDS).increment(frames);
            metrics::counter!(m::SYNCS).increment(1);
            metrics::counter!(m::BYTES).increment(bytes);
            metrics::histogram!(m::SYNC_BATCH_FRAMES).record(frames as f64);
            for (tenant, lag) in lags {
                metrics::gauge!(m::TENANT_FRONTIER_LAG, &tenant_label(&tenant)).set(lag as f64);
            }
        } else {
            metrics::gauge!(m::POISONED).set(1.0);
        }
    }

    /// Rotates if due, writes `batch` into the active segment and syncs it, under the log lock.
    fn write_batch(&self, batch: &Batch) -> Result<(), WalFailure> {
        let mut log = lock(&self.log);
        let (first, last) = batch.range();
        let fail = |stage, segment: &Path, source| WalFailure {
            stage,
            segment: segment.to_path_buf(),
            batch: Some((first, last)),
            source: StdArc::new(source),
        };
        let active = &log.active;
        let too_big = active.meta.len + batch.bytes.len() as u64 > self.config.max_segment_bytes;
        let too_old = self
            .config
            .max_segment_age
            .is_some_and(|age| active.opened.elapsed() >= age);
        if active.meta.has_frames() && (too_big || too_old) {
            self.rotate_locked(&mut log, first)
                .map_err(|(path, e)| fail(FailStage::Rotate, &path, e))?;
        }
        let active = &mut log.active;
        if let Err(e) = active.file.write_all(&batch.bytes) {
            return Err(fail(FailStage::Write, &active.meta.path, e));
        }
        if let Err(e) = active.file.sync_data() {
            return Err(fail(FailStage::Sync, &active.meta.path, e));
        }
        active.meta.len += batch.bytes.len() as u64;
        for (lsn, tenant) in &batch.frames {
            active.meta.record(*lsn, tenant);
        }
        Ok(())
    }

    /// Seals the active segment and starts a new one whose first frame will be `base`.
    /// Everything in the active segment is already synced (each commit syncs before it
    /// releases the log lock).
    fn rotate_locked(
        &self,
        log: &mut LogState,
        base: Lsn,
    ) -> Result<(), (PathBuf, std::io::Error)> {
        let (meta, file) = create_segment(&*self.io, &self.segment_dir, base)?;
        let old = mem::replace(
            &mut log.active,
            Active {
                meta,
                file,
                opened: Instant::now(),
            },
        );
        log.sealed.push(old.meta);
        let segments = log.segment_count();
        let mut state = lock(&self.commit);
        state.rotations += 1;
        state.segments = segments;
        drop(state);
        metrics::counter!(m::ROTATIONS).increment(1);
        metrics::gauge!(m::SEGMENTS).set(segments as f64);
        Ok(())
    }

    /// Seals the active segment now (e.g. for a barrier cut on rotation). Returns `false` if
    /// the active segment holds no frame (nothing to seal).
    ///
    /// A failed rotation makes the WAL read-only, like a failed sync.
    ///
    /// # Errors
    /// [`SegmentError::Poisoned`] if the WAL is already read-only,
    /// [`SegmentError::RotateFailed`] if this rotation failed.
    pub fn rotate(&self) -> Result<bool, SegmentError> {
        let mut log = lock(&self.log);
        if let Some(failure) = &lock(&self.commit).failure {
            return Err(SegmentError::Poisoned(failure.clone()));
        }
        if !log.active.meta.has_frames() {
            return Ok(false);
        }
        // Under the log lock every written frame is in the active segment's index, and queued
        // frames all carry higher lsns: the next frame written is `last + 1`.
        let base = Lsn(log.active.meta.last.0 + 1);
        match self.rotate_locked(&mut log, base) {
            Ok(()) => Ok(true),
            Err((segment, source)) => {
                let failure = WalFailure {
                    stage: FailStage::Rotate,
                    segment,
                    batch: None,
                    source: StdArc::new(source),
                };
                let mut state = lock(&self.commit);
                state.failure.get_or_insert_with(|| failure.clone());
                drop(state);
                metrics::gauge!(m::POISONED).set(1.0);
                Err(SegmentError::RotateFailed(failure))
            }
        }
    }

    /// Deletes every sealed segment whose frames all belong to tenants that have passed them:
    /// for each tenant with frames in it, its highest lsn there is `<= min(X_t, S_t)`. The
    /// active segment is never deleted. Deletion is deferred while a replay is reading.
    ///
    /// # Errors
    /// [`SegmentError::Io`] if a removal or the directory sync failed; segments removed before
    /// the failure stay removed.
    pub fn truncate(&self) -> Result<TruncateReport, SegmentError> {
        // Copy the horizons first: marks only advance, so a stale copy is conservative.
        let horizons: HashMap<TenantId, Lsn> = lock(&self.marks)
            .iter()
            .map(|(t, mk)| (t.clone(), mk.frontier.min(mk.snapshot)))
            .collect();
        let mut log = lock(&self.log);
        let mut report = TruncateReport::default();
        if log.replays_live > 0 {
            report.deferred = true;
            report.remaining = log.segment_count();
            return Ok(report);
        }
        let passed = |meta: &SegmentMeta| {
            meta.tenants
                .iter()
                .all(|(t, &max)| horizons.get(t).is_some_and(|&h| max <= h))
        };
        let mut result = Ok(());
        let mut kept = Vec::with_capacity(log.sealed.len());
        for meta in mem::take(&mut log.sealed) {
            if result.is_ok() && passed(&meta) {
                match self.io.remove_file(&meta.path) {
                    Ok(()) => {
                        report.bytes += meta.len;
                        report.deleted.push(meta.path);
                        continue;
                    }
                    Err(source) => {
                        result = Err(SegmentError::Io {
                            op: "removing",
                            path: meta.path.clone(),
                            source,
                        });
                    }
                }
            }
            kept.push(meta);
        }
        log.sealed = kept;
        report.remaining = log.segment_count();
        lock(&self.commit).segments = report.remaining;
        drop(log);
        if !report.deleted.is_empty() {
            metrics::counter!(m::SEGMENTS_DELETED).increment(report.deleted.len() as u64);
            metrics::gauge!(m::SEGMENTS).set(report.remaining as f64);
            // A removal that is lost in a crash only brings back frames every tenant passed.
            self.io
                .sync_dir(&self.segment_dir)
                .map_err(|source| SegmentError::Io {
                    op: "syncing",
                    path: self.segment_dir.clone(),
                    source,
                })?;
        }
        result.map(|()| report)
    }

    /// Persists frontiers (and snapshots taken at the same positions) for several tenants.
    ///
    /// Per tenant: the frontier only moves up (a request at or below the current value is
    /// ignored and reported [`FrontierOutcome::Unchanged`]) and never reaches a hold (it is
    /// clamped to one below the lowest hold). A snapshot is installed as `S_t = frontier` only
    /// if that is above the current `S_t` and not above the frontier the stamp leaves.
    ///
    /// Durability: every changed marks file is written to a temporary file and
    /// `fdatasync`ed, renamed over the old one, and the directory is fsynced; then the same for
    /// the snapshot files. So on disk `S_t <= X_t` at every instant. In-memory marks change
    /// only once their files are durable.
    ///
    /// # Errors
    /// [`MarkError::BeyondDurable`] / [`MarkError::DuplicateTenant`] before anything is
    /// written; [`MarkError::Io`] if persisting failed (tenants whose files were made durable
    /// before the failure keep their new marks).
    pub fn stamp(&self, stamps: &[Stamp<'_>]) -> Result<Vec<StampOutcome>, MarkError> {
        let mut marks = lock(&self.marks);
        let durable = lock(&self.commit).durable;
        let mut seen = std::collections::HashSet::new();
        for s in stamps {
            if s.frontier > durable {
                return Err(MarkError::BeyondDurable {
                    tenant: s.tenant.clone(),
                    requested: s.frontier,
                    durable,
                });
            }
            if !seen.insert(s.tenant.as_str()) {
                return Err(MarkError::DuplicateTenant {
                    tenant: s.tenant.clone(),
                });
            }
        }

        let mut outcomes = Vec::with_capacity(stamps.len());
        let mut frontier_writes = Vec::new();
        let mut snapshot_writes = Vec::new();
        for s in stamps {
            let current = marks.get(s.tenant).copied().unwrap_or_default();
            let target = current.cap().map_or(s.frontier, |cap| s.frontier.min(cap));
            let new_frontier = current.frontier.max(target);
            let frontier = match current.hold {
                Some(hold) if s.frontier >= hold => FrontierOutcome::Held {
                    from: current.frontier,
                    to: new_frontier,
                    requested: s.frontier,
                    hold,
                },
                _ if target > current.frontier => FrontierOutcome::Advanced {
                    from: current.frontier,
                    to: target,
                },
                _ => FrontierOutcome::Unchanged {
                    current: current.frontier,
                },
            };
            if new_frontier > current.frontier {
                frontier_writes.push((s.tenant, new_frontier));
            }
            let snapshot = match s.snapshot {
                None => SnapshotOutcome::NotGiven,
                Some(_) if s.frontier <= current.snapshot => SnapshotOutcome::Stale {
                    current: current.snapshot,
                },
                Some(_) if s.frontier > new_frontier => SnapshotOutcome::AheadOfFrontier {
                    frontier: new_frontier,
                },
                Some(state) => {
                    snapshot_writes.push((s.tenant, s.frontier, state));
                    SnapshotOutcome::Installed { lsn: s.frontier }
                }
            };
            outcomes.push(StampOutcome {
                tenant: s.tenant.clone(),
                frontier,
                snapshot,
            });
        }

        let io = &*self.io;
        let dir = &self.tenant_dir;
        // Frontiers first, made durable, then snapshots: on disk S_t <= X_t at every instant.
        let mut renames = Vec::with_capacity(frontier_writes.len());
        for &(tenant, lsn) in &frontier_writes {
            let path = marks::marks_path(dir, tenant);
            let tmp = marks::write_tmp(io, &path, &crate::format::encode_marks(tenant, lsn))?;
            renames.push((tmp, path));
        }
        self.commit_renames(&renames)?;
        for &(tenant, lsn) in &frontier_writes {
            marks.entry(tenant.clone()).or_default().frontier = lsn;
        }
        let mut renames = Vec::with_capacity(snapshot_writes.len());
        for &(tenant, lsn, state) in &snapshot_writes {
            let path = marks::snapshot_path(dir, tenant);
            let bytes = crate::format::encode_snapshot(tenant, lsn, state);
            let tmp = marks::write_tmp(io, &path, &bytes)?;
            renames.push((tmp, path));
        }
        self.commit_renames(&renames)?;
        for &(tenant, lsn, _) in &snapshot_writes {
            marks.entry(tenant.clone()).or_default().snapshot = lsn;
        }
        drop(marks);

        if !frontier_writes.is_empty() {
            let mut state = lock(&self.commit);
            let mut lags = Vec::with_capacity(frontier_writes.len());
            for &(tenant, lsn) in &frontier_writes {
                let p = progress_of(&mut state.progress, tenant);
                p.frontier = lsn;
                lags.push((tenant, p.lag()));
            }
            drop(state);
            for (tenant, lag) in lags {
                metrics::gauge!(m::TENANT_FRONTIER_LAG, &tenant_label(tenant)).set(lag as f64);
            }
        }
        Ok(outcomes)
    }

    /// Renames each temporary file over its target, then fsyncs the tenant directory.
    fn commit_renames(&self, renames: &[(PathBuf, PathBuf)]) -> Result<(), MarkError> {
        if renames.is_empty() {
            return Ok(());
        }
        for (tmp, path) in renames {
            self.io.rename(tmp, path).map_err(|source| MarkError::Io {
                op: "renaming into",
                path: path.clone(),
                source,
            })?;
        }
        self.io
            .sync_dir(&self.tenant_dir)
            .map_err(|source| MarkError::Io {
                op: "syncing",
                path: self.tenant_dir.clone(),
                source,
            })
    }

    /// Stamps one tenant's frontier without a snapshot (see [`Wal::stamp`]).
    ///
    /// # Errors
    /// As [`Wal::stamp`].
    pub fn stamp_frontier(
        &self,
        tenant: &TenantId,
        frontier: Lsn,
    ) -> Result<FrontierOutcome, MarkError> {
        let mut out = self.stamp(&[Stamp {
            tenant,
            frontier,
            snapshot: None,
        }])?;
        Ok(out.remove(0).frontier)
    }

    /// Keeps `tenant`'s frontier below `frame` until the WAL is reopened: no later stamp can
    /// move it to `frame` or past it. Used when part of a frame could not be mined (a miner
    /// panic): the unmined suffix exists only in the WAL, and a restart re-mines the frame.
    /// Holds are in memory only and cleared by reopening; several holds keep the lowest.
    pub fn hold(&self, tenant: &TenantId, frame: Lsn) -> HoldOutcome {
        let mut marks = lock(&self.marks);
        let entry = marks.entry(tenant.clone()).or_default();
        if entry.frontier >= frame {
            return HoldOutcome::AlreadyPast {
                frontier: entry.frontier,
            };
        }
        let held = entry.hold.map_or(frame, |h| h.min(frame));
        entry.hold = Some(held);
        drop(marks);
        metrics::gauge!(m::TENANT_HOLD, &tenant_label(tenant)).set(held.0 as f64);
        HoldOutcome::Held { frame: held }
    }

    /// `tenant`'s marks (all zero and no hold for a tenant the WAL has never seen stamped).
    pub fn marks(&self, tenant: &TenantId) -> Marks {
        lock(&self.marks).get(tenant).copied().unwrap_or_default()
    }

    /// Every tenant with marks or a hold.
    pub fn all_marks(&self) -> Vec<(TenantId, Marks)> {
        let mut all: Vec<_> = lock(&self.marks)
            .iter()
            .map(|(t, mk)| (t.clone(), *mk))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    pub(crate) fn marks_snapshot(&self) -> HashMap<TenantId, Marks> {
        lock(&self.marks).clone()
    }

    /// Reads `tenant`'s installed snapshot. `Ok(None)` if it has none (never installed, or
    /// discarded on open as corrupt or ahead of the frontier): the tenant replays in full.
    ///
    /// # Errors
    /// [`MarkError::Io`] if the file cannot be read, [`MarkError::CorruptSnapshot`] if it no
    /// longer verifies.
    pub fn read_snapshot(&self, tenant: &TenantId) -> Result<Option<Snapshot>, MarkError> {
        let marks = lock(&self.marks);
        let lsn = marks.get(tenant).map_or(Lsn::ZERO, |mk| mk.snapshot);
        if lsn == Lsn::ZERO {
            return Ok(None);
        }
        let state = marks::read_snapshot(&*self.io, &self.tenant_dir, tenant, lsn)?;
        Ok(Some(Snapshot { lsn, state }))
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

impl Wal {
    /// Wakes every waiter (after a failure, all of them must see it).
    fn wake_all(&self) {
        for condvar in &self.committed {
            condvar.notify_all();
        }
    }
}

fn count_error(kind: &'static str) {
    metrics::counter!(m::APPEND_ERRORS, m::LABEL_ERROR_TYPE => kind).increment(1);
}

/// Ends a commit that unwound: records a failure so waiters do not wait forever and no later
/// append is acknowledged over a segment in an unknown state.
struct LeadGuard<'a> {
    wal: &'a Wal,
    batch: Option<(Lsn, Lsn)>,
    done: bool,
}

impl Drop for LeadGuard<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // Lock order: log before commit.
        let segment = lock(&self.wal.log).active.meta.path.clone();
        let mut state = lock(&self.wal.commit);
        state.failure.get_or_insert_with(|| WalFailure {
            stage: FailStage::Panic,
            segment,
            batch: self.batch,
            source: StdArc::new(std::io::Error::other("the commit leader panicked")),
        });
        state.leader_active = false;
        drop(state);
        self.wal.wake_all();
    }
}
