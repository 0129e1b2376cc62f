//! The latch against a plain sequential reference model: random report / capture / clear
//! programs, starting anywhere (including a generation near the sticky limit, through
//! `EpochLatch::with_word`).

use proptest::prelude::*;
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest, prop_state_machine};

use ourios_barrier::{Cleared, EpochLatch, LatchWord, Reported};

/// The model: a plain (epoch, generation) pair and the pairs captured so far.
#[derive(Debug, Clone)]
pub(crate) struct Model {
    word: (u32, u32),
    captured: Vec<(u32, u32)>,
    /// What the last step's operation must have returned.
    expect: Expect,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Nothing,
    Refused,
    Recorded((u32, u32)),
    Sticky((u32, u32)),
    Cleared,
    Raced((u32, u32)),
    ClearRefusedSticky,
}

#[derive(Debug, Clone)]
pub(crate) enum Step {
    Report(u32),
    Capture,
    /// Clear from the captured word at this index (modulo the number captured).
    ClearCaptured(usize),
    /// Clear from an arbitrary word the latch may or may not hold.
    ClearFrom((u32, u32)),
}

const MAX: u32 = u32::MAX;

fn epoch() -> impl Strategy<Value = u32> {
    prop_oneof![0..4_u32, Just(MAX - 2), Just(MAX - 1), Just(MAX)]
}

fn generation() -> impl Strategy<Value = u32> {
    prop_oneof![0..3_u32, (MAX - 3)..=MAX]
}

pub(crate) struct LatchModel;

impl ReferenceStateMachine for LatchModel {
    type State = Model;
    type Transition = Step;

    fn init_state() -> BoxedStrategy<Model> {
        prop_oneof![Just((MAX, 0)), (epoch(), generation())]
            .prop_map(|word| Model {
                word,
                captured: Vec::new(),
                expect: Expect::Nothing,
            })
            .boxed()
    }

    fn transitions(state: &Model) -> BoxedStrategy<Step> {
        let mut steps = vec![
            epoch().prop_map(Step::Report).boxed(),
            Just(Step::Capture).boxed(),
            (epoch(), generation()).prop_map(Step::ClearFrom).boxed(),
        ];
        if !state.captured.is_empty() {
            steps.push(any::<usize>().prop_map(Step::ClearCaptured).boxed());
            steps.push(any::<usize>().prop_map(Step::ClearCaptured).boxed());
        }
        proptest::strategy::Union::new(steps).boxed()
    }

    fn preconditions(state: &Model, step: &Step) -> bool {
        !matches!(step, Step::ClearCaptured(_)) || !state.captured.is_empty()
    }

    fn apply(mut state: Model, step: &Step) -> Model {
        state.expect = match *step {
            Step::Report(e) if e == MAX => Expect::Refused,
            Step::Report(e) => {
                let (epoch, generation) = state.word;
                let generation = if generation >= MAX - 1 {
                    MAX
                } else {
                    generation + 1
                };
                state.word = (epoch.min(e), generation);
                if generation == MAX {
                    Expect::Sticky(state.word)
                } else {
                    Expect::Recorded(state.word)
                }
            }
            Step::Capture => {
                state.captured.push(state.word);
                Expect::Nothing
            }
            Step::ClearCaptured(i) => {
                let from = state.captured[i % state.captured.len()];
                model_clear(&mut state.word, from)
            }
            Step::ClearFrom(from) => model_clear(&mut state.word, from),
        };
        state
    }
}

fn model_clear(word: &mut (u32, u32), from: (u32, u32)) -> Expect {
    if from.1 == MAX {
        Expect::ClearRefusedSticky
    } else if *word == from {
        *word = (MAX, 0);
        Expect::Cleared
    } else {
        Expect::Raced(*word)
    }
}

fn pair(word: LatchWord) -> (u32, u32) {
    (word.epoch(), word.generation())
}

/// The real latch and the words it returned from captures.
pub(crate) struct Real {
    latch: EpochLatch,
    captured: Vec<LatchWord>,
    /// Bounds the case: a CAS loop that never ends fails the run.
    _watchdog: crate::support::Watchdog,
}

impl StateMachineTest for LatchModel {
    type SystemUnderTest = Real;
    type Reference = LatchModel;

    fn init_test(model: &Model) -> Real {
        Real {
            latch: EpochLatch::with_word(LatchWord::new(model.word.0, model.word.1)),
            captured: Vec::new(),
            _watchdog: crate::support::watchdog(),
        }
    }

    fn apply(mut real: Real, model: &Model, step: Step) -> Real {
        let got = match step {
            Step::Report(e) => match real.latch.report(e) {
                Reported::Refused => Expect::Refused,
                Reported::Recorded(w) => Expect::Recorded(pair(w)),
                Reported::Sticky(w) => Expect::Sticky(pair(w)),
            },
            Step::Capture => {
                real.captured.push(real.latch.capture());
                Expect::Nothing
            }
            Step::ClearCaptured(i) => {
                clear_result(real.latch.clear(real.captured[i % real.captured.len()]))
            }
            Step::ClearFrom((e, g)) => clear_result(real.latch.clear(LatchWord::new(e, g))),
        };
        assert_eq!(got, model.expect, "{step:?}");
        real
    }

    fn check_invariants(real: &Real, model: &Model) {
        let word = real.latch.capture();
        assert_eq!(pair(word), model.word);
        assert_eq!(word.is_clear(), model.word == (MAX, 0));
        assert_eq!(word.is_sticky(), model.word.1 == MAX);
        assert_eq!(
            real.captured.iter().copied().map(pair).collect::<Vec<_>>(),
            model.captured
        );
    }
}

fn clear_result(cleared: Cleared) -> Expect {
    match cleared {
        Cleared::Cleared => Expect::Cleared,
        Cleared::Raced { current } => Expect::Raced(pair(current)),
        Cleared::Sticky => Expect::ClearRefusedSticky,
    }
}

prop_state_machine! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// The latch matches a plain sequential model over random report / capture / clear
    /// programs from any starting word, including generations one to three reports below the
    /// sticky limit (M.6) and epochs next to the reserved `u32::MAX` (refused).
    /// Reasoned mutation (not run as a mutant): let the generation wrap (`wrapping_add`) in
    /// `after_report`, or clear from a sticky capture, and a shrunk counterexample names the step.
    #[test]
    fn sm_latch_matches_model(sequential 1..40 => LatchModel);
}
