//! Recovery's side of exactly-once (RFC 0058): units an intent names are rebuilt from the
//! replayed records, landed ones dropped.

use super::*;

impl SharedParquetSink {
    /// Recovery: the replayed records `intent` names rebuild its unit, which is then
    /// republished under the intent's key (RFC 0058 §Recovery). Call before replay mines
    /// anything. A later intent naming the same record takes it (the earlier one was never put:
    /// a unit is put only once its intent is durable and the partition marked sealed).
    pub fn expect_sealed(&self, intent: &Intent) {
        let mut st = lock(&self.inner.state);
        let unit = st.recovering.units.len();
        st.recovering.units.push(Rebuilding {
            path: intent.path.clone(),
            missing: intent.records(),
            records: Vec::new(),
        });
        for r in &intent.ranges {
            st.recovering
                .expected
                .entry(r.lsn)
                .or_default()
                .push((r.first, r.last, unit));
        }
        drop(st);
        self.inner.routing.store(true, Ordering::Release);
    }

    /// Recovery: the replayed records `intent` names are in the store already (its unit
    /// landed): drop them when they arrive.
    pub fn drop_landed(&self, intent: &Intent) {
        let mut st = lock(&self.inner.state);
        for r in &intent.ranges {
            st.recovering
                .landed
                .entry(r.lsn)
                .or_default()
                .push((r.first, r.last));
        }
        drop(st);
        self.inner.routing.store(true, Ordering::Release);
    }

    /// Recovery is over: forget its routing. Units still incomplete (a frame whose mining
    /// panicked) stay counted in the floor, so no frontier passes their records; the next
    /// start rebuilds them.
    pub fn recovery_done(&self) {
        self.inner.routing.store(false, Ordering::Release);
        let mut st = lock(&self.inner.state);
        st.recovering.expected.clear();
        st.recovering.landed.clear();
    }

    /// Sealed units waiting for a (re)publish.
    pub fn sealed_units(&self) -> usize {
        lock(&self.inner.state).sealed.len()
    }

    /// Units recovery is still rebuilding (some of their records not replayed yet).
    pub fn rebuilding_units(&self) -> usize {
        lock(&self.inner.state)
            .recovering
            .units
            .iter()
            .filter(|u| u.missing > 0)
            .count()
    }
}
