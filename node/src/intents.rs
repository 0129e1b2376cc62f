//! Publish intents in the WAL (RFC 0058): the node's [`Sealer`], and the horizon below which
//! intent frames may be truncated.
//!
//! Intents are frames of a reserved WAL tenant, [`INTENT_TENANT`], which no client may use.
//! Its frontier is the *intent horizon*: every intent frame at or below it names only records
//! at or below their own tenants' frontiers, so no recovery will replay them, and the segment
//! holding it may go. A cut moves it after stamping the record tenants.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use ourios_sinks::{Intent, Sealer};
use ourios_wal::{Lsn, TenantId, Wal};

/// The WAL tenant whose frames are publish intents. Refused as a client tenant.
pub const INTENT_TENANT: &str = "_ourios.intents";

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

impl WalSealer {
    pub(crate) fn new(wal: Arc<Wal>) -> Self {
        Self {
            wal,
            tenant: intent_tenant(),
            live: Mutex::new(Live::default()),
        }
    }

    fn live(&self) -> std::sync::MutexGuard<'_, Live> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Recovery found `intent` at `lsn` above the horizon.
    pub(crate) fn remember(&self, lsn: Lsn, intent: &Intent) {
        let mut live = self.live();
        live.intents
            .insert(lsn.0, (intent.tenant.as_str().to_owned(), intent.max_lsn()));
        live.last = live.last.max(lsn.0);
    }

    /// The horizon the intent tenant's frontier may take now: below the oldest intent naming a
    /// record above its tenant's frontier (`frontier_of`), else the newest intent. Forgets the
    /// intents it passes. `None` when there is no intent at all.
    pub(crate) fn horizon(&self, frontier_of: impl Fn(&str) -> u64) -> Option<Lsn> {
        let mut live = self.live();
        live.intents
            .retain(|_, (tenant, max_lsn)| frontier_of(tenant) < *max_lsn);
        let below_pending = live.pending.keys().next().map(|&lsn| lsn - 1);
        let horizon = match live.intents.keys().next() {
            Some(&oldest) => oldest - 1,
            None => live.last,
        };
        let horizon = below_pending.map_or(horizon, |p| horizon.min(p));
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
        let bound = self.wal.durable_lsn().0 + 1;
        *self.live().pending.entry(bound).or_default() += 1;
        // Group-committed with whatever else is being appended: durable when it returns.
        let appended = self
            .wal
            .append(&self.tenant, &intent.encode())
            .map_err(|e| format!("writing the publish intent: {e}"));
        let mut live = self.live();
        if let Some(n) = live.pending.get_mut(&bound) {
            *n -= 1;
            if *n == 0 {
                live.pending.remove(&bound);
            }
        }
        let lsn = appended?;
        live.intents
            .insert(lsn.0, (intent.tenant.as_str().to_owned(), intent.max_lsn()));
        live.last = live.last.max(lsn.0);
        Ok(())
    }
}
