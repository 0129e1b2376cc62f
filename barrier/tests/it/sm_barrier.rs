//! The barrier against a plain sequential reference model: random programs of encode batches,
//! detaches and their completions, sweep publishes, real panics, cuts, quiesces, clears and
//! dropped cuts, starting at epochs next to the reset (`Barrier::with_state`) and latch words
//! next to the sticky generation.

use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest, prop_state_machine};

use ourios_barrier::{
    Barrier, BatchGuard, Cleared, Cut, DetachToken, LAST_EPOCH, LatchWord, PublishGuard,
    PublishOutcome,
};

use crate::support::drop_in_panic;

const MAX: u32 = u32::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Sev {
    Ok,
    Failed,
    Panicked,
}

#[derive(Debug, Clone)]
struct Completion {
    epoch: u32,
    pending: u64,
    encode_ended: bool,
    worst: Sev,
    settled: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CutModel {
    epoch: u32,
    latch: (u32, u32),
    era: u64,
    resets: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct VerdictModel {
    stale: bool,
    lowest: Option<u32>,
    failed: u64,
    panicked: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClearModel {
    Cleared,
    Raced((u32, u32)),
    Sticky,
}

/// The model: plain values, no atomics, no locks.
#[derive(Debug, Clone)]
pub(crate) struct Model {
    epoch: u32,
    gated: bool,
    reset_armed: bool,
    era: u64,
    resets: u64,
    latch: (u32, u32),
    /// Live batch guards: (epoch, completion id).
    encodes: Vec<(u32, Option<usize>)>,
    completions: Vec<Completion>,
    /// Live detach tokens: completion id.
    tokens: Vec<usize>,
    /// Live plain publish guards: epoch.
    publishes: Vec<u32>,
    failures: BTreeMap<u32, (u64, u64)>,
    cut: Option<CutModel>,
    verdict: Option<VerdictModel>,
    clear: Option<ClearModel>,
    settled: u64,
}

impl Model {
    fn report(&mut self, epoch: u32) {
        let (e, g) = self.latch;
        self.latch = (e.min(epoch), if g >= MAX - 1 { MAX } else { g + 1 });
    }

    fn settle(&mut self, epoch: u32, sev: Sev) {
        self.settled += 1;
        let entry = self.failures.entry(epoch).or_default();
        match sev {
            Sev::Ok => {}
            Sev::Failed => entry.0 += 1,
            Sev::Panicked => entry.1 += 1,
        }
        if *entry == (0, 0) {
            self.failures.remove(&epoch);
        }
    }

    fn finish_detach(&mut self, id: usize, sev: Sev) {
        let c = &mut self.completions[id];
        c.pending -= 1;
        c.worst = c.worst.max(sev);
        self.settle_if_done(id);
    }

    fn settle_if_done(&mut self, id: usize) {
        let c = &mut self.completions[id];
        if c.pending == 0 && c.encode_ended && !c.settled {
            c.settled = true;
            let (epoch, worst) = (c.epoch, c.worst);
            self.settle(epoch, worst);
        }
    }

    fn publish_epochs(&self) -> impl Iterator<Item = u32> + '_ {
        self.publishes.iter().copied().chain(
            self.completions
                .iter()
                .filter(|c| !c.settled)
                .map(|c| c.epoch),
        )
    }

    fn outstanding_publishes(&self) -> u64 {
        self.publish_epochs().count() as u64
    }

    fn encodes_through(&self, epoch: u32) -> bool {
        self.encodes.iter().any(|&(e, _)| e <= epoch)
    }

    fn publishes_through(&self, epoch: u32) -> bool {
        self.publish_epochs().any(|e| e <= epoch)
    }

    fn try_reset(&mut self) {
        if self.gated
            && self.reset_armed
            && self.encodes.is_empty()
            && self.outstanding_publishes() == 0
        {
            self.epoch = 0;
            self.gated = false;
            self.reset_armed = false;
            self.era += 1;
            self.resets += 1;
            let (failed, panicked) = self
                .failures
                .values()
                .fold((0, 0), |(f, p), &(a, b)| (f + a, p + b));
            self.failures.clear();
            if failed + panicked > 0 {
                self.failures.insert(0, (failed, panicked));
            }
        }
    }

    /// Whether quiescing the held cut would return without waiting.
    fn cut_stale(&self) -> bool {
        self.cut.is_some_and(|c| c.era != self.era)
    }
}

#[derive(Debug, Clone)]
pub(crate) enum Step {
    EnterEncode,
    ExitEncode { i: usize, panic: bool },
    Detach { i: usize },
    CompleteToken { j: usize, outcome: PublishOutcome },
    DropToken { j: usize, panic: bool },
    EnterPublish,
    CompletePublish { j: usize, outcome: PublishOutcome },
    DropPublish { j: usize, panic: bool },
    TryEnterWhileGated,
    BeginCut,
    QuiesceEncodes,
    QuiescePublishes,
    ClearLatch,
    EndCut,
}

fn outcome() -> impl Strategy<Value = PublishOutcome> {
    prop_oneof![
        Just(PublishOutcome::Durable),
        Just(PublishOutcome::Dropped),
        Just(PublishOutcome::Requeued),
        Just(PublishOutcome::Parked),
        Just(PublishOutcome::Failed),
    ]
}

pub(crate) struct BarrierModel;

impl ReferenceStateMachine for BarrierModel {
    type State = Model;
    type Transition = Step;

    fn init_state() -> BoxedStrategy<Model> {
        let epoch = prop_oneof![
            Just(0_u32),
            Just(1),
            Just(LAST_EPOCH - 2),
            Just(LAST_EPOCH - 1),
            Just(LAST_EPOCH)
        ];
        let latch = prop_oneof![
            Just((MAX, 0)),
            (0..3_u32, prop_oneof![1..3_u32, (MAX - 2)..=MAX]),
        ];
        (epoch, latch)
            .prop_map(|(epoch, latch)| Model {
                epoch,
                gated: false,
                reset_armed: false,
                era: 0,
                resets: 0,
                latch,
                encodes: Vec::new(),
                completions: Vec::new(),
                tokens: Vec::new(),
                publishes: Vec::new(),
                failures: BTreeMap::new(),
                cut: None,
                verdict: None,
                clear: None,
                settled: 0,
            })
            .boxed()
    }

    fn transitions(state: &Model) -> BoxedStrategy<Step> {
        let mut steps: Vec<BoxedStrategy<Step>> = Vec::new();
        let index = 0..8_usize;
        if state.gated {
            steps.push(Just(Step::TryEnterWhileGated).boxed());
        } else {
            steps.push(Just(Step::EnterEncode).boxed());
            steps.push(Just(Step::EnterPublish).boxed());
        }
        if !state.encodes.is_empty() {
            steps.push(
                (index.clone(), any::<bool>())
                    .prop_map(|(i, panic)| Step::ExitEncode { i, panic })
                    .boxed(),
            );
            steps.push(index.clone().prop_map(|i| Step::Detach { i }).boxed());
        }
        if !state.tokens.is_empty() {
            steps.push(
                (index.clone(), outcome())
                    .prop_map(|(j, outcome)| Step::CompleteToken { j, outcome })
                    .boxed(),
            );
            steps.push(
                (index.clone(), any::<bool>())
                    .prop_map(|(j, panic)| Step::DropToken { j, panic })
                    .boxed(),
            );
        }
        if !state.publishes.is_empty() {
            steps.push(
                (index.clone(), outcome())
                    .prop_map(|(j, outcome)| Step::CompletePublish { j, outcome })
                    .boxed(),
            );
            steps.push(
                (index, any::<bool>())
                    .prop_map(|(j, panic)| Step::DropPublish { j, panic })
                    .boxed(),
            );
        }
        if state.cut.is_none() {
            if !state.gated {
                steps.push(Just(Step::BeginCut).boxed());
                steps.push(Just(Step::BeginCut).boxed());
            }
        } else {
            steps.push(Just(Step::QuiesceEncodes).boxed());
            steps.push(Just(Step::QuiescePublishes).boxed());
            steps.push(Just(Step::ClearLatch).boxed());
            steps.push(Just(Step::EndCut).boxed());
        }
        proptest::strategy::Union::new(steps).boxed()
    }

    fn preconditions(state: &Model, step: &Step) -> bool {
        match *step {
            Step::EnterEncode | Step::EnterPublish => !state.gated,
            Step::TryEnterWhileGated => state.gated,
            Step::ExitEncode { i, .. } | Step::Detach { i } => i < state.encodes.len(),
            Step::CompleteToken { j, .. } | Step::DropToken { j, .. } => j < state.tokens.len(),
            Step::CompletePublish { j, .. } | Step::DropPublish { j, .. } => {
                j < state.publishes.len()
            }
            Step::BeginCut => !state.gated && state.cut.is_none(),
            Step::QuiesceEncodes => state
                .cut
                .is_some_and(|c| state.cut_stale() || !state.encodes_through(c.epoch)),
            Step::QuiescePublishes => state.cut.is_some_and(|c| {
                state.cut_stale()
                    || (!state.encodes_through(c.epoch) && !state.publishes_through(c.epoch))
            }),
            Step::ClearLatch | Step::EndCut => state.cut.is_some(),
        }
    }

    fn apply(mut state: Model, step: &Step) -> Model {
        state.verdict = None;
        state.clear = None;
        match *step {
            Step::EnterEncode => state.encodes.push((state.epoch, None)),
            Step::EnterPublish => state.publishes.push(state.epoch),
            Step::TryEnterWhileGated => {}
            Step::ExitEncode { i, panic } => {
                let (epoch, completion) = state.encodes.remove(i);
                if panic {
                    state.report(epoch);
                }
                if let Some(id) = completion {
                    state.completions[id].encode_ended = true;
                    state.settle_if_done(id);
                }
                state.try_reset();
            }
            Step::Detach { i } => {
                let (epoch, completion) = state.encodes[i];
                let id = completion.unwrap_or_else(|| {
                    state.completions.push(Completion {
                        epoch,
                        pending: 0,
                        encode_ended: false,
                        worst: Sev::Ok,
                        settled: false,
                    });
                    state.completions.len() - 1
                });
                state.encodes[i].1 = Some(id);
                state.completions[id].pending += 1;
                state.tokens.push(id);
            }
            Step::CompleteToken { j, outcome } => {
                let id = state.tokens.remove(j);
                state.finish_detach(
                    id,
                    if outcome.is_ok() {
                        Sev::Ok
                    } else {
                        Sev::Failed
                    },
                );
                state.try_reset();
            }
            Step::DropToken { j, panic } => {
                let id = state.tokens.remove(j);
                if panic {
                    let epoch = state.completions[id].epoch;
                    state.report(epoch);
                }
                state.finish_detach(id, if panic { Sev::Panicked } else { Sev::Failed });
                state.try_reset();
            }
            Step::CompletePublish { j, outcome } => {
                let epoch = state.publishes.remove(j);
                state.settle(
                    epoch,
                    if outcome.is_ok() {
                        Sev::Ok
                    } else {
                        Sev::Failed
                    },
                );
                state.try_reset();
            }
            Step::DropPublish { j, panic } => {
                let epoch = state.publishes.remove(j);
                if panic {
                    state.report(epoch);
                }
                state.settle(epoch, if panic { Sev::Panicked } else { Sev::Failed });
                state.try_reset();
            }
            Step::BeginCut => {
                let epoch = state.epoch;
                let resets = epoch == LAST_EPOCH;
                if resets {
                    state.gated = true;
                    state.reset_armed = false;
                } else {
                    state.epoch += 1;
                }
                state.cut = Some(CutModel {
                    epoch,
                    latch: state.latch,
                    era: state.era,
                    resets,
                });
            }
            Step::QuiesceEncodes => {}
            Step::QuiescePublishes => {
                let cut = state.cut.expect("precondition");
                if cut.era != state.era {
                    state.verdict = Some(VerdictModel {
                        stale: true,
                        lowest: None,
                        failed: 0,
                        panicked: 0,
                    });
                } else {
                    let later = state.failures.split_off(&(cut.epoch + 1));
                    let consumed = std::mem::replace(&mut state.failures, later);
                    state.verdict = Some(VerdictModel {
                        stale: false,
                        lowest: consumed.keys().next().copied(),
                        failed: consumed.values().map(|f| f.0).sum(),
                        panicked: consumed.values().map(|f| f.1).sum(),
                    });
                    if cut.resets && state.gated {
                        state.reset_armed = true;
                        state.try_reset();
                    }
                }
            }
            Step::ClearLatch => {
                let captured = state.cut.expect("precondition").latch;
                state.clear = Some(if captured.1 == MAX {
                    ClearModel::Sticky
                } else if captured == state.latch {
                    state.latch = (MAX, 0);
                    ClearModel::Cleared
                } else {
                    ClearModel::Raced(state.latch)
                });
            }
            Step::EndCut => {
                let cut = state.cut.take().expect("precondition");
                if cut.resets && cut.era == state.era && state.gated {
                    state.reset_armed = true;
                    state.try_reset();
                }
            }
        }
        state
    }
}

/// The real barrier and the handles the program holds, in the model's order.
pub(crate) struct Real {
    barrier: Barrier,
    encodes: Vec<BatchGuard>,
    tokens: Vec<DetachToken>,
    publishes: Vec<PublishGuard>,
    cut: Option<Cut>,
    /// Bounds the case: a wait that never ends fails the run. Dropped last.
    _watchdog: crate::support::Watchdog,
}

fn pair(word: LatchWord) -> (u32, u32) {
    (word.epoch(), word.generation())
}

fn end<T>(value: T, panic: bool) {
    if panic {
        drop_in_panic(value)
    } else {
        drop(value)
    }
}

impl StateMachineTest for BarrierModel {
    type SystemUnderTest = Real;
    type Reference = BarrierModel;

    fn init_test(model: &Model) -> Real {
        let latch = LatchWord::new(model.latch.0, model.latch.1);
        Real {
            barrier: Barrier::with_state(model.epoch, latch).unwrap(),
            encodes: Vec::new(),
            tokens: Vec::new(),
            publishes: Vec::new(),
            cut: None,
            _watchdog: crate::support::watchdog(),
        }
    }

    fn apply(mut real: Real, model: &Model, step: Step) -> Real {
        match step {
            Step::EnterEncode => {
                let guard = real.barrier.try_enter_encode().expect("the gate is open");
                assert_eq!(guard.epoch(), model.encodes.last().unwrap().0, "tag");
                real.encodes.push(guard);
            }
            Step::EnterPublish => {
                let guard = real.barrier.try_enter_publish().expect("the gate is open");
                assert_eq!(guard.epoch(), *model.publishes.last().unwrap(), "tag");
                real.publishes.push(guard);
            }
            Step::TryEnterWhileGated => {
                assert!(real.barrier.try_enter_encode().is_err());
                assert!(real.barrier.try_enter_publish().is_err());
            }
            Step::ExitEncode { i, panic } => end(real.encodes.remove(i), panic),
            Step::Detach { i } => {
                let token = real.encodes[i].detach();
                assert_eq!(token.epoch(), real.encodes[i].epoch());
                real.tokens.push(token);
            }
            Step::CompleteToken { j, outcome } => real.tokens.remove(j).complete(outcome),
            Step::DropToken { j, panic } => end(real.tokens.remove(j), panic),
            Step::CompletePublish { j, outcome } => real.publishes.remove(j).complete(outcome),
            Step::DropPublish { j, panic } => end(real.publishes.remove(j), panic),
            Step::BeginCut => {
                let cut = real.barrier.begin_cut();
                let expected = model.cut.unwrap();
                assert_eq!(
                    (cut.epoch(), pair(cut.latch_word()), cut.resets_epoch()),
                    (expected.epoch, expected.latch, expected.resets)
                );
                real.cut = Some(cut);
            }
            Step::QuiesceEncodes => real.barrier.quiesce_encodes(real.cut.as_ref().unwrap()),
            Step::QuiescePublishes => {
                let cut = real.cut.as_ref().unwrap();
                let verdict = real.barrier.quiesce_publishes(cut);
                let expected = model.verdict.unwrap();
                let got = VerdictModel {
                    stale: verdict.is_stale(),
                    lowest: verdict.lowest_failed_epoch(),
                    failed: verdict.failed_publishes(),
                    panicked: verdict.panicked_publishes(),
                };
                assert_eq!(got, expected);
                let all_ok = !expected.stale && expected.lowest.is_none();
                assert_eq!(verdict.all_ok(cut.epoch()), all_ok);
            }
            Step::ClearLatch => {
                let got = match real
                    .barrier
                    .latch()
                    .clear(real.cut.as_ref().unwrap().latch_word())
                {
                    Cleared::Cleared => ClearModel::Cleared,
                    Cleared::Raced { current } => ClearModel::Raced(pair(current)),
                    Cleared::Sticky => ClearModel::Sticky,
                };
                assert_eq!(got, model.clear.unwrap());
            }
            Step::EndCut => drop(real.cut.take()),
        }
        real
    }

    fn check_invariants(real: &Real, model: &Model) {
        let stats = real.barrier.stats();
        assert_eq!(stats.barrier_epoch, model.epoch, "barrier_epoch");
        assert_eq!(stats.reset_in_progress, model.gated, "gate");
        assert_eq!(stats.epoch_resets, model.resets, "resets");
        assert_eq!(
            stats.encodes_outstanding,
            model.encodes.len() as u64,
            "encodes"
        );
        assert_eq!(
            stats.publishes_outstanding,
            model.outstanding_publishes(),
            "publishes"
        );
        let unconsumed: u64 = model.failures.values().map(|&(f, p)| f + p).sum();
        assert_eq!(stats.unconsumed_failures, unconsumed, "failures");
        assert_eq!(stats.publishes_settled, model.settled, "settled");
        assert_eq!(pair(stats.latch), model.latch, "latch");
        assert_eq!(stats.accounting_errors, 0);
        for (id, token) in model.tokens.iter().zip(&real.tokens) {
            let c = &model.completions[*id];
            assert_eq!(token.epoch(), c.epoch);
            assert_eq!(token.completion().pending(), c.pending);
            assert!(!token.completion().is_settled());
        }
    }
}

prop_state_machine! {
    #![proptest_config(ProptestConfig { cases: 384, ..ProptestConfig::default() })]

    /// The barrier matches a plain sequential model over random programs: tags (epoch split),
    /// outstanding counts, when quiesce may return, verdicts scoped by epoch and consumed once,
    /// the shared completion settling once with the worst outcome, latch reports by panicking
    /// guards and clears from captured words, the epoch reset at `u32::MAX - 1` (by quiesce or
    /// by a dropped cut) with the gate refusing new work meanwhile, and sticky generations.
    /// Reasoned mutation (not run as a mutant): drop the failure re-tagging in `try_reset`, or let
    /// the fast-path exit ignore the gate bit, and a shrunk program shows the step where stats
    /// diverge.
    #[test]
    fn sm_barrier_cuts_match_model(sequential 1..48 => BarrierModel);
}
