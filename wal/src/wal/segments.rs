//! Segments: creating one, rotation, and truncation of the sealed segments every tenant's
//! frontier has passed.

use super::*;

/// How much of a retired segment one cut removes ([`WalIo::remove_gradually`]): at 1 MiB a
/// concurrent `fdatasync` waited 1-2 ms on ext4, at 8 MiB 5-6 ms, for the whole 64 MiB
/// segment at once 12-20 ms.
const REMOVAL_STEP: u64 = 1 << 20;

/// Creates a segment: file, header, `fdatasync`, directory fsync — all before any frame in it
/// can be acknowledged.
pub(super) fn create_segment(
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

impl Wal {
    /// Seals the active segment and starts a new one whose first frame will be `base`.
    /// Everything in the active segment is already synced (each commit syncs before it
    /// releases the log lock).
    pub(super) fn rotate_locked(
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
    /// The segments are chosen under the log lock and removed after it is released: removing
    /// a full segment took 25-40 ms on ext4, and every commit waits for the log lock. A replay
    /// that begins meanwhile does not see them (it needs no frame they hold). Each is renamed
    /// to its retired name, the renames are made durable, and only then is it cut down and
    /// removed a step at a time ([`WalIo::remove_gradually`], so a concurrent commit's sync
    /// does not wait for all its blocks to be freed at once); a crash midway leaves a retired
    /// file, which opening removes, never a shortened segment.
    ///
    /// # Errors
    /// [`SegmentError::Io`] if a rename, the directory sync or a removal failed. A segment
    /// whose rename failed stays listed, with those not yet tried; one renamed but not removed
    /// is removed by the next truncation (or the next open).
    pub fn truncate(&self) -> Result<TruncateReport, SegmentError> {
        // Copy the horizons first: marks only advance, so a stale copy is conservative.
        let horizons: HashMap<TenantId, Lsn> = lock(&self.marks)
            .iter()
            .map(|(t, mk)| (t.clone(), mk.frontier.min(mk.snapshot)))
            .collect();
        let passed = |meta: &SegmentMeta| {
            meta.tenants
                .iter()
                .all(|(t, &max)| horizons.get(t).is_some_and(|&h| max <= h))
        };
        let mut report = TruncateReport::default();
        let mut log = lock(&self.log);
        if log.replays_live > 0 {
            report.deferred = true;
            report.remaining = log.segment_count();
            return Ok(report);
        }
        let (doomed, kept): (Vec<_>, Vec<_>) = mem::take(&mut log.sealed)
            .into_iter()
            .partition(|meta| passed(meta));
        log.sealed = kept;
        let mut retired = mem::take(&mut log.retired);
        drop(log);

        let io_err = |op, path: &Path, source| SegmentError::Io {
            op,
            path: path.to_path_buf(),
            source,
        };
        let mut result = Ok(());
        let mut doomed = doomed.into_iter();
        for meta in doomed.by_ref() {
            let to = segment::retired_path(&meta.path);
            match self.io.rename(&meta.path, &to) {
                Ok(()) => {
                    report.bytes += meta.len;
                    report.deleted.push(meta.path);
                    retired.push(to);
                }
                Err(source) => {
                    result = Err(io_err("retiring", &meta.path, source));
                    // Listed again, in order: the failed one and those not tried.
                    let mut log = lock(&self.log);
                    log.sealed.extend([meta].into_iter().chain(doomed.by_ref()));
                    log.sealed.sort_by_key(|meta| meta.base);
                    break;
                }
            }
        }
        if !retired.is_empty() {
            // Every rename reaches the disk before any cut: a crash must not leave a segment
            // shortened under its own name.
            match self.io.sync_dir(&self.segment_dir) {
                Ok(()) => {
                    let mut left = Vec::new();
                    for path in retired {
                        if let Err(source) = self.io.remove_gradually(&path, REMOVAL_STEP) {
                            result = result.and(Err(io_err("removing", &path, source)));
                            left.push(path);
                        }
                    }
                    retired = left;
                }
                Err(source) => {
                    result = result.and(Err(io_err("syncing", &self.segment_dir, source)));
                }
            }
            // A removal lost in a crash leaves a retired file, which opening removes.
        }
        let mut log = lock(&self.log);
        log.retired.extend(retired);
        report.remaining = log.segment_count();
        drop(log);
        lock(&self.commit).segments = report.remaining;
        if !report.deleted.is_empty() {
            metrics::counter!(m::SEGMENTS_DELETED).increment(report.deleted.len() as u64);
            metrics::gauge!(m::SEGMENTS).set(report.remaining as f64);
        }
        result.map(|()| report)
    }
}
