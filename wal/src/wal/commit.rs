//! Appends and the group commit: one waiter leads, writes and syncs every queued frame for
//! all of them; a failure (or a leader's panic) makes the WAL read-only.

use super::*;

impl Batch {
    fn range(&self) -> (Lsn, Lsn) {
        (self.frames[0].0, self.frames[self.frames.len() - 1].0)
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.frames.clear();
    }
}

impl Wal {
    /// Appends one frame for `tenant` and returns its lsn once a `fdatasync` covering it has
    /// succeeded. Concurrent callers share syncs (group commit): the first waiter without a
    /// commit in progress writes and syncs every queued frame for all of them. The same as
    /// [`Wal::submit`] then [`Wal::wait_durable`].
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
        let lsn = self.submit(tenant, payload)?;
        self.wait_durable(lsn)?;
        Ok(lsn)
    }

    /// The first half of [`Wal::append`]: queues one frame for `tenant` in the next commit and
    /// returns its lsn at once, without waiting for it to be durable. Frames get lsns in the
    /// order of `submit` calls, so a caller that serialises its submits (the node does, per
    /// tenant) knows its frames' order before any of them is durable.
    ///
    /// The frame is not acknowledged yet: call [`Wal::wait_durable`] with the lsn before
    /// treating it as written. A frame nobody waits for is still written by the next commit
    /// any appender leads, but nothing leads one on its behalf.
    ///
    /// # Errors
    /// [`AppendError::FrameTooLarge`] (nothing queued) or [`AppendError::Poisoned`].
    pub fn submit(&self, tenant: &TenantId, payload: &[u8]) -> Result<Lsn, AppendError> {
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
        Ok(lsn)
    }

    /// The second half of [`Wal::append`]: returns once a `fdatasync` covering the frame
    /// [`Wal::submit`] gave `lsn` has succeeded, leading a commit if none is in progress.
    ///
    /// # Errors
    /// [`AppendError::Failed`] if the failure covered this frame, [`AppendError::Poisoned`] if
    /// an earlier one made the WAL read-only; either way the frame is not acknowledged.
    pub fn wait_durable(&self, lsn: Lsn) -> Result<(), AppendError> {
        let mut state = lock(&self.commit);
        loop {
            if let Some(outcome) = settled(&state, lsn) {
                return outcome;
            }
            if let Some(batch) = take_lead(&mut state) {
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
    pub(super) fn lead(&self, mut batch: Batch) {
        let (first, last) = batch.range();
        let mut guard = LeadGuard {
            wal: self,
            batch: Some((first, last)),
            done: false,
        };
        let started = Instant::now();
        let result = self.write_batch(&batch);
        let took = started.elapsed();
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
        let wakers = settled_wakers(&mut state);
        // Frames queued meanwhile that only async waiters wait for: the commit thread leads
        // them (a sync waiter among them would lead them itself).
        let wake_committer = state.committer.idle && !state.batch.frames.is_empty();
        drop(state);
        guard.done = true;
        if ok {
            // Every waiter of this batch returns; one waiter of the next batch leads it.
            self.committed[this].notify_all();
            self.committed[1 - this].notify_one();
        } else {
            self.wake_all();
        }
        if wake_committer {
            self.work.notify_one();
        }
        wakers.into_iter().for_each(Waker::wake);

        if ok {
            metrics::counter!(m::APPENDS).increment(frames);
            metrics::counter!(m::SYNCS).increment(1);
            metrics::counter!(m::BYTES).increment(bytes);
            metrics::histogram!(m::SYNC_BATCH_FRAMES).record(frames as f64);
            metrics::histogram!(m::COMMIT_SECONDS).record(took.as_secs_f64());
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
}

impl Wal {
    /// Wakes every waiter (after a failure, all of them must see it).
    fn wake_all(&self) {
        for condvar in &self.committed {
            condvar.notify_all();
        }
        self.work.notify_all();
        let wakers = mem::take(&mut lock(&self.commit).wakers);
        wakers.into_iter().for_each(|(_, waker)| waker.wake());
    }
}

/// The outcome for the frame `lsn` if it is known: durable, or refused by a failure.
pub(super) fn settled(state: &CommitState, lsn: Lsn) -> Option<Result<(), AppendError>> {
    if state.durable >= lsn {
        return Some(Ok(()));
    }
    let failure = state.failure.as_ref()?;
    let covered = failure
        .batch
        .is_some_and(|(first, last)| first <= lsn && lsn <= last);
    Some(Err(if covered {
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
    }))
}

/// Takes the queued frames to lead their commit, if no commit is in progress and there are
/// any (and the WAL has not failed: its caller checked `settled` first or checks `failure`).
pub(super) fn take_lead(state: &mut CommitState) -> Option<Batch> {
    if state.leader_active || state.batch.frames.is_empty() || state.failure.is_some() {
        return None;
    }
    state.leader_active = true;
    state.taken += 1;
    let spare = mem::take(&mut state.spare);
    let batch = mem::replace(&mut state.batch, spare);
    state.taken_last = batch.range().1;
    Some(batch)
}

/// The async waiters whose frames are settled (durable, or refused by a failure), taken out
/// of the list to be woken once the lock is released.
fn settled_wakers(state: &mut CommitState) -> Vec<Waker> {
    if state.failure.is_some() {
        return mem::take(&mut state.wakers)
            .into_iter()
            .map(|(_, w)| w)
            .collect();
    }
    let durable = state.durable;
    let mut woken = Vec::new();
    let mut i = 0;
    while i < state.wakers.len() {
        if state.wakers[i].0 <= durable {
            woken.push(state.wakers.swap_remove(i).1);
        } else {
            i += 1;
        }
    }
    woken
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
