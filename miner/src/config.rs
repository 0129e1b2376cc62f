//! Miner configuration: the Drain parameters, validated once.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Default similarity threshold (Drain's `st`).
pub const DEFAULT_SIMILARITY_THRESHOLD: f64 = 0.7;
/// Default tree depth (Drain's `depth`, counted as the reference implementations count it: root,
/// token-count layer, `depth - 3` token layers, leaf; so 4 routes by the first token).
pub const DEFAULT_DEPTH: usize = 4;
/// Default bound on the children of one tree node, the wildcard child included.
pub const DEFAULT_MAX_CHILDREN: usize = 100;
/// Default confidence below which a record keeps its body.
pub const DEFAULT_LOW_CONFIDENCE_BELOW: f64 = 0.5;

/// Default [`MinerConfig::max_templates`]: templates one tenant's miner creates before new
/// shapes of line go to the overflow template.
pub const DEFAULT_MAX_TEMPLATES: usize = 10_000;

fn default_max_templates() -> usize {
    DEFAULT_MAX_TEMPLATES
}

/// The parameters of a [`crate::TenantMiner`]. Every value is validated by its setter.
///
/// A snapshot records the configuration it was taken under; restoring it under a different one
/// is an error, because the state would not be the state this configuration mines to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MinerConfig {
    similarity_threshold: f64,
    depth: usize,
    max_children: usize,
    low_confidence_below: f64,
    /// Absent from snapshots taken before the cap existed: those were taken under the default.
    #[serde(default = "default_max_templates")]
    max_templates: usize,
}

impl Default for MinerConfig {
    fn default() -> MinerConfig {
        MinerConfig {
            similarity_threshold: DEFAULT_SIMILARITY_THRESHOLD,
            depth: DEFAULT_DEPTH,
            max_children: DEFAULT_MAX_CHILDREN,
            low_confidence_below: DEFAULT_LOW_CONFIDENCE_BELOW,
            max_templates: DEFAULT_MAX_TEMPLATES,
        }
    }
}

/// A miner parameter outside its valid range.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ConfigError {
    /// The similarity threshold must be a number in `0.0..=1.0`.
    #[error("similarity threshold {value} is outside 0.0..=1.0")]
    SimilarityThreshold {
        /// The rejected value.
        value: f64,
    },
    /// The tree depth must be at least 3 (root, token-count layer, leaf).
    #[error("tree depth {value} is below the minimum of 3")]
    Depth {
        /// The rejected value.
        value: usize,
    },
    /// A node needs room for one literal child and the wildcard child.
    #[error("max children {value} is below the minimum of 2")]
    MaxChildren {
        /// The rejected value.
        value: usize,
    },
    /// The low-confidence bound must be a number in `0.0..=1.0`.
    #[error("low-confidence bound {value} is outside 0.0..=1.0")]
    LowConfidenceBelow {
        /// The rejected value.
        value: f64,
    },
    /// A miner needs room for at least one template.
    #[error("max templates {value} is below the minimum of 1")]
    MaxTemplates {
        /// The rejected value.
        value: usize,
    },
}

fn unit_interval(v: f64) -> bool {
    (0.0..=1.0).contains(&v)
}

impl MinerConfig {
    /// Sets the similarity threshold: a line joins the most similar cluster of its length when
    /// at least this fraction of that template's non-wildcard tokens equal the line's.
    ///
    /// # Errors
    /// [`ConfigError::SimilarityThreshold`] unless `0.0 <= value <= 1.0`.
    pub fn with_similarity_threshold(mut self, value: f64) -> Result<MinerConfig, ConfigError> {
        if !unit_interval(value) {
            return Err(ConfigError::SimilarityThreshold { value });
        }
        self.similarity_threshold = value;
        Ok(self)
    }

    /// Sets the tree depth; lines descend by their first `depth - 3` tokens (Drain's and
    /// Drain3's reading of the parameter: 3 routes by length alone, the default 4 by the first
    /// token too).
    ///
    /// # Errors
    /// [`ConfigError::Depth`] when `value < 3`.
    pub fn with_depth(mut self, value: usize) -> Result<MinerConfig, ConfigError> {
        if value < 3 {
            return Err(ConfigError::Depth { value });
        }
        self.depth = value;
        Ok(self)
    }

    /// Sets the bound on children per tree node (the wildcard child counts); tokens beyond it
    /// descend through the wildcard child.
    ///
    /// # Errors
    /// [`ConfigError::MaxChildren`] when `value < 2`.
    pub fn with_max_children(mut self, value: usize) -> Result<MinerConfig, ConfigError> {
        if value < 2 {
            return Err(ConfigError::MaxChildren { value });
        }
        self.max_children = value;
        Ok(self)
    }

    /// Sets the confidence below which a mined record keeps its body. A record's confidence is
    /// the fraction of its template's token slots that are not `<*>` (1 for an empty line).
    ///
    /// # Errors
    /// [`ConfigError::LowConfidenceBelow`] unless `0.0 <= value <= 1.0`.
    pub fn with_low_confidence_below(mut self, value: f64) -> Result<MinerConfig, ConfigError> {
        if !unit_interval(value) {
            return Err(ConfigError::LowConfidenceBelow { value });
        }
        self.low_confidence_below = value;
        Ok(self)
    }

    /// Sets the cap on templates per tenant. Once a miner holds this many, a line that matches
    /// none of them is not given a new one: its record goes to the overflow template (the text
    /// `<*>`, the line kept whole as its body), so junk or hostile input cannot grow a tenant's
    /// state without bound.
    ///
    /// # Errors
    /// [`ConfigError::MaxTemplates`] when `value < 1`.
    pub fn with_max_templates(mut self, value: usize) -> Result<MinerConfig, ConfigError> {
        if value < 1 {
            return Err(ConfigError::MaxTemplates { value });
        }
        self.max_templates = value;
        Ok(self)
    }

    /// The cap on templates per tenant.
    pub fn max_templates(&self) -> usize {
        self.max_templates
    }

    /// The similarity threshold.
    pub fn similarity_threshold(&self) -> f64 {
        self.similarity_threshold
    }

    /// The tree depth.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// The bound on children per tree node.
    pub fn max_children(&self) -> usize {
        self.max_children
    }

    /// The confidence below which a record keeps its body.
    pub fn low_confidence_below(&self) -> f64 {
        self.low_confidence_below
    }

    /// Token layers below the token-count layer.
    pub(crate) fn prefix_layers(&self) -> usize {
        self.depth.saturating_sub(3)
    }
}
