//! The terminal-tenant set shared by the record and audit sinks (RFC 0056 §9.3).

use std::collections::BTreeSet;

use crate::metrics;
use crate::sync::{Arc, Mutex, lock};
use crate::types::Tenant;

/// Tenants set aside after a permanent audit failure: excluded from every take, drain and
/// trigger of both sinks until a restart. A leaf lock: nothing is locked while it is held.
#[derive(Debug, Clone, Default)]
pub(crate) struct TerminalSet {
    inner: Arc<Mutex<BTreeSet<Tenant>>>,
}

impl TerminalSet {
    /// Mark `tenant` terminal; true if it was not already.
    pub(crate) fn insert(&self, tenant: Tenant) -> bool {
        let label = tenant.as_str().to_owned();
        let added = lock(&self.inner).insert(tenant);
        if added {
            ::metrics::gauge!(metrics::TENANT_TERMINAL, "tenant" => label).set(1.0);
        }
        added
    }

    pub(crate) fn contains(&self, tenant: &Tenant) -> bool {
        lock(&self.inner).contains(tenant)
    }

    pub(crate) fn snapshot(&self) -> BTreeSet<Tenant> {
        lock(&self.inner).clone()
    }
}
