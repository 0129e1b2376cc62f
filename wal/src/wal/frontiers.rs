//! Marks: stamping frontiers and snapshots, holds, and reading them back.

use super::*;

impl Wal {
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
}
