//! Epochs, cuts, quiesce and the epoch-scoped verdict (RFC 0052 §3 as amended by RFC 0054).
//!
//! Encode guards are counted on one packed `AtomicU64` (the *encode word*: the current epoch, a
//! reset gate bit and the number of guards tagged with that epoch), so entering and leaving an
//! encode batch is one CAS and a cut's advance is one CAS on the same word: every guard is
//! ordered wholly before the advance (tagged <= E) or after it (tagged E+1). That word is the
//! exclusion between `enter_encode` and `begin_cut`. Everything rarer — guards of epochs a cut
//! already advanced past, publishes, failure records, the reset — lives in one `State` under
//! one mutex, with one condvar that quiesce waits on.

use std::collections::BTreeMap;
use std::fmt;

use crate::error::{EnterError, StartError};
use crate::guard::{BatchGuard, PublishGuard};
use crate::latch::{CLEAR, CLEAR_EPOCH, EpochLatch, LAST_EPOCH, LatchWord};
use crate::sync::{Arc, AtomicU64, Condvar, Mutex, MutexGuard, Ordering, lock, wait};

/// Left shift of the epoch inside the encode word.
const ENCODE_EPOCH_SHIFT: u32 = 32;
/// The reset gate: set while the cut at [`LAST_EPOCH`] resets the counter; new guards wait.
const GATE_BIT: u64 = 1 << 31;
/// The count of guards tagged with the word's epoch that are still counted on the word.
const COUNT_MASK: u64 = GATE_BIT - 1;
/// The most guards the word counts; any more are counted in the mutex-held map instead. The
/// crate's unit tests use 3, so the overflow path runs without 2^31 live guards.
const COUNT_MAX: u64 = if cfg!(test) { 3 } else { COUNT_MASK };

/// One loaded value of the encode word.
#[derive(Clone, Copy, PartialEq, Eq)]
struct EncodeWord(u64);

impl EncodeWord {
    const fn new(epoch: u32, gated: bool, count: u64) -> Self {
        let gate = if gated { GATE_BIT } else { 0 };
        Self(((epoch as u64) << ENCODE_EPOCH_SHIFT) | gate | (count & COUNT_MASK))
    }
    const fn epoch(self) -> u32 {
        (self.0 >> ENCODE_EPOCH_SHIFT) as u32
    }
    const fn gated(self) -> bool {
        self.0 & GATE_BIT != 0
    }
    const fn count(self) -> u64 {
        self.0 & COUNT_MASK
    }
}

/// How a publish ended, as the verdict sees it. Ordered by severity: a shared completion
/// settles with the worst of its detaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Settlement {
    Ok,
    Failed,
    Panicked,
}

#[derive(Debug, Default, Clone, Copy)]
struct Failures {
    failed: u64,
    panicked: u64,
}

#[derive(Debug, Clone, Copy)]
struct PendingReset {
    cut_epoch: u32,
    /// The reset may run as soon as nothing is outstanding: set by the resetting cut's
    /// `quiesce_publishes`, by dropping that cut, or by a later `begin_cut`.
    armed: bool,
}

#[derive(Debug, Default)]
struct State {
    /// Outstanding encode guards not counted on the encode word, by epoch: the ones a cut
    /// moved off the word when it advanced past their epoch, and overflow beyond `COUNT_MAX`.
    /// Zero entries are removed.
    encodes: BTreeMap<u32, u64>,
    /// Outstanding publishes (plain guards and shared completions), by epoch. Zero entries are
    /// removed.
    publishes: BTreeMap<u32, u64>,
    /// Failed or panicked publishes no verdict has consumed yet, by epoch.
    failures: BTreeMap<u32, Failures>,
    /// `Some` while the gate is closed for an epoch reset.
    reset: Option<PendingReset>,
    /// Incremented by every epoch reset; a cut from an older era is stale.
    era: u64,
    publishes_settled: u64,
    publishes_failed: u64,
    publishes_panicked: u64,
    epoch_resets: u64,
    accounting_errors: u64,
    /// Threads blocked in a quiesce or at the closed reset gate right now.
    waiting: u64,
}

impl State {
    fn encodes_through(&self, epoch: u32) -> bool {
        self.encodes.range(..=epoch).next().is_some()
    }
    fn publishes_through(&self, epoch: u32) -> bool {
        self.publishes.range(..=epoch).next().is_some()
    }
    fn reset_in_progress(&self) -> EnterError {
        EnterError::ResetInProgress {
            cut_epoch: self.reset.map_or(LAST_EPOCH, |r| r.cut_epoch),
        }
    }
}

/// Decrements `map[epoch]`, removing the entry at zero. Returns whether the entry is gone, and
/// counts an accounting error instead of underflowing (a bug, never a panic: this runs in
/// `Drop`).
fn decrement(map: &mut BTreeMap<u32, u64>, epoch: u32, errors: &mut u64) -> bool {
    match map.get_mut(&epoch) {
        Some(count) if *count > 1 => {
            *count -= 1;
            false
        }
        Some(_) => {
            map.remove(&epoch);
            true
        }
        None => {
            *errors += 1;
            false
        }
    }
}

/// The state every handle, guard and cut shares.
pub(crate) struct Shared {
    pub(crate) latch: EpochLatch,
    /// The encode word (see the module doc).
    encode: AtomicU64,
    state: Mutex<State>,
    /// Notified whenever an outstanding count reaches zero for an epoch or the gate opens.
    changed: Condvar,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Tags and counts one encode guard. Fast path: one CAS on the encode word.
    /// Never waits: while the reset gate is closed it returns `ResetInProgress`.
    fn enter_encode(this: &Arc<Self>) -> Result<BatchGuard, EnterError> {
        // Relaxed: only the first guess for the CAS below, which validates it.
        let mut current = this.encode.load(Ordering::Relaxed);
        loop {
            let word = EncodeWord(current);
            if word.gated() || word.count() == COUNT_MAX {
                match Self::enter_encode_slow(this) {
                    Some(entered) => return entered,
                    // Relaxed: as above, a first guess for the CAS.
                    None => current = this.encode.load(Ordering::Relaxed),
                }
                continue;
            }
            // Relaxed: entering publishes nothing (the guard has done nothing yet). The tag and
            // the count change in this one RMW and a cut's advance is an RMW on the same word,
            // so the modification order alone puts this guard wholly before or after the
            // advance.
            match this.encode.compare_exchange(
                current,
                current + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(BatchGuard::new(Arc::clone(this), word.epoch(), true)),
                Err(actual) => current = actual,
            }
        }
    }

    /// The gated and overflow cases, under the mutex. `None`: the word changed since the fast
    /// path looked (neither case holds now); the caller retries the fast path.
    fn enter_encode_slow(this: &Arc<Self>) -> Option<Result<BatchGuard, EnterError>> {
        let mut state = this.state();
        // Relaxed: the epoch and the gate change only under the state mutex, which we hold, so
        // this load sees their current values; fast-path guards may still move the count.
        let word = EncodeWord(this.encode.load(Ordering::Relaxed));
        if word.gated() {
            return Some(Err(state.reset_in_progress()));
        }
        if word.count() != COUNT_MAX {
            return None;
        }
        // Overflow: count this guard in the map under its epoch. Quiesce and the cut's move
        // treat map and word alike, and its exit always takes the slow path.
        *state.encodes.entry(word.epoch()).or_default() += 1;
        Some(Ok(BatchGuard::new(Arc::clone(this), word.epoch(), false)))
    }

    /// The last step of a batch guard's drop: decrements its count.
    pub(crate) fn exit_encode(&self, epoch: u32, on_word: bool) {
        if on_word {
            // The first guess is the word of a lone batch of this epoch (gate open, count 1)
            // rather than a load: the CAS validates it, a wrong guess costs one failed CAS, and
            // every step is then an RMW, which the loom models explore exhaustively against a
            // cut's advance.
            let mut current = EncodeWord::new(epoch, false, 1).0;
            loop {
                let word = EncodeWord(current);
                // A guard is counted on the word exactly while the word still carries its
                // epoch with the gate open: a cut moves the whole count to the map in the same
                // CAS that changes the epoch or closes the gate, and the word never returns to
                // this epoch while any guard of it is outstanding (a reset needs none).
                if word.epoch() != epoch || word.gated() {
                    break;
                }
                // Release: the caller's requeue and this guard's latch report (both before this
                // line) become visible to the cut whose advance (an Acquire RMW on this word)
                // reads this count or any later value of the word. Relaxed on failure: the
                // value read is only the next guess.
                match self.encode.compare_exchange(
                    current,
                    current - 1,
                    Ordering::Release,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return,
                    Err(actual) => current = actual,
                }
            }
        }
        // Moved off the word by a cut (or an overflow guard): the map, under the mutex, whose
        // unlock publishes the requeue and report to the quiescing cut that locks it next.
        let mut state = self.state();
        let state = &mut *state;
        if decrement(&mut state.encodes, epoch, &mut state.accounting_errors) {
            self.changed.notify_all();
        }
        self.try_reset(state);
    }

    /// Registers one publish of a shared completion at `epoch`, which its batch guard already
    /// holds: never gated, since the gate holds back only untagged new work.
    pub(crate) fn register_publish_at(&self, epoch: u32) {
        *self.state().publishes.entry(epoch).or_default() += 1;
    }

    /// Registers one plain publish at the current epoch. Never waits: while the reset gate is
    /// closed it returns `ResetInProgress`.
    fn register_publish(&self) -> Result<u32, EnterError> {
        let mut state = self.state();
        // Relaxed: the epoch and the gate change only under the state mutex, held here.
        let word = EncodeWord(self.encode.load(Ordering::Relaxed));
        if word.gated() {
            return Err(state.reset_in_progress());
        }
        *state.publishes.entry(word.epoch()).or_default() += 1;
        Ok(word.epoch())
    }

    /// Blocks while the reset gate is closed.
    fn wait_for_gate(&self) {
        // Relaxed: the gate changes only under the state mutex, held here (the wait re-locks).
        let _state = self.wait_while(self.state(), |_| {
            EncodeWord(self.encode.load(Ordering::Relaxed)).gated()
        });
    }

    /// Waits on `changed` while `blocked` holds, counted in `waiting` meanwhile (exported as
    /// [`BarrierStats::waiting`], so a caller blocked here can be observed).
    fn wait_while<'a>(
        &'a self,
        mut state: MutexGuard<'a, State>,
        mut blocked: impl FnMut(&State) -> bool,
    ) -> MutexGuard<'a, State> {
        if blocked(&state) {
            state.waiting += 1;
            while blocked(&state) {
                state = wait(&self.changed, state);
            }
            state.waiting -= 1;
        }
        state
    }

    /// The last step of a publish: records a failure for the verdict, then decrements.
    pub(crate) fn settle_publish(&self, epoch: u32, settlement: Settlement) {
        let mut state = self.state();
        let state = &mut *state;
        state.publishes_settled += 1;
        match settlement {
            Settlement::Ok => {}
            Settlement::Failed => {
                state.publishes_failed += 1;
                state.failures.entry(epoch).or_default().failed += 1;
            }
            Settlement::Panicked => {
                state.publishes_panicked += 1;
                state.failures.entry(epoch).or_default().panicked += 1;
            }
        }
        if decrement(&mut state.publishes, epoch, &mut state.accounting_errors) {
            self.changed.notify_all();
        }
        self.try_reset(state);
    }

    /// Runs an armed epoch reset once nothing is outstanding.
    fn try_reset(&self, state: &mut State) {
        let Some(reset) = state.reset else { return };
        if !reset.armed || !state.encodes.is_empty() || !state.publishes.is_empty() {
            return;
        }
        // Relaxed: under the mutex, and while the gate is closed nothing else writes the word
        // (enterers see the gate and come to the mutex; every guard was moved off the word).
        let word = EncodeWord(self.encode.load(Ordering::Relaxed));
        if word.count() != 0 {
            state.accounting_errors += 1;
            return;
        }
        // Relaxed: the same exclusive writer; waiters re-read the word under the mutex after
        // the notify, and fast-path enterers need only the value.
        self.encode
            .store(EncodeWord::new(0, false, 0).0, Ordering::Relaxed);
        // The latch is left alone. RFC 0054 §9.6 allows clearing it here, but the resetting cut
        // clears it like any cut — by CAS from its captured word, and only if it stamped — so a
        // failure it did not drain survives the reset. Its epoch half keeps the pre-reset number:
        // nothing compares it with `barrier_epoch` any more (RFC 0054 retired the timer's
        // `failed_epoch <= barrier_epoch` skip) and the clear compares whole words.
        // Failures no verdict consumed (the resetting cut was dropped before its
        // quiesce_publishes) are re-tagged to epoch 0, so the first cut after the reset is
        // blamed for them: fail closed rather than forget.
        let unconsumed = std::mem::take(&mut state.failures);
        if !unconsumed.is_empty() {
            let zero = state.failures.entry(0).or_default();
            for f in unconsumed.values() {
                zero.failed += f.failed;
                zero.panicked += f.panicked;
            }
        }
        state.reset = None;
        state.era += 1;
        state.epoch_resets += 1;
        self.changed.notify_all();
    }

    fn abandon_reset(&self, era: u64) {
        let mut state = self.state();
        if state.era != era {
            return;
        }
        if let Some(reset) = state.reset.as_mut() {
            reset.armed = true;
        }
        self.try_reset(&mut state);
    }
}

/// The barrier: `barrier_epoch`, the epoch latch, the outstanding guards by epoch, cuts,
/// quiesce and the epoch-scoped verdict. A cheap handle: clones share one state.
///
/// A cut, in the caller (RFC 0052 §3 as amended by RFC 0054):
///
/// ```
/// # use ourios_barrier::{Barrier, Cleared};
/// let barrier = Barrier::new();
/// // under the caller's own submit exclusion: capture the WAL position, then
/// let cut = barrier.begin_cut();
/// barrier.quiesce_encodes(&cut);
/// let verdict = barrier.quiesce_publishes(&cut);
/// // drain_all + write_ordered here; `cut_ok` is whether that drain was fully durable
/// let cut_ok = true;
/// if cut_ok && verdict.all_ok(cut.epoch()) {
///     // stamp frontiers and install snapshots, then:
///     assert_eq!(barrier.latch().clear(cut.latch_word()), Cleared::Cleared);
/// }
/// ```
#[derive(Clone)]
pub struct Barrier {
    shared: Arc<Shared>,
}

impl Barrier {
    /// A barrier at epoch 0 with a clear latch: what every process starts with (the latch is
    /// never persisted, so a restart clears it).
    #[must_use]
    pub fn new() -> Self {
        Self::from_parts(0, CLEAR)
    }

    /// A barrier starting at `epoch` with the latch holding `latch`, e.g. just below
    /// [`LAST_EPOCH`] to drive the epoch reset, or a near-sticky generation.
    pub fn with_state(epoch: u32, latch: LatchWord) -> Result<Self, StartError> {
        if epoch == CLEAR_EPOCH {
            return Err(StartError::ReservedEpoch { epoch });
        }
        Ok(Self::from_parts(epoch, latch))
    }

    fn from_parts(epoch: u32, latch: LatchWord) -> Self {
        Self {
            shared: Arc::new(Shared {
                latch: EpochLatch::with_word(latch),
                encode: AtomicU64::new(EncodeWord::new(epoch, false, 0).0),
                state: Mutex::new(State::default()),
                changed: Condvar::new(),
            }),
        }
    }

    /// The epoch new work is tagged with (RFC 0052's `barrier_epoch`). During an epoch reset it
    /// stays at [`LAST_EPOCH`] until the reset sets it to 0.
    #[must_use]
    pub fn barrier_epoch(&self) -> u32 {
        // Relaxed: a read of the value only; tagging happens in the entering CAS, not here.
        EncodeWord(self.shared.encode.load(Ordering::Relaxed)).epoch()
    }

    /// The epoch latch guards report to when a panic drops them.
    #[must_use]
    pub fn latch(&self) -> &EpochLatch {
        &self.shared.latch
    }

    /// Starts one encode batch: a [`BatchGuard`] tagged with the current epoch, counted in the
    /// same atomic step that reads the tag, so it is ordered wholly before or after any cut's
    /// advance. Blocks only while an epoch reset is in progress (once per `u32::MAX - 1` cuts);
    /// [`try_enter_encode`](Self::try_enter_encode) does not block.
    pub fn enter_encode(&self) -> BatchGuard {
        loop {
            match Shared::enter_encode(&self.shared) {
                Ok(guard) => return guard,
                Err(EnterError::ResetInProgress { .. }) => self.shared.wait_for_gate(),
            }
        }
    }

    /// Like [`enter_encode`](Self::enter_encode), but returns an error instead of waiting
    /// while an epoch reset is in progress (for async callers that must not block).
    pub fn try_enter_encode(&self) -> Result<BatchGuard, EnterError> {
        Shared::enter_encode(&self.shared)
    }

    /// Starts one publish that is not a batch's detach — a sweep's in-flight `Drained` — tagged
    /// with the current epoch. Blocks only while an epoch reset is in progress.
    pub fn enter_publish(&self) -> PublishGuard {
        loop {
            match self.shared.register_publish() {
                Ok(epoch) => return PublishGuard::new(Arc::clone(&self.shared), epoch),
                Err(EnterError::ResetInProgress { .. }) => self.shared.wait_for_gate(),
            }
        }
    }

    /// Like [`enter_publish`](Self::enter_publish), but returns an error instead of waiting while an
    /// epoch reset is in progress.
    pub fn try_enter_publish(&self) -> Result<PublishGuard, EnterError> {
        let epoch = self.shared.register_publish()?;
        Ok(PublishGuard::new(Arc::clone(&self.shared), epoch))
    }

    /// Begins a cut: takes the current epoch E, advances new work to E+1 in one CAS on the
    /// word every guard is tagged from (so each guard is tagged <= E or E+1, never in between),
    /// then captures the latch word. At [`LAST_EPOCH`] it closes the reset gate instead of
    /// advancing; the reset to 0 runs when this cut's
    /// [`quiesce_publishes`](Self::quiesce_publishes) has returned (no guard is outstanding
    /// then), or, if the cut is dropped first, as soon as no guard is outstanding.
    ///
    /// The cut never skips because the latch is set (RFC 0054 §3): the verdict and the clear
    /// against [`Cut::latch_word`] decide.
    ///
    /// If an earlier resetting cut is still open, this lets its reset run as soon as no guard
    /// is outstanding, waits for it, and then begins at epoch 0 (the earlier cut's verdict is
    /// then stale and never ok). New work waits at the gate meanwhile, so finish or drop a
    /// resetting cut promptly.
    pub fn begin_cut(&self) -> Cut {
        let shared = &self.shared;
        let mut state = shared.state();
        loop {
            // Relaxed: the epoch and the gate change only under the state mutex, held here;
            // the count is validated by the CAS.
            let current = shared.encode.load(Ordering::Relaxed);
            let word = EncodeWord(current);
            if word.gated() {
                // An earlier resetting cut is still open (or on another thread): let the reset
                // run as soon as nothing is outstanding, and wait for it. That cut's own
                // quiesce_publishes then finds it stale and fails closed.
                if let Some(reset) = state.reset.as_mut() {
                    reset.armed = true;
                }
                shared.try_reset(&mut state);
                // Relaxed: still under the state mutex, which orders the gate bit.
                if EncodeWord(shared.encode.load(Ordering::Relaxed)).gated() {
                    state = wait(&shared.changed, state);
                }
                continue;
            }
            let epoch = word.epoch();
            let resets = epoch == LAST_EPOCH;
            let next = if resets {
                EncodeWord::new(epoch, true, 0)
            } else {
                EncodeWord::new(epoch + 1, false, 0)
            };
            // Acquire: pairs with the Release decrement of every guard that left through the
            // fast path before this advance (read here directly or through the RMW chain on the
            // word), so this cut sees their requeues and latch reports.
            match shared.encode.compare_exchange(
                current,
                next.0,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    if word.count() > 0 {
                        *state.encodes.entry(epoch).or_default() += word.count();
                    }
                    if resets {
                        state.reset = Some(PendingReset {
                            cut_epoch: epoch,
                            armed: false,
                        });
                    }
                    let era = state.era;
                    drop(state);
                    let latch_word = shared.latch.capture();
                    return Cut {
                        epoch,
                        latch_word,
                        era,
                        resets,
                        shared: Arc::clone(shared),
                    };
                }
                Err(_) => continue,
            }
        }
    }

    /// Waits until no encode batch tagged <= `cut.epoch()` is outstanding. When it returns,
    /// every such batch's requeue and latch report are visible to the caller.
    pub fn quiesce_encodes(&self, cut: &Cut) {
        let shared = &self.shared;
        let _state = shared.wait_while(shared.state(), |s| {
            s.era == cut.era && s.encodes_through(cut.epoch)
        });
    }

    /// Waits until no encode batch and no publish tagged <= `cut.epoch()` is outstanding, and
    /// returns the verdict over the publishes tagged <= E that failed or panicked since the last
    /// verdict. Each failure record is handed to exactly one verdict (the first whose epoch
    /// covers it) and then forgotten: the cut that received it decided not to stamp, and the
    /// records it was about are back in the buffers for the next cut's drain.
    ///
    /// For the cut at [`LAST_EPOCH`], this is where the epoch resets to 0.
    pub fn quiesce_publishes(&self, cut: &Cut) -> Verdict {
        let shared = &self.shared;
        let mut state = shared.wait_while(shared.state(), |s| {
            s.era == cut.era && (s.encodes_through(cut.epoch) || s.publishes_through(cut.epoch))
        });
        if state.era != cut.era {
            return Verdict::stale(cut.epoch);
        }
        let later = state.failures.split_off(&(cut.epoch + 1));
        let consumed = std::mem::replace(&mut state.failures, later);
        let verdict = Verdict {
            epoch: cut.epoch,
            lowest_failed_epoch: consumed.keys().next().copied(),
            failed: consumed.values().map(|f| f.failed).sum(),
            panicked: consumed.values().map(|f| f.panicked).sum(),
            stale: false,
        };
        if cut.resets {
            if let Some(reset) = state.reset.as_mut() {
                reset.armed = true;
            }
            shared.try_reset(&mut state);
        }
        verdict
    }

    /// Absorbs the failures of every publish that settled before this call: waits until no
    /// encode batch or publish tagged at or below the current epoch E is outstanding, then
    /// forgets their failures (nobody's verdict gets them), and returns E. New work moves on to
    /// E+1 first, as in a cut, so the wait is bounded under load; the epoch advances by one.
    ///
    /// For a cut that drains after its own capture (RFC 0054 §9.6): a failed or panicked
    /// publish requeues its records before it settles, so they are back in the buffers and the
    /// cut's drain takes them; only a publish that settles after this returns can fail the
    /// cut's verdict.
    pub fn absorb_settled(&self) -> u32 {
        let cut = self.begin_cut();
        let _absorbed = self.quiesce_publishes(&cut);
        cut.epoch()
    }

    /// A consistent snapshot of the counters, for export and tests.
    #[must_use]
    pub fn stats(&self) -> BarrierStats {
        let shared = &self.shared;
        let state = shared.state();
        // Relaxed: a diagnostic snapshot under the mutex; nothing is read through it.
        let word = EncodeWord(shared.encode.load(Ordering::Relaxed));
        BarrierStats {
            barrier_epoch: word.epoch(),
            reset_in_progress: word.gated(),
            encodes_outstanding: word.count() + state.encodes.values().sum::<u64>(),
            publishes_outstanding: state.publishes.values().sum(),
            unconsumed_failures: state.failures.values().map(|f| f.failed + f.panicked).sum(),
            publishes_settled: state.publishes_settled,
            publishes_failed: state.publishes_failed,
            publishes_panicked: state.publishes_panicked,
            epoch_resets: state.epoch_resets,
            accounting_errors: state.accounting_errors,
            waiting: state.waiting,
            latch: shared.latch.capture(),
        }
    }
}

impl Default for Barrier {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Barrier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Barrier").field(&self.stats()).finish()
    }
}

/// One cut: its epoch E and the latch word captured when it began. Clear the latch only with
/// this word ([`EpochLatch::clear`]) and only if the cut stamped.
#[must_use = "a cut must be quiesced and decided; dropping it early only ends a pending reset"]
pub struct Cut {
    epoch: u32,
    latch_word: LatchWord,
    era: u64,
    resets: bool,
    shared: Arc<Shared>,
}

impl Cut {
    /// The cut's epoch E: it covers every guard tagged <= E.
    #[must_use]
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// The latch word captured at the cut (after the advance, with `Acquire`).
    #[must_use]
    pub fn latch_word(&self) -> LatchWord {
        self.latch_word
    }

    /// True for the cut at [`LAST_EPOCH`], which resets `barrier_epoch` to 0.
    #[must_use]
    pub fn resets_epoch(&self) -> bool {
        self.resets
    }
}

impl Drop for Cut {
    fn drop(&mut self) {
        if self.resets {
            // A resetting cut dropped before its quiesce_publishes (e.g. it panicked): let the
            // reset run as soon as nothing is outstanding, so the gate cannot stay closed.
            self.shared.abandon_reset(self.era);
        }
    }
}

impl fmt::Debug for Cut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cut")
            .field("epoch", &self.epoch)
            .field("latch_word", &self.latch_word)
            .field("resets_epoch", &self.resets)
            .finish_non_exhaustive()
    }
}

/// The epoch-scoped verdict of [`Barrier::quiesce_publishes`] (RFC 0052's `all_ok`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a cut may stamp only if its verdict is all_ok"]
pub struct Verdict {
    epoch: u32,
    lowest_failed_epoch: Option<u32>,
    failed: u64,
    panicked: u64,
    stale: bool,
}

impl Verdict {
    fn stale(epoch: u32) -> Self {
        Self {
            epoch,
            lowest_failed_epoch: None,
            failed: 0,
            panicked: 0,
            stale: true,
        }
    }

    /// The epoch of the cut this verdict was taken for.
    #[must_use]
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// True iff none of the failures this verdict consumed (every failed or panicked publish
    /// tagged <= its epoch that no earlier verdict consumed) is tagged <= `epoch`. False (fail
    /// closed) for an epoch above the verdict's own, which it cannot vouch for, and for a stale
    /// verdict. A cut asks `all_ok(cut.epoch())` (RFC 0052's `prior_ok`).
    #[must_use]
    pub fn all_ok(&self, epoch: u32) -> bool {
        !self.stale && epoch <= self.epoch && self.lowest_failed_epoch.is_none_or(|f| f > epoch)
    }

    /// The lowest epoch a failed or panicked publish in this verdict was tagged with.
    #[must_use]
    pub fn lowest_failed_epoch(&self) -> Option<u32> {
        self.lowest_failed_epoch
    }

    /// Publishes in this verdict that ended with a not-ok outcome.
    #[must_use]
    pub fn failed_publishes(&self) -> u64 {
        self.failed
    }

    /// Publishes in this verdict whose guard was dropped by a panic.
    #[must_use]
    pub fn panicked_publishes(&self) -> u64 {
        self.panicked
    }

    /// True when an epoch reset happened after the cut began (the cut was superseded); such a
    /// verdict is never ok.
    #[must_use]
    pub fn is_stale(&self) -> bool {
        self.stale
    }
}

/// Counters for export and tests ([`Barrier::stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BarrierStats {
    /// The epoch new work is tagged with.
    pub barrier_epoch: u32,
    /// The reset gate is closed.
    pub reset_in_progress: bool,
    /// Encode guards alive.
    pub encodes_outstanding: u64,
    /// Publishes (plain guards and shared completions) not settled.
    pub publishes_outstanding: u64,
    /// Failed or panicked publishes no verdict has consumed yet.
    pub unconsumed_failures: u64,
    /// Publishes settled since start.
    pub publishes_settled: u64,
    /// Publishes settled with a not-ok outcome since start.
    pub publishes_failed: u64,
    /// Publishes whose guard a panic dropped since start.
    pub publishes_panicked: u64,
    /// Epoch resets since start.
    pub epoch_resets: u64,
    /// Decrements that found nothing to decrement (a bug; never a panic). Zero in a sound run.
    pub accounting_errors: u64,
    /// Threads blocked in the barrier now: cuts in a quiesce waiting for outstanding work,
    /// and enters waiting at the closed reset gate.
    pub waiting: u64,
    /// The latch word at the snapshot.
    pub latch: LatchWord,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `body` on its own thread and ends the test process if it has not returned within
    /// 5 s: a wrong barrier makes a quiesce or an enter wait forever, and that must fail the run
    /// rather than stall it. A panic in `body` fails the test as usual.
    fn bounded(body: impl FnOnce() + Send + 'static) {
        let (done, finished) = std::sync::mpsc::channel::<()>();
        let runner = std::thread::spawn(move || {
            body();
            let _ = done.send(());
        });
        match finished.recv_timeout(std::time::Duration::from_secs(5)) {
            Ok(()) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                if let Err(panic) = runner.join() {
                    std::panic::resume_unwind(panic);
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                eprintln!("a barrier unit test is still running after 5 s: it hangs");
                std::process::exit(101);
            }
        }
    }

    /// `decrement` removes an entry at zero and counts a decrement of a missing entry as an
    /// accounting error instead of underflowing.
    #[test]
    fn decrement_of_a_missing_entry_is_an_accounting_error() {
        bounded(decrement_of_a_missing_entry_is_an_accounting_error_body);
    }

    fn decrement_of_a_missing_entry_is_an_accounting_error_body() {
        let mut map = BTreeMap::from([(3u32, 2u64)]);
        let mut errors = 0;
        assert!(!decrement(&mut map, 3, &mut errors));
        assert!(decrement(&mut map, 3, &mut errors));
        assert!(map.is_empty());
        assert!(!decrement(&mut map, 3, &mut errors));
        assert!(!decrement(&mut map, 4, &mut errors));
        assert_eq!(errors, 2);
    }

    /// Past `COUNT_MAX` guards on the word (3 in this build) the next guards are counted in
    /// the map under the same epoch: the stats see all of them, a cut's quiesce waits for
    /// them, and they leave through the slow path without an accounting error.
    #[test]
    fn guards_beyond_the_word_count_overflow_into_the_map() {
        bounded(guards_beyond_the_word_count_overflow_into_the_map_body);
    }

    fn guards_beyond_the_word_count_overflow_into_the_map_body() {
        let barrier = Barrier::new();
        let guards: Vec<BatchGuard> = (0..5).map(|_| barrier.enter_encode()).collect();
        // Relaxed: a single-threaded test reading its own writes.
        let word = EncodeWord(barrier.shared.encode.load(Ordering::Relaxed));
        assert_eq!(word.count(), COUNT_MAX);
        assert_eq!(barrier.shared.state().encodes.get(&0), Some(&2));
        assert_eq!(barrier.stats().encodes_outstanding, 5);
        assert!(guards.iter().all(|g| g.epoch() == 0));
        let cut = barrier.begin_cut();
        assert_eq!(barrier.enter_encode().epoch(), 1);
        drop(guards);
        barrier.quiesce_encodes(&cut);
        let stats = barrier.stats();
        assert_eq!((stats.encodes_outstanding, stats.accounting_errors), (0, 0));
    }

    /// An armed reset that finds guards still counted on the word refuses to reset and counts
    /// an accounting error (a bug elsewhere; the gate stays closed rather than lose a guard).
    #[test]
    fn reset_with_guards_on_the_word_is_an_accounting_error() {
        bounded(reset_with_guards_on_the_word_is_an_accounting_error_body);
    }

    fn reset_with_guards_on_the_word_is_an_accounting_error_body() {
        let barrier = Barrier::new();
        let shared = &barrier.shared;
        // Relaxed: single-threaded.
        shared
            .encode
            .store(EncodeWord::new(LAST_EPOCH, true, 1).0, Ordering::Relaxed);
        let mut state = shared.state();
        state.reset = Some(PendingReset {
            cut_epoch: LAST_EPOCH,
            armed: true,
        });
        shared.try_reset(&mut state);
        assert_eq!((state.accounting_errors, state.epoch_resets), (1, 0));
        assert!(state.reset.is_some());
    }
}
