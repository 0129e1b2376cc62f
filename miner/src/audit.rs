//! Audit events: one per template change. There is no silent merge.

/// One template change of one tenant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditEvent {
    /// The tenant whose miner changed.
    pub tenant: String,
    /// Position in the tenant's event sequence: consecutive from 1, per tenant, in input order.
    /// Regeneration-only mining advances it without emitting, so a restored miner continues the
    /// sequence where the uninterrupted one would have.
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
        /// The new template's id, unique within the tenant.
        template_id: u64,
        /// Always 1.
        version: u32,
        /// The rendered template ([`crate::Template::parse`] reads it back).
        template: String,
    },
    /// A line joined a cluster whose template had to widen to accept it.
    TemplateWidened {
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
}

impl AuditEvent {
    /// The template the event is about.
    pub fn template_id(&self) -> u64 {
        match self.kind {
            AuditEventKind::TemplateCreated { template_id, .. }
            | AuditEventKind::TemplateWidened { template_id, .. } => template_id,
        }
    }

    /// The template version the event introduces.
    pub fn version(&self) -> u32 {
        match self.kind {
            AuditEventKind::TemplateCreated { version, .. } => version,
            AuditEventKind::TemplateWidened { new_version, .. } => new_version,
        }
    }

    /// The rendered template as of this event.
    pub fn template(&self) -> &str {
        match &self.kind {
            AuditEventKind::TemplateCreated { template, .. } => template,
            AuditEventKind::TemplateWidened { new_template, .. } => new_template,
        }
    }
}
