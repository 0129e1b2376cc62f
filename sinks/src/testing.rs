//! Test doubles (feature `testing`): a scriptable [`FaultyStore`], a [`Gate`], a
//! [`MemorySealer`], and [`SimFs`], the local store's file operations on the WAL's power-loss
//! model.
//!
//! `FaultyStore` wraps an `InMemory` store and, per put, consults a script: a rule matches a put
//! by its global call index, by key prefix, or by its index among the puts under a prefix, and
//! injects a transient error, a permanent error, a panic before the inner put, a panic after the
//! inner put succeeded (the ambiguous case: the object exists, the caller never hears), or a
//! gate the test releases. It counts put attempts and successful puts per key. Only puts are
//! scripted; reads, lists and deletes pass through.

use std::collections::BTreeMap;
use std::fmt;

use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, PutOptions, PutPayload, PutResult, Result};
use tokio::sync::watch;

use crate::sync::{Arc, Mutex, lock};

/// A point a test holds a put at until it calls [`Gate::release`]. Cloning shares the gate.
#[derive(Debug, Clone)]
pub struct Gate {
    reached: Arc<watch::Sender<usize>>,
    released: Arc<watch::Sender<bool>>,
}

impl Default for Gate {
    fn default() -> Self {
        Self::new()
    }
}

impl Gate {
    /// A closed gate nobody has reached.
    pub fn new() -> Self {
        Self {
            reached: Arc::new(watch::Sender::new(0)),
            released: Arc::new(watch::Sender::new(false)),
        }
    }

    /// Wait until at least one put is held at the gate.
    pub async fn wait_reached(&self) {
        let mut rx = self.reached.subscribe();
        // The sender lives in `self`: the wait ends only when a put arrives.
        let _ = rx.wait_for(|n| *n > 0).await;
    }

    /// How many puts have arrived at the gate.
    pub fn arrivals(&self) -> usize {
        *self.reached.borrow()
    }

    /// Let every held (and future) put through.
    pub fn release(&self) {
        self.released.send_replace(true);
    }

    async fn pass(&self) {
        self.reached.send_modify(|n| *n += 1);
        let mut rx = self.released.subscribe();
        let _ = rx.wait_for(|open| *open).await;
    }
}

/// What a matching put does.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Fail with an error [`classify`](crate::classify) reads as transient (a timeout).
    Transient,
    /// Fail with an error `classify` reads as permanent (permission denied).
    Permanent,
    /// Panic before the inner put: nothing written.
    PanicBeforePut,
    /// Perform the inner put (the object exists, whether this put or an earlier one wrote it),
    /// then panic: the ambiguous case.
    PanicAfterPut,
    /// Wait at the gate until the test releases it, then put normally.
    Gate(Gate),
}

#[derive(Debug, Clone)]
enum Match {
    Call(usize),
    Prefix(String),
    NthWithPrefix(String, usize),
}

#[derive(Debug, Clone)]
struct Rule {
    on: Match,
    fault: Fault,
    remaining: Option<usize>,
}

#[derive(Debug, Default)]
struct Script {
    rules: Vec<Rule>,
    /// The key of every put attempt, in order (a rule's `n`-th under a prefix counts from the
    /// store's creation, whenever the rule was armed).
    attempted: Vec<String>,
    /// Rules that matched a put (each match is one injected fault).
    fired: usize,
    ok_per_key: BTreeMap<String, usize>,
}

impl Script {
    fn attempts_with_prefix(&self, prefix: &str) -> usize {
        self.attempted
            .iter()
            .filter(|k| k.starts_with(prefix))
            .count()
    }
}

/// An `InMemory` store with a fault script (see the module docs). `Clone` shares the store.
#[derive(Debug, Clone, Default)]
pub struct FaultyStore {
    inner: Arc<InMemory>,
    script: Arc<Mutex<Script>>,
}

impl fmt::Display for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyStore({})", self.inner)
    }
}

impl FaultyStore {
    /// An empty store with no faults scripted.
    pub fn new() -> Self {
        Self::default()
    }

    /// This store as the `Arc<dyn ObjectStore>` the sinks take (sharing the script).
    pub fn as_dyn(&self) -> Arc<dyn ObjectStore> {
        Arc::new(self.clone())
    }

    /// The wrapped in-memory store (reads bypass the script either way).
    pub fn inner(&self) -> &InMemory {
        &self.inner
    }

    /// Inject `fault` into the put with global index `call` (0-based, counting every put
    /// attempt on this store).
    pub fn on_call(&self, call: usize, fault: Fault) {
        self.push(Match::Call(call), fault, Some(1));
    }

    /// Inject `fault` into every put whose key starts with `prefix`, `times` times (`None` =
    /// until cleared).
    pub fn on_prefix(&self, prefix: &str, fault: Fault, times: Option<usize>) {
        self.push(Match::Prefix(prefix.to_owned()), fault, times);
    }

    /// Inject `fault` into the `n`-th (0-based) put attempt whose key starts with `prefix`,
    /// counting from the store's creation.
    pub fn on_nth_with_prefix(&self, prefix: &str, n: usize, fault: Fault) {
        self.push(Match::NthWithPrefix(prefix.to_owned(), n), fault, Some(1));
    }

    /// Inject `fault` into the `k`-th (0-based) put attempt whose key starts with `prefix`,
    /// counting from now: `k = 0` is the next one.
    pub fn on_next_with_prefix(&self, prefix: &str, k: usize, fault: Fault) {
        let mut s = lock(&self.script);
        let n = s.attempts_with_prefix(prefix) + k;
        s.rules.push(Rule {
            on: Match::NthWithPrefix(prefix.to_owned(), n),
            fault,
            remaining: Some(1),
        });
    }

    /// Put attempts so far whose key starts with `prefix` (faulted or not).
    pub fn attempts_with_prefix(&self, prefix: &str) -> usize {
        lock(&self.script).attempts_with_prefix(prefix)
    }

    /// Faults injected so far (puts a rule matched).
    pub fn faults_fired(&self) -> usize {
        lock(&self.script).fired
    }

    /// Remove every scripted fault (counts are kept).
    pub fn clear_faults(&self) {
        lock(&self.script).rules.clear();
    }

    /// Put attempts so far (every call, faulted or not).
    pub fn put_attempts(&self) -> usize {
        lock(&self.script).attempted.len()
    }

    /// Successful inner puts per key (an object written twice counts 2; with unique keys that
    /// never happens, so each value is 1).
    pub fn puts_per_key(&self) -> BTreeMap<String, usize> {
        lock(&self.script).ok_per_key.clone()
    }

    /// Successful inner puts whose key starts with `prefix`.
    pub fn puts_ok_with_prefix(&self, prefix: &str) -> usize {
        lock(&self.script)
            .ok_per_key
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(_, n)| n)
            .sum()
    }

    fn push(&self, on: Match, fault: Fault, remaining: Option<usize>) {
        lock(&self.script).rules.push(Rule {
            on,
            fault,
            remaining,
        });
    }

    /// Count the attempt and pick the fault of the first matching rule (consuming one use).
    fn fault_for(&self, key: &str) -> Option<Fault> {
        let mut s = lock(&self.script);
        let call = s.attempted.len();
        let hit = s.rules.iter().position(|r| {
            r.remaining != Some(0)
                && match &r.on {
                    Match::Call(c) => *c == call,
                    Match::Prefix(p) => key.starts_with(p.as_str()),
                    Match::NthWithPrefix(p, n) => {
                        key.starts_with(p.as_str()) && s.attempts_with_prefix(p) == *n
                    }
                }
        });
        s.attempted.push(key.to_owned());
        let rule = &mut s.rules[hit?];
        if let Some(r) = rule.remaining.as_mut() {
            *r -= 1;
        }
        let fault = rule.fault.clone();
        s.fired += 1;
        Some(fault)
    }

    async fn scripted_put(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let key = location.to_string();
        let fault = self.fault_for(&key);
        match &fault {
            Some(Fault::Transient) => {
                return Err(object_store::Error::Generic {
                    store: "FaultyStore",
                    source: Box::new(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("injected transient failure putting {key}"),
                    )),
                });
            }
            Some(Fault::Permanent) => {
                return Err(object_store::Error::PermissionDenied {
                    path: key.clone(),
                    source: format!("injected permanent failure putting {key}").into(),
                });
            }
            Some(Fault::PanicBeforePut) => panic!("injected panic before putting {key}"),
            Some(Fault::Gate(gate)) => gate.pass().await,
            Some(Fault::PanicAfterPut) | None => {}
        }
        let result = self.inner.put_opts(location, payload, opts).await;
        if result.is_ok() {
            *lock(&self.script)
                .ok_per_key
                .entry(key.clone())
                .or_insert(0) += 1;
        }
        if matches!(fault, Some(Fault::PanicAfterPut)) {
            // Whatever the store answered (a create-only put of a key an earlier attempt
            // wrote answers `AlreadyExists`): the call panics with the object in place.
            panic!("injected panic after the store accepted {key}");
        }
        result
    }
}

// Puts go through this store's own method; everything else to `inner` (see the macro).
impl ObjectStore for FaultyStore {
    crate::store::object_store_with_put!(scripted_put);
}

/// A [`Sealer`](crate::Sealer) that keeps the intents in memory (the node keeps them in its
/// WAL), and can be told to refuse.
#[derive(Debug, Default)]
pub struct MemorySealer {
    state: Mutex<SealerState>,
}

#[derive(Debug, Default)]
struct SealerState {
    intents: Vec<crate::Intent>,
    refuse: bool,
}

impl MemorySealer {
    /// A sealer that accepts every intent.
    pub fn new() -> Arc<MemorySealer> {
        Arc::new(MemorySealer::default())
    }

    /// Refuse (`true`) or accept every intent from now on.
    pub fn refuse(&self, refuse: bool) {
        lock(&self.state).refuse = refuse;
    }

    /// The intents made durable so far, in order.
    pub fn intents(&self) -> Vec<crate::Intent> {
        lock(&self.state).intents.clone()
    }
}

impl crate::Sealer for MemorySealer {
    fn wal_id(&self) -> [u8; 16] {
        [0x5e; 16]
    }

    fn seal(&self, intent: &crate::Intent) -> std::result::Result<(), String> {
        let mut st = lock(&self.state);
        if st.refuse {
            return Err("the sealer refuses (test)".to_owned());
        }
        st.intents.push(intent.clone());
        Ok(())
    }
}

/// [`LocalFs`](crate::LocalFs) on the WAL's simulated file system
/// ([`PowerLossIo`](ourios_wal::testing::power_loss::PowerLossIo)): what a put did not sync may
/// be gone after [`PowerLossIo::crash`](ourios_wal::testing::power_loss::PowerLossIo::crash).
#[derive(Debug, Clone)]
pub struct SimFs(pub ourios_wal::testing::power_loss::PowerLossIo);

impl crate::LocalFs for SimFs {
    fn create_dir_all(&self, dir: &std::path::Path) -> std::io::Result<()> {
        ourios_wal::WalIo::create_dir_all(&self.0, dir)
    }

    fn write_new(&self, path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
        ourios_wal::WalIo::create_new(&self.0, path)?.write_all(bytes)
    }

    fn sync_file(&self, path: &std::path::Path) -> std::io::Result<()> {
        ourios_wal::WalIo::open_append(&self.0, path)?.sync_data()
    }

    fn link_new(&self, from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
        self.0.hard_link(from, to)
    }

    fn rename(&self, from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
        ourios_wal::WalIo::rename(&self.0, from, to)
    }

    fn remove_file(&self, path: &std::path::Path) -> std::io::Result<()> {
        ourios_wal::WalIo::remove_file(&self.0, path)
    }

    fn sync_dir(&self, dir: &std::path::Path) -> std::io::Result<()> {
        ourios_wal::WalIo::sync_dir(&self.0, dir)
    }
}

/// The `file://` store on the power-loss model: puts are a [`DurableLocalStore`]'s through
/// [`SimFs`] (the code that ships), and `head` answers from the simulated file system (what a
/// sealed unit's republish checks); other reads are not served (read a crash image with
/// [`SimStore::objects`]).
///
/// [`DurableLocalStore`]: crate::DurableLocalStore
#[derive(Debug)]
pub struct SimStore {
    inner: crate::DurableLocalStore,
    sim: ourios_wal::testing::power_loss::PowerLossIo,
}

impl fmt::Display for SimStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SimStore({})", self.inner)
    }
}

impl SimStore {
    /// A store rooted at `root` (an existing absolute directory; nothing is written there) on
    /// `sim`.
    ///
    /// # Errors
    /// As [`DurableLocalStore::with_fs`](crate::DurableLocalStore::with_fs).
    pub fn new(
        root: &std::path::Path,
        sim: ourios_wal::testing::power_loss::PowerLossIo,
    ) -> std::io::Result<SimStore> {
        Ok(SimStore {
            inner: crate::DurableLocalStore::with_fs(root, Arc::new(SimFs(sim.clone())))?,
            sim,
        })
    }

    /// Every object under the root of `image` (a crash image of this store's file system),
    /// by store key, staging files left out.
    pub fn objects(
        root: &std::path::Path,
        image: &ourios_wal::testing::power_loss::PowerLossIo,
    ) -> BTreeMap<String, Vec<u8>> {
        image
            .files_under(root)
            .into_iter()
            .filter(|(p, _)| !p.to_string_lossy().contains('#'))
            .filter_map(|(p, bytes)| {
                let key = p.strip_prefix(root).ok()?.to_str()?.to_owned();
                Some((key, bytes))
            })
            .collect()
    }

    async fn sim_put(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn sim_get(
        &self,
        location: &Path,
        options: object_store::GetOptions,
    ) -> Result<object_store::GetResult> {
        if !options.head {
            return Err(object_store::Error::NotImplemented {
                operation: "get (read the crash image with SimStore::objects)".into(),
                implementer: "SimStore".into(),
            });
        }
        let path = self.inner.path_of(location)?;
        let (_, size) = ourios_wal::WalIo::open_read(&self.sim, &path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                object_store::Error::NotFound {
                    path: location.to_string(),
                    source: Box::new(e),
                }
            } else {
                object_store::Error::Generic {
                    store: "SimStore",
                    source: Box::new(e),
                }
            }
        })?;
        Ok(object_store::GetResult {
            payload: object_store::GetResultPayload::Stream(Box::pin(futures::stream::empty())),
            meta: object_store::ObjectMeta {
                location: location.clone(),
                last_modified: std::time::SystemTime::UNIX_EPOCH.into(),
                size,
                e_tag: None,
                version: None,
            },
            range: 0..size,
            attributes: Default::default(),
        })
    }
}

// Puts through the durable local store, heads from the simulation, everything else to `inner`.
impl ObjectStore for SimStore {
    crate::store::object_store_with_put!(sim_put, get = sim_get);
}
