//! Segments: creating one, rotation, and truncation of the sealed segments every tenant's
//! frontier has passed.

use super::*;

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
}
