//! One tenant's miner: lines in, records and audit events out, in input order.

use std::collections::HashSet;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use crate::audit::{AuditEvent, AuditEventKind};
use crate::clock::Clock;
use crate::config::MinerConfig;
use crate::drain::State;
use crate::key::TemplateKey;
use crate::params::Params;
use crate::snapshot::{self, SnapshotError};
use crate::template::{MAX_MINED_LINE_BYTES, TOKEN_WILDCARD, Template};
use crate::tokens::{LineView, Tokens};

/// One mined line: the template it belongs to and the parameters that rebuild it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MinedRecord {
    /// The key of the template text this line was mined against: what a reader joins on.
    pub template_key: TemplateKey,
    /// The tenant-scoped template id (lineage: depends on this miner's history); 0 for the
    /// overflow template of a miner past its cap.
    pub template_id: u64,
    /// The template version this line was mined against (after any widening it caused).
    pub template_version: u32,
    /// The values of the template's holes and wildcards, in slot order:
    /// `template.reconstruct(&params)` is the original line, byte for byte.
    pub params: Params,
    /// The original line, kept when the parse is low-confidence (the template's share of
    /// non-wildcard token slots is below [`MinerConfig::low_confidence_below`]).
    pub body: Option<String>,
}

/// What mining one line produced: its record and, when the line changed a template, the audit
/// event describing the change. The event must be durable before the record is visible.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mined {
    /// The template change this line caused, or the definition of its key when this miner has
    /// not defined it yet in this process.
    pub event: Option<AuditEvent>,
    /// The mined record.
    pub record: MinedRecord,
}

impl Mined {
    /// `line` kept whole under the overflow template ([`TOKEN_WILDCARD`] as text, id 0,
    /// version 0, no params, the line as its body), with the definition of that key stamped
    /// `timestamp_unix_nanos`. Needs no miner: what a caller stores for a line whose miner could
    /// not mine it (past the template cap, or a panic), and it rebuilds byte for byte.
    pub fn whole(tenant: &str, line: &str, timestamp_unix_nanos: i128) -> Mined {
        let template_key = TemplateKey::of(tenant, TOKEN_WILDCARD);
        Mined {
            event: Some(AuditEvent {
                tenant: tenant.to_owned(),
                seq: 0,
                timestamp_unix_nanos,
                kind: AuditEventKind::TemplateDefined {
                    template_key,
                    template_id: 0,
                    version: 0,
                    template: TOKEN_WILDCARD.to_owned(),
                },
            }),
            record: MinedRecord {
                template_key,
                template_id: 0,
                template_version: 0,
                params: Params::new(),
                body: Some(line.to_owned()),
            },
        }
    }
}

/// The Drain-style miner of one tenant.
///
/// Deterministic: the same lines in the same order give the same template ids, versions,
/// parameters and event sequence numbers (timestamps come from the clock). Mining one line is
/// all-or-nothing with respect to the clock: the timestamp of an event is taken before the state
/// changes, so a clock that panics leaves the miner as it was before the line.
pub struct TenantMiner {
    state: State,
    /// `keys[i]` is the key of `state.clusters[i]`'s current text (derived, never persisted).
    keys: Vec<TemplateKey>,
    /// Keys this miner has handed out an event for since it was built or restored, or since
    /// [`TenantMiner::forget_definitions`]. Per process on purpose: a restored or regenerated
    /// template gets its definition again the first time a record uses it.
    ///
    /// Keys are hashed with a fast seeded hash: a SipHash per record showed in profiles, and a
    /// key is a SHA-256 prefix, which no client can steer into one bucket of an unknown seed.
    defined: HashSet<TemplateKey, foldhash::fast::RandomState>,
    clock: Arc<dyn Clock>,
    scratch: Tokens,
    /// Where the current line's parameters are ([`Template::params`]), reused line to line.
    param_ranges: Vec<Range<usize>>,
}

impl fmt::Debug for TenantMiner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TenantMiner")
            .field("tenant", &self.state.tenant)
            .field("templates", &self.state.clusters.len())
            .field("next_event_seq", &self.state.next_seq)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

impl TenantMiner {
    /// An empty miner for `tenant`.
    pub fn new(
        tenant: impl Into<String>,
        config: MinerConfig,
        clock: Arc<dyn Clock>,
    ) -> TenantMiner {
        TenantMiner::from_state(State::new(tenant.into(), config), clock)
    }

    fn from_state(state: State, clock: Arc<dyn Clock>) -> TenantMiner {
        let keys = state
            .clusters
            .iter()
            .map(|c| TemplateKey::of(&state.tenant, &c.template.to_string()))
            .collect();
        TenantMiner {
            state,
            keys,
            defined: HashSet::default(),
            clock,
            scratch: Tokens::default(),
            param_ranges: Vec::new(),
        }
    }

    /// Restores a miner from [`TenantMiner::snapshot`] bytes.
    ///
    /// # Errors
    /// [`SnapshotError`] when the bytes are truncated, corrupt, of another format version, of
    /// another tenant, taken under another configuration, or inconsistent. The snapshot is a
    /// cache: on any error the caller rebuilds the state by replaying the tenant's lines.
    pub fn restore(
        tenant: &str,
        config: MinerConfig,
        clock: Arc<dyn Clock>,
        bytes: &[u8],
    ) -> Result<TenantMiner, SnapshotError> {
        let state = snapshot::decode(tenant, &config, bytes)?;
        Ok(TenantMiner::from_state(state, clock))
    }

    /// The state as versioned, checksummed bytes, for [`TenantMiner::restore`].
    pub fn snapshot(&self) -> Vec<u8> {
        snapshot::encode(&self.state)
    }

    /// Mines one line: its record, and the audit event if the line created or widened a
    /// template, or else the definition of its key if this miner has not defined that key yet
    /// in this process.
    ///
    /// A line longer than [`MAX_MINED_LINE_BYTES`] is not mined: it is recorded whole, as a line
    /// past the template cap is ([`Mined::whole`]).
    pub fn ingest(&mut self, line: &str) -> Mined {
        if line.len() > MAX_MINED_LINE_BYTES {
            return self.overflow(line);
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.fill(line);
        let view = scratch.view(line);
        if self.overflows(&view) {
            self.scratch = scratch;
            return self.overflow(line);
        }
        let (idx, mut event) = self.advance(&view, true);
        let record = self.record(idx, line, &view);
        self.scratch = scratch;
        if event.is_none() && !self.defined.contains(&record.template_key) {
            // No state changed for this line (it matched without widening), so a clock that
            // panics here still leaves the miner as it was before the line.
            let timestamp_unix_nanos = self.clock.now_unix_nanos();
            let cluster = &self.state.clusters[idx];
            event = Some(AuditEvent {
                tenant: self.state.tenant.clone(),
                seq: 0,
                timestamp_unix_nanos,
                kind: AuditEventKind::TemplateDefined {
                    template_key: record.template_key,
                    template_id: idx as u64 + 1,
                    version: cluster.version,
                    template: cluster.template.to_string(),
                },
            });
        }
        if event.is_some() {
            self.defined.insert(record.template_key);
        }
        Mined { event, record }
    }

    /// Whether `view` would found a new template in a miner that holds its cap already.
    fn overflows(&self, view: &LineView<'_>) -> bool {
        self.state.clusters.len() >= self.state.config.max_templates()
            && self.state.best_match(view).is_none()
    }

    /// The record of a line past the template cap or [`MAX_MINED_LINE_BYTES`]:
    /// [`Mined::whole`], its key's definition emitted once per process. The state does not change.
    fn overflow(&mut self, line: &str) -> Mined {
        let mut mined = Mined::whole(&self.state.tenant, line, self.clock.now_unix_nanos());
        if !self.defined.insert(mined.record.template_key) {
            mined.event = None; // defined already in this process
        }
        mined
    }

    /// Forgets which keys were defined, so the next record of each key carries its definition
    /// again. A caller whose handling of a [`Mined`] panicked calls it: it cannot know whether
    /// the event it was handed reached anything durable.
    pub fn forget_definitions(&mut self) {
        self.defined.clear();
    }

    /// Mines `lines` in order, handing each result to `out` as soon as it is mined.
    ///
    /// If mining a line panics (say, in the clock), every earlier line has already reached `out`
    /// and the miner's state is exactly the state after those lines: the caller can catch the
    /// unwind, keep the prefix, and knows the first unmined line is the one that panicked.
    pub fn ingest_mined<'l, I>(&mut self, lines: I, out: &mut impl FnMut(Mined))
    where
        I: IntoIterator<Item = &'l str>,
    {
        for line in lines {
            out(self.ingest(line));
        }
    }

    /// Regeneration-only mining: the state advances exactly as [`TenantMiner::ingest`] would
    /// advance it (templates, versions, event sequence numbers), but nothing is emitted and the
    /// clock is not read. Used to re-mine frames whose records and events are already durable.
    pub fn ingest_regenerate(&mut self, line: &str) {
        if line.len() > MAX_MINED_LINE_BYTES {
            return;
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.fill(line);
        let view = scratch.view(line);
        if !self.overflows(&view) {
            let _ = self.advance(&view, false);
        }
        self.scratch = scratch;
    }

    /// The tenant this miner mines for.
    pub fn tenant(&self) -> &str {
        &self.state.tenant
    }

    /// The configuration this miner runs under.
    pub fn config(&self) -> &MinerConfig {
        &self.state.config
    }

    /// The clock audit events are stamped with.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Number of templates mined so far (ids are `1..=template_count()`).
    pub fn template_count(&self) -> usize {
        self.state.clusters.len()
    }

    /// The current template with id `template_id`.
    pub fn template(&self, template_id: u64) -> Option<&Template> {
        self.cluster(template_id).map(|c| &c.template)
    }

    /// The current version of template `template_id`.
    pub fn template_version(&self, template_id: u64) -> Option<u32> {
        self.cluster(template_id).map(|c| c.version)
    }

    /// Every template as `(template_id, version, template)`, in id order.
    pub fn templates(&self) -> impl Iterator<Item = (u64, u32, &Template)> {
        self.state
            .clusters
            .iter()
            .zip(1u64..)
            .map(|(c, id)| (id, c.version, &c.template))
    }

    /// The sequence number the next audit event will carry.
    pub fn next_event_seq(&self) -> u64 {
        self.state.next_seq
    }

    /// Approximate heap bytes held by the state: the capacities of its strings and vectors and
    /// the entries of its tree maps; allocator and B-tree node overhead are not counted.
    pub fn approx_heap_bytes(&self) -> usize {
        self.state.heap_bytes() + size_of::<TenantMiner>()
    }

    fn cluster(&self, template_id: u64) -> Option<&crate::drain::Cluster> {
        let idx = usize::try_from(template_id.checked_sub(1)?).ok()?;
        self.state.clusters.get(idx)
    }

    /// Mines one tokenized line into the state: the cluster index it belongs to and, when
    /// `emit`, the audit event of the change it caused.
    fn advance(&mut self, view: &LineView<'_>, emit: bool) -> (usize, Option<AuditEvent>) {
        let st = &mut self.state;
        match st.best_match(view) {
            Some((idx, sim)) => {
                let Some(new_template) = st.clusters[idx].template.widened_from(view, &sim) else {
                    return (idx, None);
                };
                // The clock is read before anything changes: a panic here leaves the state as
                // it was before this line.
                let timestamp = emit.then(|| self.clock.now_unix_nanos());
                let cluster = &st.clusters[idx];
                // A widening turns at least one literal slot into a wildcard, so a template has
                // at most `2 * tokens + 2` versions: the saturation is never reached.
                let new_version = cluster.version.saturating_add(1);
                let rendered = new_template.to_string();
                let template_key = TemplateKey::of(&st.tenant, &rendered);
                let event = timestamp.map(|timestamp_unix_nanos| AuditEvent {
                    tenant: st.tenant.clone(),
                    seq: st.next_seq,
                    timestamp_unix_nanos,
                    kind: AuditEventKind::TemplateWidened {
                        template_key,
                        template_id: idx as u64 + 1,
                        old_version: cluster.version,
                        new_version,
                        old_template: cluster.template.to_string(),
                        new_template: rendered,
                    },
                });
                let cluster = &mut st.clusters[idx];
                cluster.template = new_template;
                cluster.version = new_version;
                self.keys[idx] = template_key;
                st.next_seq += 1;
                (idx, event)
            }
            None => {
                let template = Template::from_line(view);
                // As above: the clock first.
                let timestamp = emit.then(|| self.clock.now_unix_nanos());
                let rendered = template.to_string();
                let template_key = TemplateKey::of(&st.tenant, &rendered);
                let event = timestamp.map(|timestamp_unix_nanos| AuditEvent {
                    tenant: st.tenant.clone(),
                    seq: st.next_seq,
                    timestamp_unix_nanos,
                    kind: AuditEventKind::TemplateCreated {
                        template_key,
                        template_id: st.clusters.len() as u64 + 1,
                        version: 1,
                        template: rendered,
                    },
                });
                let idx = st.insert(view, template);
                debug_assert_eq!(idx, self.keys.len(), "a new cluster is appended");
                self.keys.push(template_key);
                st.next_seq += 1;
                (idx, event)
            }
        }
    }

    /// The record of a line that [`TenantMiner::advance`] put in cluster `idx`.
    fn record(&mut self, idx: usize, line: &str, view: &LineView<'_>) -> MinedRecord {
        let st = &self.state;
        let cluster = &st.clusters[idx];
        let n = view.token_count();
        let confident = n == 0
            || cluster.template.literal_token_count() as f64
                >= st.config.low_confidence_below() * n as f64;
        MinedRecord {
            template_key: self.keys[idx],
            template_id: idx as u64 + 1,
            template_version: cluster.version,
            params: cluster.template.params(view, &mut self.param_ranges),
            body: (!confident).then(|| line.to_owned()),
        }
    }
}
