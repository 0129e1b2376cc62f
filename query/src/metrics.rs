//! The read path's metric names.

/// Audit definitions whose key was already defined with another text (counter; never expected:
/// a key is a hash of its text). Records naming such a key are not rebuilt.
pub const TEMPLATE_CONFLICTS: &str = "ourios.query.template_conflicts";
/// Audit definitions whose text does not parse as a template (counter; never expected).
pub const TEMPLATE_UNPARSABLE: &str = "ourios.query.template_unparsable";
