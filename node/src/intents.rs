//! Publish intents in the WAL (RFC 0058): the node's [`Sealer`], and the horizon below which
//! intent frames may be truncated.
//!
//! Intents are frames of a reserved WAL tenant, [`INTENT_TENANT`], which no client may use.
//! Its frontier is the *intent horizon*: every intent frame at or below it names only records
//! at or below their own tenants' frontiers, so no recovery will replay them, and the segment
//! holding it may go. A cut moves it after stamping the record tenants.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use ourios_recoverable::lock;
use ourios_sinks::{Intent, Sealer};
use ourios_wal::{Lsn, TenantId, Wal};

/// The WAL tenant whose frames are publish intents. Refused as a client tenant.
pub const INTENT_TENANT: &str = "_ourios.intents";

/// The file in the data directory saying a release with publish intents has recovered it once:
/// from then on every record put was sealed first, so a replayed record no intent names was
/// never put. Without it, replay may republish what an earlier release put (RFC 0058 §Upgrade).
const INTENTS_MARKER: &str = "publish-intents";

/// Whether this data directory has been recovered by a release with publish intents.
pub(crate) fn recovered_with_intents(data_dir: &std::path::Path) -> bool {
    data_dir.join(INTENTS_MARKER).exists()
}

/// Records that it has (the file and its directory entry synced).
///
/// # Errors
/// The file cannot be written or made durable.
pub(crate) fn mark_recovered_with_intents(data_dir: &std::path::Path) -> std::io::Result<()> {
    let path = data_dir.join(INTENTS_MARKER);
    if path.exists() {
        return Ok(());
    }
    std::fs::write(
        &path,
        b"records are sealed before they are put (RFC 0058)\n",
    )?;
    std::fs::File::open(&path)?.sync_all()?;
    std::fs::File::open(data_dir)?.sync_all()
}

/// The [`TenantId`] of [`INTENT_TENANT`].
pub(crate) fn intent_tenant() -> TenantId {
    TenantId::new(INTENT_TENANT).unwrap_or_else(|_| unreachable!("a valid tenant id"))
}

/// Appends intents to the WAL and remembers those not yet passed.
#[derive(Debug)]
pub(crate) struct WalSealer {
    wal: Arc<Wal>,
    tenant: TenantId,
    live: Mutex<Live>,
}

/// The intents above the horizon and the appends in flight: what the horizon may pass.
#[derive(Debug, Default)]
struct Live {
    /// Intent lsn -> (its records' tenant, the highest frame lsn it names), for every intent
    /// above the horizon.
    intents: BTreeMap<u64, (String, u64)>,
    /// The newest intent appended or read by recovery.
    last: u64,
    /// Appends in progress, by a lower bound of the lsn each will get (the durable lsn when it
    /// began, plus one): the horizon stays below them, since an intent that is not remembered
    /// yet could otherwise be passed before anyone knows what it names.
    pending: BTreeMap<u64, usize>,
}

impl Live {
    /// An append whose lsn will be at least `bound` begins.
    fn begin(&mut self, bound: u64) {
        *self.pending.entry(bound).or_default() += 1;
    }

    /// The append that began at `bound` ended: with the intent's lsn, tenant and highest named
    /// frame if it is durable.
    fn end(&mut self, bound: u64, appended: Option<(u64, &str, u64)>) {
        if let Some(n) = self.pending.get_mut(&bound) {
            *n -= 1;
            if *n == 0 {
                self.pending.remove(&bound);
            }
        }
        if let Some((lsn, tenant, max_lsn)) = appended {
            self.remember(lsn, tenant, max_lsn);
        }
    }

    fn remember(&mut self, lsn: u64, tenant: &str, max_lsn: u64) {
        self.intents.insert(lsn, (tenant.to_owned(), max_lsn));
        self.last = self.last.max(lsn);
    }

    /// Forgets the intents whose records are all at or below their tenants' frontiers, and
    /// returns the highest lsn the horizon may take: below the oldest intent left and below
    /// every append in flight, else the newest intent.
    fn horizon(&mut self, frontier_of: impl Fn(&str) -> u64) -> u64 {
        self.intents
            .retain(|_, (tenant, max_lsn)| frontier_of(tenant) < *max_lsn);
        let horizon = self
            .intents
            .keys()
            .next()
            .map_or(self.last, |&oldest| oldest - 1);
        self.pending
            .keys()
            .next()
            .map_or(horizon, |&bound| horizon.min(bound - 1))
    }
}

impl WalSealer {
    pub(crate) fn new(wal: Arc<Wal>) -> Self {
        Self {
            wal,
            tenant: intent_tenant(),
            live: Mutex::new(Live::default()),
        }
    }

    fn live(&self) -> std::sync::MutexGuard<'_, Live> {
        lock(&self.live)
    }

    /// Recovery found `intent` at `lsn` above the horizon.
    pub(crate) fn remember(&self, lsn: Lsn, intent: &Intent) {
        self.live()
            .remember(lsn.0, intent.tenant.as_str(), intent.max_lsn());
    }

    /// The horizon the intent tenant's frontier may take now (see `Live::horizon`), forgetting
    /// the intents it passes. `None` when there is no intent at all.
    pub(crate) fn horizon(&self, frontier_of: impl Fn(&str) -> u64) -> Option<Lsn> {
        let horizon = self.live().horizon(frontier_of);
        (horizon > 0).then_some(Lsn(horizon))
    }

    /// Intents not passed yet.
    pub(crate) fn live_intents(&self) -> usize {
        self.live().intents.len()
    }
}

impl Sealer for WalSealer {
    fn wal_id(&self) -> [u8; 16] {
        self.wal.id().0
    }

    fn seal(&self, intent: &Intent) -> Result<(), String> {
        // Any lsn assigned from now on is above the durable one.
        let bound = self.wal.durable_lsn().0 + 1;
        self.live().begin(bound);
        // Group-committed with whatever else is being appended: durable when it returns.
        let appended = self
            .wal
            .append(&self.tenant, &intent.encode())
            .map_err(|e| format!("writing the publish intent: {e}"));
        let tenant = intent.tenant.as_str();
        self.live().end(
            bound,
            appended
                .as_ref()
                .ok()
                .map(|lsn| (lsn.0, tenant, intent.max_lsn())),
        );
        appended.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::Live;

    #[derive(Debug, Clone)]
    enum Op {
        /// An append begins (the WAL hands out the next lsn to it, later).
        Begin,
        /// The `i`-th append in flight (mod their number) ends, durable or not, naming frames
        /// up to `max` of tenant `t`.
        End {
            i: usize,
            durable: bool,
            t: u8,
            max: u64,
        },
        /// A tenant's frontier moves up by `by`.
        Stamp { t: u8, by: u64 },
        /// A cut takes the horizon.
        Horizon,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            Just(Op::Begin),
            (any::<usize>(), any::<bool>(), 0u8..3, 1u64..40)
                .prop_map(|(i, durable, t, max)| Op::End { i, durable, t, max }),
            (0u8..3, 0u64..10).prop_map(|(t, by)| Op::Stamp { t, by }),
            Just(Op::Horizon),
        ]
    }

    proptest! {
        /// The horizon model: the WAL hands out lsns in order, appends end in any order of
        /// their own, frontiers only move up. At every horizon taken, no intent at or below it
        /// names a record above its tenant's frontier, and no append still in flight can get
        /// an lsn at or below it (recovery would skip such an intent while its unit may need
        /// it). The horizon never moves down.
        ///
        /// Reasoned mutation (not run as a mutant): in `Live::horizon`, take `max` instead of `min`
        /// with the pending bound (or ignore `pending`): an intent whose append began before a
        /// horizon is taken and ends after it lands at or below that horizon.
        #[test]
        fn the_horizon_never_passes_a_live_or_pending_intent(ops in proptest::collection::vec(op(), 1..60)) {
            let mut live = Live::default();
            let mut next_lsn = 1u64;
            // In flight: (bound when it began, the lsn it got).
            let mut in_flight: Vec<(u64, u64)> = Vec::new();
            let mut all: BTreeMap<u64, (String, u64)> = BTreeMap::new();
            let mut frontiers: BTreeMap<String, u64> = BTreeMap::new();
            let mut durable = 0u64;
            let mut last_horizon = 0u64;
            for op in ops {
                match op {
                    Op::Begin => {
                        let bound = durable + 1;
                        live.begin(bound);
                        // The lsn is assigned inside the append; other frames may take lsns too.
                        in_flight.push((bound, next_lsn));
                        next_lsn += 2;
                    }
                    Op::End { i, durable: ok, t, max } => {
                        if in_flight.is_empty() {
                            continue;
                        }
                        let (bound, lsn) = in_flight.remove(i % in_flight.len());
                        durable = durable.max(lsn);
                        let tenant = format!("t{t}");
                        let appended = ok.then_some((lsn, tenant.as_str(), max));
                        if ok {
                            all.insert(lsn, (tenant.clone(), max));
                        }
                        live.end(bound, appended);
                    }
                    Op::Stamp { t, by } => {
                        *frontiers.entry(format!("t{t}")).or_default() += by;
                    }
                    Op::Horizon => {
                        let f = frontiers.clone();
                        let h = live.horizon(|t| f.get(t).copied().unwrap_or(0));
                        prop_assert!(h >= last_horizon, "the horizon moved down");
                        last_horizon = h;
                        for (lsn, (tenant, max)) in all.range(..=h) {
                            prop_assert!(
                                frontiers.get(tenant).copied().unwrap_or(0) >= *max,
                                "intent {lsn} at or below the horizon {h} names frames up to {max} of {tenant}"
                            );
                        }
                        for (_, lsn) in &in_flight {
                            prop_assert!(*lsn > h, "an append in flight got lsn {lsn} at or below the horizon {h}");
                        }
                    }
                }
            }
        }
    }
}
