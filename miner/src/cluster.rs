//! Many tenants: one [`TenantMiner`] per tenant, created on first use, sharing a configuration
//! and a clock.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::clock::{Clock, SystemClock};
use crate::config::MinerConfig;
use crate::miner::{Mined, TenantMiner};
use crate::snapshot::SnapshotError;

/// The miners of every tenant. Tenants are independent: ids, versions and event sequences are
/// per tenant, and one tenant's lines never change another's state.
#[derive(Debug)]
pub struct MinerCluster {
    config: MinerConfig,
    clock: Arc<dyn Clock>,
    tenants: BTreeMap<String, TenantMiner>,
}

impl MinerCluster {
    /// An empty cluster stamping audit events with the [`SystemClock`].
    pub fn new(config: MinerConfig) -> MinerCluster {
        MinerCluster::with_clock(config, Arc::new(SystemClock))
    }

    /// An empty cluster stamping audit events with `clock`.
    pub fn with_clock(config: MinerConfig, clock: Arc<dyn Clock>) -> MinerCluster {
        MinerCluster {
            config,
            clock,
            tenants: BTreeMap::new(),
        }
    }

    /// The configuration every tenant's miner runs under.
    pub fn config(&self) -> &MinerConfig {
        &self.config
    }

    /// The miner of `tenant`, created empty if it has none yet.
    pub fn tenant_mut(&mut self, tenant: &str) -> &mut TenantMiner {
        if !self.tenants.contains_key(tenant) {
            let miner = TenantMiner::new(tenant, self.config.clone(), Arc::clone(&self.clock));
            self.tenants.insert(tenant.to_owned(), miner);
        }
        // `get_mut` after `contains_key` rather than `entry`, which would allocate the key on
        // every call; the miner was inserted just above when it was missing.
        self.tenants
            .get_mut(tenant)
            .expect("tenant miner is present: inserted above when missing")
    }

    /// The miner of `tenant`, if it has mined or been restored.
    pub fn tenant(&self, tenant: &str) -> Option<&TenantMiner> {
        self.tenants.get(tenant)
    }

    /// The tenants with a miner, in order.
    pub fn tenants(&self) -> impl Iterator<Item = &str> {
        self.tenants.keys().map(String::as_str)
    }

    /// Mines one line of `tenant` (see [`TenantMiner::ingest`]).
    pub fn mine(&mut self, tenant: &str, line: &str) -> Mined {
        self.tenant_mut(tenant).ingest(line)
    }

    /// Mines `lines` of `tenant` in order, handing each result to `out` as it is mined (see
    /// [`TenantMiner::ingest_mined`] for what a panic leaves behind).
    pub fn ingest_mined<'l, I>(&mut self, tenant: &str, lines: I, out: &mut impl FnMut(Mined))
    where
        I: IntoIterator<Item = &'l str>,
    {
        self.tenant_mut(tenant).ingest_mined(lines, out);
    }

    /// Regeneration-only mining of one line of `tenant`: state advances, nothing is emitted
    /// (see [`TenantMiner::ingest_regenerate`]).
    pub fn regenerate(&mut self, tenant: &str, line: &str) {
        self.tenant_mut(tenant).ingest_regenerate(line);
    }

    /// The snapshot of `tenant`'s state; a tenant with no miner yet snapshots as empty.
    pub fn snapshot(&self, tenant: &str) -> Vec<u8> {
        match self.tenants.get(tenant) {
            Some(miner) => miner.snapshot(),
            None => {
                TenantMiner::new(tenant, self.config.clone(), Arc::clone(&self.clock)).snapshot()
            }
        }
    }

    /// Replaces `tenant`'s state with the one in `bytes`.
    ///
    /// # Errors
    /// [`SnapshotError`] when the snapshot cannot be used; the tenant's state is then left as it
    /// was, and the caller replays the tenant's frames (after [`MinerCluster::reset`] if the
    /// tenant had mined already).
    pub fn restore(&mut self, tenant: &str, bytes: &[u8]) -> Result<(), SnapshotError> {
        let miner =
            TenantMiner::restore(tenant, self.config.clone(), Arc::clone(&self.clock), bytes)?;
        self.tenants.insert(tenant.to_owned(), miner);
        Ok(())
    }

    /// Forgets `tenant`'s state, so its next line starts from an empty miner.
    pub fn reset(&mut self, tenant: &str) -> Option<TenantMiner> {
        self.tenants.remove(tenant)
    }
}
