//! The Drain prefix tree and the clusters it leads to: the part of a tenant's state that is
//! snapshotted.
//!
//! Layer 1 is keyed by token count; the next `depth - 3` layers by the line's first tokens (a
//! token with a hole or a digit goes down the wildcard child, and so does any token once a node
//! has `max_children` children); the nodes at the bottom hold cluster ids in creation order.
//! A cluster stays in the leaf it was created in even when its template later widens.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::MinerConfig;
use crate::template::{Similarity, Template};
use crate::tokens::LineView;

/// One cluster: its current template and how often it has changed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Cluster {
    /// Stored in snapshots slot by slot ([`Template::to_slots`]), which reads back exactly.
    #[serde(with = "slots")]
    pub(crate) template: Template,
    /// 1 at creation, +1 per widening.
    pub(crate) version: u32,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Node {
    /// Literal token -> child node index. A `BTreeMap` so the snapshot is byte-deterministic.
    #[serde(rename = "c", default, skip_serializing_if = "BTreeMap::is_empty")]
    children: BTreeMap<String, usize>,
    #[serde(rename = "w", default, skip_serializing_if = "Option::is_none")]
    wildcard: Option<usize>,
    /// Cluster indices, for a leaf.
    #[serde(rename = "k", default, skip_serializing_if = "Vec::is_empty")]
    clusters: Vec<usize>,
}

/// The whole mined state of one tenant.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct State {
    pub(crate) tenant: String,
    pub(crate) config: MinerConfig,
    /// The sequence number of the next audit event.
    pub(crate) next_seq: u64,
    /// Indexed by `template_id - 1`.
    pub(crate) clusters: Vec<Cluster>,
    /// Token count -> node index.
    by_len: BTreeMap<usize, usize>,
    nodes: Vec<Node>,
}

impl State {
    pub(crate) fn new(tenant: String, config: MinerConfig) -> State {
        State {
            tenant,
            config,
            next_seq: 1,
            clusters: Vec::new(),
            by_len: BTreeMap::new(),
            nodes: Vec::new(),
        }
    }

    /// The cluster `line` belongs to, if any cluster is similar enough, and how similar.
    pub(crate) fn best_match(&self, line: &LineView<'_>) -> Option<(usize, Similarity)> {
        let leaf = self.search(line)?;
        let threshold = self.config.similarity_threshold();
        let mut best: Option<(usize, Similarity)> = None;
        for &idx in &self.nodes[leaf].clusters {
            let template = &self.clusters[idx].template;
            if template.token_count() != line.token_count() {
                continue;
            }
            // A cluster that cannot reach the threshold cannot be the answer: if it ranked
            // best, nothing would match (every other ranks at or below its similarity).
            let Some(sim) = template.similarity_reaching(line, threshold) else {
                continue;
            };
            if best.is_none_or(|(_, b)| sim.better_than(&b)) {
                best = Some((idx, sim));
            }
        }
        best
    }

    fn search(&self, line: &LineView<'_>) -> Option<usize> {
        let mut node = *self.by_len.get(&line.token_count())?;
        for i in 0..self.prefix_len(line) {
            let n = &self.nodes[node];
            node = match line.tree_key(i) {
                Some(key) => n.children.get(key).copied().or(n.wildcard),
                None => n.wildcard,
            }?;
        }
        Some(node)
    }

    fn prefix_len(&self, line: &LineView<'_>) -> usize {
        line.token_count().min(self.config.prefix_layers())
    }

    fn new_node(&mut self) -> usize {
        self.nodes.push(Node::default());
        self.nodes.len() - 1
    }

    /// Adds a new cluster for `line` with `template`, returning its index.
    pub(crate) fn insert(&mut self, line: &LineView<'_>, template: Template) -> usize {
        let idx = self.clusters.len();
        let len = line.token_count();
        let mut node = match self.by_len.get(&len) {
            Some(&n) => n,
            None => {
                let n = self.new_node();
                self.by_len.insert(len, n);
                n
            }
        };
        for i in 0..self.prefix_len(line) {
            let key = line.tree_key(i);
            let existing = key.and_then(|k| self.nodes[node].children.get(k).copied());
            node = match (existing, key) {
                (Some(child), _) => child,
                (None, Some(k))
                    // Keep one slot for the wildcard child.
                    if self.nodes[node].children.len() + 1 < self.config.max_children() =>
                {
                    let child = self.new_node();
                    self.nodes[node].children.insert(k.to_owned(), child);
                    child
                }
                _ => match self.nodes[node].wildcard {
                    Some(child) => child,
                    None => {
                        let child = self.new_node();
                        self.nodes[node].wildcard = Some(child);
                        child
                    }
                },
            };
        }
        self.nodes[node].clusters.push(idx);
        self.clusters.push(Cluster {
            template,
            version: 1,
        });
        idx
    }

    /// Checks every invariant the mining code indexes by, so a decoded snapshot that passed its
    /// checksum but was written by a buggy or hostile writer cannot make mining panic.
    pub(crate) fn check(&self) -> Result<(), String> {
        let mut seen = vec![0usize; self.clusters.len()];
        for (i, c) in self.clusters.iter().enumerate() {
            c.template
                .check()
                .map_err(|e| format!("template {}: {e}", i + 1))?;
            if c.version == 0 {
                return Err(format!("template {} has version 0", i + 1));
            }
        }
        let mut visited = vec![false; self.nodes.len()];
        for (&len, &root) in &self.by_len {
            let layers = len.min(self.config.prefix_layers());
            let mut frontier = vec![(root, 0usize)];
            while let Some((node, level)) = frontier.pop() {
                let Some(n) = self.nodes.get(node) else {
                    return Err(format!("node index {node} out of range"));
                };
                if std::mem::replace(&mut visited[node], true) {
                    return Err(format!("node {node} is reachable twice"));
                }
                if level == layers {
                    if !n.children.is_empty() || n.wildcard.is_some() {
                        return Err(format!("leaf node {node} has children"));
                    }
                    for &c in &n.clusters {
                        let Some(cluster) = self.clusters.get(c) else {
                            return Err(format!("cluster index {c} out of range"));
                        };
                        if cluster.template.token_count() != len {
                            return Err(format!(
                                "template {} has {} tokens in the {len}-token subtree",
                                c + 1,
                                cluster.template.token_count()
                            ));
                        }
                        seen[c] += 1;
                    }
                } else {
                    if !n.clusters.is_empty() {
                        return Err(format!("inner node {node} holds clusters"));
                    }
                    frontier.extend(n.children.values().map(|&c| (c, level + 1)));
                    frontier.extend(n.wildcard.map(|c| (c, level + 1)));
                }
            }
        }
        if let Some(c) = seen.iter().position(|&n| n != 1) {
            return Err(format!("template {} is in {} leaves", c + 1, seen[c]));
        }
        if self.next_seq <= self.clusters.len() as u64 {
            return Err(format!(
                "event sequence {} is behind {} created templates",
                self.next_seq,
                self.clusters.len()
            ));
        }
        Ok(())
    }

    /// Approximate heap bytes: capacities of every vector and string the state holds, and the
    /// entries of the tree maps (B-tree node overhead is not counted).
    pub(crate) fn heap_bytes(&self) -> usize {
        let clusters: usize = self
            .clusters
            .iter()
            .map(|c| c.template.heap_bytes())
            .sum::<usize>()
            + self.clusters.capacity() * size_of::<Cluster>();
        let nodes: usize = self
            .nodes
            .iter()
            .map(|n| {
                n.children
                    .keys()
                    .map(|k| k.capacity() + size_of::<(String, usize)>())
                    .sum::<usize>()
                    + n.clusters.capacity() * size_of::<usize>()
            })
            .sum::<usize>()
            + self.nodes.capacity() * size_of::<Node>();
        clusters + nodes + self.by_len.len() * size_of::<(usize, usize)>() + self.tenant.capacity()
    }
}

/// Serde for a template as its slots: each separator and token as its own string (`null` for a
/// wildcard), readable in a snapshot dump, tokens in the form audit events show them.
mod slots {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::template::Template;

    pub(super) fn serialize<S: Serializer>(t: &Template, s: S) -> Result<S::Ok, S::Error> {
        t.to_slots().serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Template, D::Error> {
        let slots = Vec::<Option<String>>::deserialize(d)?;
        Template::from_slots(slots).map_err(D::Error::custom)
    }
}
