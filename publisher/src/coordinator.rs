//! `PublishCoordinator`: the drains, `write_ordered`, and the handle on the publisher thread.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use ourios_barrier::{Barrier, PublishGuard};
use ourios_recoverable::{Drained, ItemState, RecoverableBatch, RequeueTarget, Settlement};
use ourios_sinks::{
    AuditGroup, AuditOutcome, Partition, SharedParquetAuditSink, SharedParquetSink, Tenant,
    TenantAudit,
};

use crate::metrics;
use crate::publisher::{PublisherConfig, PublisherSlot};

/// The `Drained` of a sweep or a cut: audit groups, record partitions, and the publish guard
/// that makes `quiesce_publishes` wait for it (RFC 0052 §3.1, RFC 0054 §9.5).
pub type SweepDrained = Drained<AuditGroup, Partition, PublishGuard>;

/// What `write_ordered` decided for one tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TenantVerdict {
    /// Everything of the tenant in the drain is durable: audit events written, record
    /// partitions put (or quarantined with their events held for the next write).
    Durable,
    /// Some of it was requeued (transient audit or store failure, or audit-before-records
    /// refusal): the next drain retries it.
    Requeued,
    /// A permanent audit failure: the tenant's records were requeued and set aside; the tenant
    /// is terminal until a restart (RFC 0056).
    Terminal {
        /// The first failure, for the operator.
        reason: String,
    },
}

/// The result of one `write_ordered`: per tenant, whether everything drained is now durable.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteVerdict {
    /// Every tenant that had audit groups or record partitions in the drain.
    pub tenants: BTreeMap<Tenant, TenantVerdict>,
    /// Partitions written.
    pub published_partitions: usize,
    /// Records written.
    pub published_records: usize,
}

impl WriteVerdict {
    /// True when `tenant` had nothing in the drain or everything of it is durable.
    #[must_use]
    pub fn is_durable(&self, tenant: &Tenant) -> bool {
        matches!(
            self.tenants.get(tenant),
            None | Some(TenantVerdict::Durable)
        )
    }

    /// True when every tenant in the drain is durable.
    #[must_use]
    pub fn all_durable(&self) -> bool {
        self.tenants.values().all(|v| *v == TenantVerdict::Durable)
    }

    fn worsen(&mut self, tenant: &Tenant, verdict: TenantVerdict) {
        let rank = |v: &TenantVerdict| match v {
            TenantVerdict::Durable => 0,
            TenantVerdict::Requeued => 1,
            TenantVerdict::Terminal { .. } => 2,
        };
        match self.tenants.get(tenant) {
            Some(prev) if rank(prev) >= rank(&verdict) => {}
            _ => {
                self.tenants.insert(tenant.clone(), verdict);
            }
        }
    }
}

/// Holds the two shared sinks and the barrier, and owns the publisher thread's slot.
///
/// Cloning is cheap (an `Arc`); every clone drives the same sinks and the same publisher.
#[derive(Debug, Clone)]
pub struct PublishCoordinator {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) records: SharedParquetSink,
    pub(crate) audit: SharedParquetAuditSink,
    pub(crate) barrier: Arc<Barrier>,
    pub(crate) runtime: tokio::runtime::Handle,
    pub(crate) slot: PublisherSlot,
    pub(crate) failures: crate::FailureLog,
}

impl PublishCoordinator {
    /// A coordinator over `records` (which orders against its own audit sink) and `barrier`.
    /// Store I/O of the publisher thread runs on `runtime`. The publisher thread is started.
    pub fn new(
        records: SharedParquetSink,
        barrier: Arc<Barrier>,
        runtime: tokio::runtime::Handle,
        config: PublisherConfig,
    ) -> Self {
        let audit = records.audit().clone();
        let coordinator = Self {
            inner: Arc::new(Inner {
                records,
                audit,
                barrier,
                runtime,
                slot: PublisherSlot::new(config),
                failures: crate::FailureLog::default(),
            }),
        };
        coordinator.ensure_publisher();
        coordinator
    }

    /// The record sink.
    pub fn records(&self) -> &SharedParquetSink {
        &self.inner.records
    }

    /// The audit sink.
    pub fn audit(&self) -> &SharedParquetAuditSink {
        &self.inner.audit
    }

    /// The failed publishes not yet taken by a cut, with their tenants (RFC 0059.15).
    pub fn failures(&self) -> &crate::FailureLog {
        &self.inner.failures
    }

    fn empty_drained(&self) -> SweepDrained {
        let audit: Arc<dyn RequeueTarget<AuditGroup>> = Arc::new(self.inner.audit.clone());
        let records: Arc<dyn RequeueTarget<Partition>> = Arc::new(self.inner.records.clone());
        Drained::new(self.inner.barrier.enter_publish(), audit, records)
    }

    /// The age sweep's drain: builds the empty `Drained` (with its publish guard) first, then
    /// moves the audit buffer in, then each partition older than `age` as it leaves the record
    /// buffer. Terminal tenants are skipped by both takes.
    pub fn drain_aged(&self, age: Duration) -> SweepDrained {
        let mut drained = self.empty_drained();
        drained.put_audit(self.inner.audit.take_groups());
        self.inner.records.drain_aged(age, drained.record_slot());
        drained
    }

    /// The cut's drain: like [`drain_aged`](Self::drain_aged) but takes every partition.
    pub fn drain_all(&self) -> SweepDrained {
        let mut drained = self.empty_drained();
        drained.put_audit(self.inner.audit.take_groups());
        self.inner.records.drain_all(drained.record_slot());
        drained
    }

    /// Writes a drain in order: the audit events first (`write_owned`), then, per tenant, the
    /// record partitions of tenants whose audit is durable (`publish_owned`); the partitions of
    /// tenants whose audit was retained are requeued, and those of tenants whose audit failed
    /// permanently are requeued and set aside (RFC 0056: the tenant becomes terminal).
    ///
    /// Everything taken out of `drained` is held in a `RecoverableBatch` until settled, so a
    /// panic anywhere in here leaves what is unsettled to be requeued by those batches and by
    /// `drained`'s own `Drop` (RFC 0054 §9.5). `drained` may be dropped or written again after.
    pub async fn write_ordered(&self, drained: &mut SweepDrained) -> WriteVerdict {
        let mut verdict = WriteVerdict::default();
        for group in drained.audit() {
            verdict.worsen(&group.tenant, TenantVerdict::Durable);
        }
        for part in drained.records() {
            verdict.worsen(&part.key().tenant, TenantVerdict::Durable);
        }

        // Test hook (compiled out unless `failpoints`): the point before the audit write.
        fail::fail_point!("publisher::write_ordered::before_audit");
        // 1. Audit first. The batch lives until write_owned returns; a durable group is settled
        //    and never requeued again, a transient one was requeued ahead inside write_owned.
        let outcome = match drained.take_audit() {
            Some(mut batch) => {
                let outcome = self.inner.audit.write_owned(&mut batch).await;
                // write_owned settles every group before it returns: nothing is left to requeue.
                let _ = batch.finish();
                outcome
            }
            None => AuditOutcome::default(),
        };
        let retained = self.apply_audit_outcome(&outcome, &mut verdict);

        // Test hook: the point between the two consuming calls.
        fail::fail_point!("publisher::write_ordered::between");
        // 2. Refuse the record publish of retained and terminal tenants (a permanent audit
        //    failure made its tenant terminal just now): requeue, taken out of `drained` by the
        //    requeue arm itself, so its Drop cannot requeue them twice. Tenant-wide: a
        //    partition whose own events are durable waits too while its tenant's newer events
        //    are retained.
        let records = &self.inner.records;
        drained.requeue_records_where(|p| {
            retained.contains(&p.key().tenant) || records.is_terminal(&p.key().tenant)
        });
        for tenant in &retained {
            verdict.worsen(tenant, TenantVerdict::Requeued);
        }

        // 3. The records of everyone else. `publish_owned` still checks each partition against
        //    `is_durable_through` (events of earlier drains may still be in flight: I3).
        let mut batch = drained.take_records_where(|_| true);
        let tenants: Vec<(usize, Tenant)> = (0..batch.len())
            .filter_map(|i| batch.get(i).map(|p| (i, p.key().tenant.clone())))
            .collect();
        let report = records.publish_owned(&mut batch).await;
        // A permanent record-put failure (a bucket policy denying the tenant's prefix, an
        // encoder that rejects a partition that no single record is to blame for) takes the
        // RFC 0056 terminal path too: retrying cannot help until an operator repairs the cause,
        // and a tenant that kept failing would keep every cut's verdict, and so every tenant's
        // frontier, from advancing. Its partitions were requeued; set aside, they stay buffered
        // and in the WAL until a restart.
        for failure in &report.permanent {
            self.make_terminal(&failure.key.tenant, &failure.error, &mut verdict);
        }
        verdict.published_partitions += report.durable;
        verdict.published_records += report.durable_records;
        for (i, tenant) in &tenants {
            match batch.state(*i) {
                ItemState::Settled(Settlement::Durable | Settlement::Dropped) => {}
                _ => verdict.worsen(tenant, TenantVerdict::Requeued),
            }
        }
        // Quarantined records are held until their `record_quarantined` events are durable; a
        // tenant with held records is not durable in this drain.
        for tenant in tenants.iter().map(|(_, t)| t).collect::<BTreeSet<_>>() {
            if !records.quarantine_held_ids(tenant).is_empty() {
                verdict.worsen(tenant, TenantVerdict::Requeued);
            }
        }
        // publish_owned settles every partition before it returns.
        let _ = batch.finish();
        verdict
    }

    /// The RFC 0056 terminal path for `tenant` (a permanent audit or record write failure):
    /// set it aside, count it the first time, and record the verdict with the reason.
    fn make_terminal(&self, tenant: &Tenant, reason: &str, verdict: &mut WriteVerdict) {
        if self.inner.records.set_aside(tenant) {
            ::metrics::counter!(metrics::TENANTS_SET_ASIDE).increment(1);
        }
        verdict.worsen(
            tenant,
            TenantVerdict::Terminal {
                reason: reason.to_owned(),
            },
        );
    }

    /// Applies a `write_owned` outcome: sets aside permanently failed tenants (terminal) and
    /// returns the tenants whose events were retained (a transient failure).
    pub(crate) fn apply_audit_outcome(
        &self,
        outcome: &AuditOutcome,
        verdict: &mut WriteVerdict,
    ) -> BTreeSet<Tenant> {
        let mut retained = BTreeSet::new();
        for (tenant, result) in &outcome.tenants {
            match result {
                TenantAudit::Durable => {}
                TenantAudit::Retained => {
                    ::metrics::counter!(ourios_sinks::metrics::FLUSH_ERRORS, "error.type" => "audit_retained")
                        .increment(1);
                    retained.insert(tenant.clone());
                }
                TenantAudit::PermanentlyFailed { reason } => {
                    self.make_terminal(tenant, reason, verdict);
                }
            }
        }
        retained
    }

    /// Writes whatever the audit buffer holds now (all non-terminal tenants), applying the
    /// outcome like `write_ordered` does. The publisher thread calls this before publishing a
    /// partition whose audit events are not durable yet.
    pub(crate) async fn flush_audit(&self) -> WriteVerdict {
        let mut verdict = WriteVerdict::default();
        let groups = self.inner.audit.take_groups();
        if groups.is_empty() {
            return verdict;
        }
        let target: Arc<dyn RequeueTarget<AuditGroup>> = Arc::new(self.inner.audit.clone());
        let mut batch = RecoverableBatch::new(groups, target);
        let outcome = self.inner.audit.write_owned(&mut batch).await;
        let _ = batch.finish();
        self.apply_audit_outcome(&outcome, &mut verdict);
        verdict
    }
}
