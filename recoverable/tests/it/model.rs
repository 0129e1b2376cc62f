//! Mechanism leg M.1: `RecoverableBatch` against a reference model, under random consumer
//! programs with a panic injected at any step.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use proptest::sample::select;
use proptest::strategy::Union;
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest, prop_state_machine};

use ourios_recoverable::{
    BatchReport, ItemState, Lease, RecoverableBatch, RequeueCause, RequeueTarget, Settlement,
};

use crate::support::{inject, is_injected, lock, quiet_injected_panics};

/// One step of a consumer program. Batches are numbered in creation order (0 is the initial
/// batch, each split adds one); slots are indices within a batch.
#[derive(Debug, Clone)]
enum Step {
    Begin {
        batch: usize,
        slot: usize,
    },
    BeginNext {
        batch: usize,
    },
    Settle {
        batch: usize,
        slot: usize,
        how: Settlement,
    },
    /// Transient failure of an in-flight put.
    Requeue {
        batch: usize,
        slot: usize,
    },
    RequeuePending {
        batch: usize,
    },
    /// Split off the pending items whose id has its bit set in `mask`.
    SplitOff {
        batch: usize,
        mask: u16,
    },
    /// A panic unwinds through a frame owning this batch (`None`: owning every live batch,
    /// dropped in batch order) and the leases on it.
    Panic {
        batch: Option<usize>,
    },
    Finish {
        batch: usize,
    },
    Noop,
}

/// One requeue call as the target saw it.
type Call = (Vec<u32>, RequeueCause);

#[derive(Debug, Clone)]
struct Model {
    items: usize,
    /// Per batch (None once dropped or finished): each slot's item id and state.
    batches: Vec<Option<Vec<(u32, ItemState)>>>,
    /// Items settled out, in settle order.
    settled: Vec<(u32, Settlement)>,
    /// Every requeue call, in order.
    calls: Vec<Call>,
    /// The report the last `Finish` must return.
    last_report: Option<BatchReport>,
}

impl Model {
    fn live(&self) -> Vec<usize> {
        (0..self.batches.len())
            .filter(|&b| self.batches[b].is_some())
            .collect()
    }

    fn slots_in(&self, state: ItemState) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for (b, slots) in self.batches.iter().enumerate() {
            for (s, (_, st)) in slots.iter().flatten().enumerate() {
                if *st == state {
                    out.push((b, s));
                }
            }
        }
        out
    }

    fn state(&self, batch: usize, slot: usize) -> Option<ItemState> {
        Some(self.batches.get(batch)?.as_ref()?.get(slot)?.1)
    }

    /// What `Drop` (and `finish`) does to a batch: one call with every Pending and InFlight item.
    fn drop_batch(&mut self, batch: usize) -> BatchReport {
        let Some(slots) = self.batches[batch].take() else {
            return BatchReport::default();
        };
        let mut report = BatchReport::default();
        let mut items = Vec::new();
        for (id, st) in &slots {
            match st {
                ItemState::Pending => items.push(*id),
                ItemState::InFlight => {
                    items.push(*id);
                    report.ambiguous += 1;
                }
                ItemState::Settled(Settlement::Durable) => report.durable += 1,
                ItemState::Settled(Settlement::Dropped) => report.dropped += 1,
                ItemState::Requeued => report.requeued += 1,
                ItemState::SplitOff => report.split_off += 1,
            }
        }
        report.requeued += items.len();
        if !items.is_empty() {
            self.calls.push((
                items,
                RequeueCause::Unwound {
                    ambiguous: report.ambiguous,
                },
            ));
        }
        report
    }
}

fn mask_matches(mask: u16, id: u32) -> bool {
    mask & (1 << id) != 0
}

struct BatchModel;

impl ReferenceStateMachine for BatchModel {
    type State = Model;
    type Transition = Step;

    fn init_state() -> BoxedStrategy<Model> {
        (0usize..=8)
            .prop_map(|items| Model {
                items,
                batches: vec![Some(
                    (0..items as u32)
                        .map(|id| (id, ItemState::Pending))
                        .collect(),
                )],
                settled: Vec::new(),
                calls: Vec::new(),
                last_report: None,
            })
            .boxed()
    }

    fn transitions(state: &Model) -> BoxedStrategy<Step> {
        let live = state.live();
        if live.is_empty() {
            return Just(Step::Noop).boxed();
        }
        let mut options: Vec<BoxedStrategy<Step>> = vec![
            select(live.clone())
                .prop_map(|batch| Step::BeginNext { batch })
                .boxed(),
            select(live.clone())
                .prop_map(|batch| Step::RequeuePending { batch })
                .boxed(),
            (select(live.clone()), any::<u16>())
                .prop_map(|(batch, mask)| Step::SplitOff { batch, mask })
                .boxed(),
            select(live.clone())
                .prop_map(|batch| Step::Finish { batch })
                .boxed(),
            proptest::option::of(select(live.clone()))
                .prop_map(|batch| Step::Panic { batch })
                .boxed(),
        ];
        let pending = state.slots_in(ItemState::Pending);
        if !pending.is_empty() {
            let s = select(pending).prop_map(|(batch, slot)| Step::Begin { batch, slot });
            // Weighted up so programs reach InFlight items often.
            options.push(s.clone().boxed());
            options.push(s.boxed());
        }
        let in_flight = state.slots_in(ItemState::InFlight);
        if !in_flight.is_empty() {
            let how = prop_oneof![Just(Settlement::Durable), Just(Settlement::Dropped)];
            let s = (select(in_flight.clone()), how)
                .prop_map(|((batch, slot), how)| Step::Settle { batch, slot, how });
            options.push(s.clone().boxed());
            options.push(s.boxed());
            options.push(
                select(in_flight)
                    .prop_map(|(batch, slot)| Step::Requeue { batch, slot })
                    .boxed(),
            );
        }
        Union::new(options).boxed()
    }

    fn preconditions(state: &Model, step: &Step) -> bool {
        let live = |b: usize| state.batches.get(b).is_some_and(Option::is_some);
        match *step {
            Step::Begin { batch, slot } => state.state(batch, slot) == Some(ItemState::Pending),
            Step::Settle { batch, slot, .. } | Step::Requeue { batch, slot } => {
                state.state(batch, slot) == Some(ItemState::InFlight)
            }
            Step::BeginNext { batch }
            | Step::RequeuePending { batch }
            | Step::SplitOff { batch, .. }
            | Step::Finish { batch } => live(batch),
            Step::Panic { batch } => batch.is_none_or(live),
            Step::Noop => true,
        }
    }

    fn apply(mut state: Model, step: &Step) -> Model {
        state.last_report = None;
        match *step {
            Step::Begin { batch, slot } => {
                set(&mut state, batch, slot, ItemState::InFlight);
            }
            Step::BeginNext { batch } => {
                let first = state.batches[batch]
                    .as_ref()
                    .and_then(|slots| slots.iter().position(|(_, st)| *st == ItemState::Pending));
                if let Some(slot) = first {
                    set(&mut state, batch, slot, ItemState::InFlight);
                }
            }
            Step::Settle { batch, slot, how } => {
                let id = set(&mut state, batch, slot, ItemState::Settled(how));
                state.settled.push((id, how));
            }
            Step::Requeue { batch, slot } => {
                let id = set(&mut state, batch, slot, ItemState::Requeued);
                state.calls.push((vec![id], RequeueCause::Refused));
            }
            Step::RequeuePending { batch } => {
                let mut items = Vec::new();
                for (id, st) in state.batches[batch].iter_mut().flatten() {
                    if *st == ItemState::Pending {
                        *st = ItemState::Requeued;
                        items.push(*id);
                    }
                }
                if !items.is_empty() {
                    state.calls.push((items, RequeueCause::Refused));
                }
            }
            Step::SplitOff { batch, mask } => {
                let mut moved = Vec::new();
                for (id, st) in state.batches[batch].iter_mut().flatten() {
                    if *st == ItemState::Pending && mask_matches(mask, *id) {
                        *st = ItemState::SplitOff;
                        moved.push((*id, ItemState::Pending));
                    }
                }
                state.batches.push(Some(moved));
            }
            Step::Panic { batch: Some(batch) } => {
                let _ = state.drop_batch(batch);
            }
            Step::Panic { batch: None } => {
                for batch in state.live() {
                    let _ = state.drop_batch(batch);
                }
            }
            Step::Finish { batch } => state.last_report = Some(state.drop_batch(batch)),
            Step::Noop => {}
        }
        state
    }
}

fn set(state: &mut Model, batch: usize, slot: usize, to: ItemState) -> u32 {
    let entry = &mut state.batches[batch]
        .as_mut()
        .expect("precondition: live batch")[slot];
    entry.1 = to;
    entry.0
}

/// The target of the system under test: records every call, never panics.
#[derive(Debug, Default)]
struct Recorder(Mutex<Vec<Call>>);

impl RequeueTarget<u32> for Recorder {
    fn requeue(&self, items: Vec<u32>, cause: RequeueCause) {
        lock(&self.0).push((items, cause));
    }
}

struct Sut {
    target: Arc<Recorder>,
    batches: Vec<Option<RecoverableBatch<u32>>>,
    leases: HashMap<(usize, usize), Lease>,
    settled: Vec<(u32, Settlement)>,
}

impl Sut {
    /// Move `batches` (and the leases on them) into a frame that panics, under `catch_unwind`.
    fn panic_with(&mut self, batches: Vec<usize>) {
        let owned: Vec<RecoverableBatch<u32>> = batches
            .iter()
            .filter_map(|&b| self.batches[b].take())
            .collect();
        let leases: Vec<Lease> = batches
            .iter()
            .flat_map(|&b| {
                let keys: Vec<_> = self.leases.keys().filter(|k| k.0 == b).copied().collect();
                keys.into_iter()
                    .filter_map(|k| self.leases.remove(&k))
                    .collect::<Vec<_>>()
            })
            .collect();
        let outcome = catch_unwind(AssertUnwindSafe(move || {
            let _leases = leases;
            let _owned = owned;
            inject("consumer step");
        }));
        assert!(
            outcome.is_err_and(|p| is_injected(p.as_ref())),
            "the injected panic is the one caught"
        );
    }
}

struct BatchTest;

impl StateMachineTest for BatchTest {
    type SystemUnderTest = Sut;
    type Reference = BatchModel;

    fn init_test(model: &Model) -> Sut {
        quiet_injected_panics();
        let target = Arc::new(Recorder::default());
        let batch = RecoverableBatch::new(
            (0..model.items as u32).collect(),
            target.clone() as Arc<dyn RequeueTarget<u32>>,
        );
        Sut {
            target,
            batches: vec![Some(batch)],
            leases: HashMap::new(),
            settled: Vec::new(),
        }
    }

    fn apply(mut sut: Sut, model: &Model, step: Step) -> Sut {
        fn live(sut: &mut Sut, b: usize) -> &mut RecoverableBatch<u32> {
            sut.batches[b].as_mut().expect("precondition: live batch")
        }
        match step {
            Step::Begin { batch, slot } => {
                let lease = live(&mut sut, batch).begin(slot);
                assert_eq!(lease.index(), slot);
                sut.leases.insert((batch, slot), lease);
            }
            Step::BeginNext { batch } => {
                if let Some(lease) = live(&mut sut, batch).begin_next() {
                    assert_eq!(model.state(batch, lease.index()), Some(ItemState::InFlight));
                    sut.leases.insert((batch, lease.index()), lease);
                } else {
                    assert!(
                        model
                            .slots_in(ItemState::Pending)
                            .iter()
                            .all(|&(b, _)| b != batch)
                    );
                }
            }
            Step::Settle { batch, slot, how } => {
                let lease = sut
                    .leases
                    .remove(&(batch, slot))
                    .expect("lease of an in-flight item");
                let id = live(&mut sut, batch).settle(lease, how);
                sut.settled.push((id, how));
            }
            Step::Requeue { batch, slot } => {
                let lease = sut
                    .leases
                    .remove(&(batch, slot))
                    .expect("lease of an in-flight item");
                live(&mut sut, batch).requeue(lease);
            }
            Step::RequeuePending { batch } => {
                let expected = model.calls.last().map_or(0, |c| c.0.len());
                let n = live(&mut sut, batch).requeue_pending();
                assert!(n == 0 || n == expected);
            }
            Step::SplitOff { batch, mask } => {
                let new = live(&mut sut, batch).split_off_pending(|id| mask_matches(mask, *id));
                sut.batches.push(Some(new));
            }
            Step::Panic { batch } => {
                let which = match batch {
                    Some(b) => vec![b],
                    None => (0..sut.batches.len()).collect(),
                };
                sut.panic_with(which);
            }
            Step::Finish { batch } => {
                let report = sut.batches[batch]
                    .take()
                    .expect("precondition: live batch")
                    .finish();
                assert_eq!(Some(report), model.last_report, "finish report");
                sut.leases.retain(|k, _| k.0 != batch);
            }
            Step::Noop => {}
        }
        sut
    }

    fn check_invariants(sut: &Sut, model: &Model) {
        assert_eq!(
            *lock(&sut.target.0),
            model.calls,
            "requeue calls (items, order, cause, ambiguous)"
        );
        assert_eq!(sut.settled, model.settled, "settled-out items");
        assert_eq!(sut.batches.len(), model.batches.len());
        for (b, (real, modelled)) in sut.batches.iter().zip(&model.batches).enumerate() {
            assert_eq!(real.is_some(), modelled.is_some(), "batch {b} liveness");
            let (Some(real), Some(slots)) = (real, modelled) else {
                continue;
            };
            assert_eq!(real.len(), slots.len(), "batch {b} len");
            for (s, (id, st)) in slots.iter().enumerate() {
                assert_eq!(real.state(s), *st, "batch {b} slot {s} state");
                let held = matches!(st, ItemState::Pending | ItemState::InFlight);
                assert_eq!(real.get(s), held.then_some(id), "batch {b} slot {s} item");
            }
            let count = |want: ItemState| slots.iter().filter(|(_, st)| *st == want).count();
            assert_eq!(
                real.pending(),
                count(ItemState::Pending),
                "batch {b} pending"
            );
            assert_eq!(
                real.in_flight(),
                count(ItemState::InFlight),
                "batch {b} in flight"
            );
        }
        // Every item is in exactly one place: settled out, requeued, or held (Pending/InFlight)
        // by exactly one live batch.
        let mut seen = vec![0usize; model.items];
        for (id, _) in &sut.settled {
            seen[*id as usize] += 1;
        }
        for (items, _) in lock(&sut.target.0).iter() {
            for id in items {
                seen[*id as usize] += 1;
            }
        }
        for batch in sut.batches.iter().flatten() {
            for s in 0..batch.len() {
                if let Some(id) = batch.get(s) {
                    seen[*id as usize] += 1;
                }
            }
        }
        assert!(
            seen.iter().all(|&n| n == 1),
            "each item in exactly one place: {seen:?}"
        );
    }

    fn teardown(mut sut: Sut, mut model: Model) {
        // The program ends: the remaining handles drop normally, in batch order.
        sut.leases.clear();
        for batch in &mut sut.batches {
            drop(batch.take());
        }
        for batch in model.live() {
            let _ = model.drop_batch(batch);
        }
        let calls = lock(&sut.target.0).clone();
        assert_eq!(calls, model.calls, "requeue calls after the final drops");
        // Every item ends exactly once in {settled out, requeued}; none both; none twice.
        let mut settled: Vec<u32> = sut.settled.iter().map(|(id, _)| *id).collect();
        let mut requeued: Vec<u32> = calls.iter().flat_map(|(items, _)| items.clone()).collect();
        let mut all: Vec<u32> = settled.iter().chain(&requeued).copied().collect();
        all.sort_unstable();
        assert_eq!(
            all,
            (0..model.items as u32).collect::<Vec<_>>(),
            "each item exactly once"
        );
        settled.sort_unstable();
        requeued.sort_unstable();
        assert!(
            settled.iter().all(|id| requeued.binary_search(id).is_err()),
            "settled and requeued"
        );
    }
}

prop_state_machine! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]
    /// Random consumer programs over 0-8 items (begin, begin_next, settle durable, settle
    /// dropped, transient requeue, requeue_pending, split_off_pending, finish, and a panic
    /// injected at any step with one or all batches on the unwinding stack) match the reference
    /// model after every step: the same requeue calls with the same items, order and cause, and
    /// `ambiguous` equal to the items `InFlight` at the panic; every item in exactly one place;
    /// at the end every item settled out or requeued, exactly once, never both.
    /// Reasoned mutation (not run as a mutant): in `RecoverableBatch::requeue_unsettled`, replace
    /// `let ambiguous = self.in_flight;` with `let ambiguous = 0;` (or select only
    /// `Slot::Pending(_)` there).
    #[test]
    fn sm_recoverable_batch_matches_model(sequential 1..40 => BatchTest);
}
