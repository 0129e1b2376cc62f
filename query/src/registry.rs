//! The template registry: one tenant's template texts by key, read from its audit series.
//!
//! A record row names its template by `template_key`, the content address of the template text
//! (DESIGN section 12). The audit series defines each key (`template_created`,
//! `template_widened`, `template_defined`); a key names one text forever, so the registry only
//! ever grows. It follows the series object by object: a refresh lists the tenant's audit
//! prefix and reads only the objects it has not read before, so keeping a registry warm costs
//! one listing per query, not a re-read of the series.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::TryStreamExt;
use object_store::ObjectStore;
use object_store::path::Path;
use ourios_miner::Template;
use ourios_wal::TenantId;

use crate::QueryError;

/// A tenant's parsed templates by key: the snapshot one query reads (cheap to clone).
pub type Templates = HashMap<[u8; 16], Arc<Template>>;

/// One tenant's registry: the keys its audit series defines, and which audit objects it has
/// read.
#[derive(Debug, Default)]
pub struct Registry {
    templates: Arc<Templates>,
    /// Each key's text, to tell a replayed definition (the same text) from a conflict.
    texts: HashMap<[u8; 16], String>,
    /// Keys defined with two texts: no record naming one is rebuilt (it is counted instead).
    conflicts: HashSet<[u8; 16]>,
    /// Audit objects already read.
    read: HashSet<Path>,
}

/// What one refresh did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Refresh {
    /// Audit objects read by this refresh (new since the last).
    pub objects_read: usize,
    /// Keys defined for the first time by this refresh.
    pub keys_added: usize,
}

impl Registry {
    /// The templates known now: what a query started now rebuilds lines with.
    pub fn templates(&self) -> Arc<Templates> {
        Arc::clone(&self.templates)
    }

    /// Keys whose definitions disagree (never expected: a key is a hash of its text).
    pub fn conflicts(&self) -> usize {
        self.conflicts.len()
    }

    /// Read the audit objects of `tenant` below `prefix` that this registry has not read yet.
    pub async fn refresh(
        &mut self,
        store: &dyn ObjectStore,
        prefix: &str,
        tenant: &TenantId,
    ) -> Result<Refresh, QueryError> {
        let root = tenant_root(prefix, "audit", tenant);
        let mut fresh: Vec<Path> = store
            .list(Some(&root))
            .map_ok(|meta| meta.location)
            .try_filter(|path| futures::future::ready(!self.read.contains(path)))
            .try_collect()
            .await?;
        fresh.sort();
        let mut refresh = Refresh::default();
        let mut added: Vec<([u8; 16], Arc<Template>)> = Vec::new();
        for path in fresh {
            if !path.as_ref().ends_with(".parquet") {
                continue;
            }
            let events = ourios_sinks::read_audit_object(store, &path).await?;
            for (_, event) in &events {
                let Some((key, text)) = event.kind.definition() else {
                    continue;
                };
                match self.texts.get(&key) {
                    Some(known) if known == text => {}
                    Some(_) => {
                        self.conflicts.insert(key);
                        metrics::counter!(crate::metrics::TEMPLATE_CONFLICTS).increment(1);
                    }
                    None => match Template::parse(text) {
                        Ok(template) => {
                            self.texts.insert(key, text.to_owned());
                            added.push((key, Arc::new(template)));
                        }
                        Err(_) => {
                            metrics::counter!(crate::metrics::TEMPLATE_UNPARSABLE).increment(1);
                        }
                    },
                }
            }
            self.read.insert(path);
            refresh.objects_read += 1;
        }
        if !added.is_empty() || !self.conflicts.is_empty() {
            let templates = Arc::make_mut(&mut self.templates);
            refresh.keys_added = added.len();
            templates.extend(added);
            for key in &self.conflicts {
                templates.remove(key);
            }
        }
        Ok(refresh)
    }
}

/// `<prefix>/<kind>/tenant=<tenant>`: everything of one tenant of one kind (`records` or
/// `audit`). A tenant id is a single path segment of `[A-Za-z0-9_.-]`, so no tenant's root is
/// a prefix of another's (the store lists by whole segments).
pub(crate) fn tenant_root(prefix: &str, kind: &str, tenant: &TenantId) -> Path {
    Path::from(prefix)
        .join(kind)
        .join(format!("tenant={}", tenant.as_str()))
}
