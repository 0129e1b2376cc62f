//! Audit events: one per template change, and one definition per template key the first time a
//! process hands out a record with that key. There is no silent merge.

use crate::key::TemplateKey;

/// One template change of one tenant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditEvent {
    /// The tenant whose miner changed.
    pub tenant: String,
    /// Position in the tenant's event sequence: consecutive from 1, per tenant, in input order.
    /// Regeneration-only mining advances it without emitting, so a restored miner continues the
    /// sequence where the uninterrupted one would have. A `TemplateDefined` event is not a
    /// change: it carries 0 and does not advance the sequence.
    pub seq: u64,
    /// When the change was mined, from the miner's [`crate::Clock`], in nanoseconds since the
    /// Unix epoch. Not carried in the WAL frame: a re-mine stamps a fresh time.
    pub timestamp_unix_nanos: i128,
    /// What changed.
    pub kind: AuditEventKind,
}

/// What a template change was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuditEventKind {
    /// A line matched no cluster and became a new template, at version 1.
    TemplateCreated {
        /// The key of the new template's text.
        template_key: TemplateKey,
        /// The new template's id, unique within the tenant.
        template_id: u64,
        /// Always 1.
        version: u32,
        /// The rendered template ([`crate::Template::parse`] reads it back).
        template: String,
    },
    /// A line joined a cluster whose template had to widen to accept it.
    TemplateWidened {
        /// The key of the widened text (`new_template`).
        template_key: TemplateKey,
        /// The widened template's id.
        template_id: u64,
        /// The version before this line.
        old_version: u32,
        /// `old_version + 1`: the version this line's record carries.
        new_version: u32,
        /// The rendered template before.
        old_template: String,
        /// The rendered template after.
        new_template: String,
    },
    /// A line's template existed before this process emitted anything for it (restored from a
    /// snapshot, rebuilt by regeneration-only mining, or defined by an event whose emission a
    /// panic interrupted): the definition of its key, emitted once per process so that every
    /// record's key has a definition in the audit series whatever happened to the miner's
    /// state. A definition already in the store is repeated byte for byte (same key, same
    /// text): readers take distinct keys.
    TemplateDefined {
        /// The key being defined.
        template_key: TemplateKey,
        /// The template's id in this miner (lineage only).
        template_id: u64,
        /// Its current version in this miner (lineage only).
        version: u32,
        /// The rendered template the key names.
        template: String,
    },
}

impl AuditEvent {
    /// The template the event is about.
    pub fn template_id(&self) -> u64 {
        match self.kind {
            AuditEventKind::TemplateCreated { template_id, .. }
            | AuditEventKind::TemplateWidened { template_id, .. }
            | AuditEventKind::TemplateDefined { template_id, .. } => template_id,
        }
    }

    /// The template version the event introduces.
    pub fn version(&self) -> u32 {
        match self.kind {
            AuditEventKind::TemplateCreated { version, .. }
            | AuditEventKind::TemplateDefined { version, .. } => version,
            AuditEventKind::TemplateWidened { new_version, .. } => new_version,
        }
    }

    /// The key of the template text the event defines.
    pub fn template_key(&self) -> TemplateKey {
        match self.kind {
            AuditEventKind::TemplateCreated { template_key, .. }
            | AuditEventKind::TemplateWidened { template_key, .. }
            | AuditEventKind::TemplateDefined { template_key, .. } => template_key,
        }
    }

    /// The rendered template as of this event.
    pub fn template(&self) -> &str {
        match &self.kind {
            AuditEventKind::TemplateCreated { template, .. }
            | AuditEventKind::TemplateDefined { template, .. } => template,
            AuditEventKind::TemplateWidened { new_template, .. } => new_template,
        }
    }
}
