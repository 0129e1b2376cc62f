//! Which tenants' publishes failed, by the epoch each publish was tagged with: what lets a cut
//! scope its verdict per tenant (RFC 0059.15).
//!
//! The barrier's verdict says whether any publish tagged <= E failed; it does not say whose.
//! Every path that settles a publish with a not-ok outcome it can attribute records the tenants
//! here first, then settles. A cut takes the entries its verdict consumed and compares counts:
//! when every failure the verdict counted is attributed (no panic, nothing unrecorded), only the
//! named tenants are held back; otherwise the cut holds every tenant back, as before.

use std::collections::BTreeSet;
use std::sync::Mutex;

use ourios_recoverable::lock;
use ourios_sinks::Tenant;

/// The failures of settled publishes, by epoch.
#[derive(Debug, Default)]
pub struct FailureLog {
    entries: Mutex<Vec<(u32, BTreeSet<Tenant>)>>,
}

/// The failures a cut's verdict consumed: how many were recorded, and whose.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FailedScope {
    /// Failed publishes recorded with an epoch in the range taken.
    pub recorded: u64,
    /// Their tenants.
    pub tenants: BTreeSet<Tenant>,
    /// An entry named no tenant: the failures cannot be scoped.
    pub unattributed: bool,
}

impl FailureLog {
    /// Records that a publish tagged `epoch` failed for `tenants`. Call it before the publish's
    /// guard settles, so the cut whose quiesce waits for that guard finds the entry.
    pub fn record(&self, epoch: u32, tenants: impl IntoIterator<Item = Tenant>) {
        let tenants: BTreeSet<Tenant> = tenants.into_iter().collect();
        lock(&self.entries).push((epoch, tenants));
    }

    /// Takes every entry tagged `epoch` or lower.
    pub fn take_through(&self, epoch: u32) -> FailedScope {
        let mut entries = lock(&self.entries);
        let mut scope = FailedScope::default();
        entries.retain(|(e, tenants)| {
            if *e > epoch {
                return true;
            }
            scope.recorded += 1;
            scope.unattributed |= tenants.is_empty();
            scope.tenants.extend(tenants.iter().cloned());
            false
        });
        scope
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_through_takes_only_entries_at_or_below_the_epoch() {
        let log = FailureLog::default();
        log.record(3, [Tenant::new("a")]);
        log.record(5, [Tenant::new("b"), Tenant::new("c")]);
        log.record(4, [Tenant::new("a")]);
        let scope = log.take_through(4);
        assert_eq!(scope.recorded, 2);
        assert_eq!(scope.tenants, BTreeSet::from([Tenant::new("a")]));
        let rest = log.take_through(u32::MAX);
        assert_eq!(rest.recorded, 1);
        assert_eq!(
            rest.tenants,
            BTreeSet::from([Tenant::new("b"), Tenant::new("c")])
        );
        assert_eq!(log.take_through(u32::MAX), FailedScope::default());
        log.record(1, []);
        assert!(
            log.take_through(1).unattributed,
            "no tenant named: not scoped"
        );
    }
}
