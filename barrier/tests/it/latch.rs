//! The latch rules of RFC 0054 §9.6, one at a time, single-threaded (the concurrent legs are
//! the loom models).

use ourios_barrier::{
    Barrier, CLEAR, CLEAR_EPOCH, Cleared, EPOCH_MASK, EPOCH_SHIFT, EpochLatch, GENERATION_MASK,
    LAST_EPOCH, LatchWord, Reported, STICKY_GENERATION,
};

/// The packed word: epoch in the high half, generation in the low half, the named constants
/// agree with each other, and CLEAR is epoch `u32::MAX`, generation 0 (not a zero word).
/// Reasoned mutation (not run as a mutant): swap the halves in `LatchWord::new` (or set
/// `EPOCH_SHIFT` to 0) and this fails.
#[test]
fn latch_word_packs_epoch_high_and_generation_low() {
    let _watchdog = crate::support::watchdog();
    let word = LatchWord::new(0x1234_5678, 0x9abc_def0);
    assert_eq!(word.bits(), 0x1234_5678_9abc_def0);
    assert_eq!(word.epoch(), 0x1234_5678);
    assert_eq!(word.generation(), 0x9abc_def0);
    assert_eq!((word.bits() & EPOCH_MASK) >> EPOCH_SHIFT, 0x1234_5678);
    assert_eq!(word.bits() & GENERATION_MASK, 0x9abc_def0);
    assert_eq!(EPOCH_MASK | GENERATION_MASK, u64::MAX);
    assert_eq!(CLEAR.bits(), 0xFFFF_FFFF_0000_0000);
    assert!(CLEAR.is_clear());
    assert_eq!(CLEAR.failed_epoch(), None);
    assert!(
        !LatchWord::from_bits(0).is_clear(),
        "a zero word reads as epoch 0 failed"
    );
    assert_eq!(LatchWord::from_bits(0).failed_epoch(), Some(0));
    assert_eq!(LAST_EPOCH, CLEAR_EPOCH - 1);
}

/// C.5, one-word report: a report lowers the epoch half to the minimum and increments the
/// generation half, in the same word, whatever order the epochs arrive in.
/// Reasoned mutation (not run as a mutant): replace the `min` in `LatchWord::after_report` with the
/// reported epoch and the second assertion fails (epoch 7 would overwrite 3).
#[test]
fn rfc0054_c5_report_lowers_epoch_to_min_and_increments_generation() {
    let _watchdog = crate::support::watchdog();
    let latch = EpochLatch::new();
    assert_eq!(latch.report(3), Reported::Recorded(LatchWord::new(3, 1)));
    assert_eq!(latch.report(7), Reported::Recorded(LatchWord::new(3, 2)));
    assert_eq!(latch.report(1), Reported::Recorded(LatchWord::new(1, 3)));
    assert_eq!(latch.capture(), LatchWord::new(1, 3));
    assert_eq!(latch.capture().failed_epoch(), Some(1));
}

/// Epoch `u32::MAX` is reserved for CLEAR: reporting it is refused and changes nothing, so no
/// real report can produce a word a clear would confuse with CLEAR.
/// Reasoned mutation (not run as a mutant): delete the `epoch == CLEAR_EPOCH` early return in
/// `report` and the word becomes (MAX, 1).
#[test]
fn latch_report_of_reserved_epoch_is_refused() {
    let _watchdog = crate::support::watchdog();
    let latch = EpochLatch::new();
    assert_eq!(latch.report(CLEAR_EPOCH), Reported::Refused);
    assert_eq!(latch.capture(), CLEAR);
    let _ = latch.report(LAST_EPOCH);
    assert_eq!(latch.capture(), LatchWord::new(LAST_EPOCH, 1));
}

/// RFC0054.4 / C.5: the latch clears only from the exact word the cut captured. A report at
/// the same epoch between capture and clear leaves the epoch half unchanged but bumps the
/// generation, so the clear fails and the failure survives; a fresh capture then clears.
/// Reasoned mutation (not run as a mutant): make `clear` compare only the epoch half (e.g. CAS from
/// `current` whenever `current.epoch() == captured.epoch()`) and the `Raced` assertion fails.
#[test]
fn rfc0054_4_latch_clears_only_from_captured_word() {
    let _watchdog = crate::support::watchdog();
    let latch = EpochLatch::new();
    let _ = latch.report(4);
    let captured = latch.capture();
    let _ = latch.report(4);
    assert_eq!(
        latch.clear(captured),
        Cleared::Raced {
            current: LatchWord::new(4, 2)
        }
    );
    assert_eq!(
        latch.capture(),
        LatchWord::new(4, 2),
        "the failure survives the failed clear"
    );
    let again = latch.capture();
    assert_eq!(latch.clear(again), Cleared::Cleared);
    assert_eq!(latch.capture(), CLEAR);
}

/// C.5: a report at a lower or a higher epoch between capture and clear also makes the clear
/// fail; a cut that captured CLEAR cannot erase a report that came after its capture either.
/// Reasoned mutation (not run as a mutant): make `clear` store CLEAR unconditionally and every
/// `Raced` assertion fails.
#[test]
fn rfc0054_c5_any_report_between_capture_and_clear_makes_the_clear_fail() {
    let _watchdog = crate::support::watchdog();
    for (first, between) in [(5, 2), (5, 9), (5, 5)] {
        let latch = EpochLatch::new();
        let _ = latch.report(first);
        let captured = latch.capture();
        let _ = latch.report(between);
        assert!(
            matches!(latch.clear(captured), Cleared::Raced { .. }),
            "report {between} after capturing {captured:?} must survive"
        );
        assert!(!latch.capture().is_clear());
    }
    let latch = EpochLatch::new();
    let captured = latch.capture();
    assert!(captured.is_clear());
    let _ = latch.report(0);
    assert_eq!(
        latch.clear(captured),
        Cleared::Raced {
            current: LatchWord::new(0, 1)
        }
    );
    // A clear from a clear capture with nothing reported since is a no-op success.
    let latch = EpochLatch::new();
    assert_eq!(latch.clear(latch.capture()), Cleared::Cleared);
}

/// M.6: the generation is sticky at `u32::MAX`. Starting just below the limit, reports climb
/// to `u32::MAX` and stay there (the epoch still lowers), no clear succeeds from a sticky
/// word — not even from the exact captured word — and the state is visible for export.
/// Reasoned mutation (not run as a mutant): replace `saturating_add(1)` with `wrapping_add(1)` in
/// `after_report` and the generation wraps to 0 (a word a stale capture could match); delete the
/// `is_sticky` check in `clear` and the `Cleared::Sticky` assertion fails.
#[test]
fn rfc0054_m6_sticky_generation_refuses_every_clear() {
    let _watchdog = crate::support::watchdog();
    let latch = EpochLatch::with_word(LatchWord::new(9, STICKY_GENERATION - 2));
    assert_eq!(
        latch.report(9),
        Reported::Recorded(LatchWord::new(9, STICKY_GENERATION - 1))
    );
    assert_eq!(
        latch.report(8),
        Reported::Sticky(LatchWord::new(8, STICKY_GENERATION))
    );
    assert_eq!(
        latch.report(3),
        Reported::Sticky(LatchWord::new(3, STICKY_GENERATION))
    );
    let captured = latch.capture();
    assert!(captured.is_sticky());
    assert_eq!(latch.clear(captured), Cleared::Sticky);
    assert_eq!(latch.capture(), captured, "a refused clear changes nothing");
    // A word that is only about to become sticky still clears.
    let latch = EpochLatch::with_word(LatchWord::new(1, STICKY_GENERATION - 1));
    assert!(!latch.capture().is_sticky());
    assert_eq!(latch.clear(latch.capture()), Cleared::Cleared);
    // The barrier exports it too.
    let barrier = Barrier::with_state(0, LatchWord::new(2, STICKY_GENERATION)).unwrap();
    assert!(barrier.stats().latch.is_sticky());
}

/// RFC0054.4-restart: the latch is not persisted: a new barrier (the restart that deploys
/// this) starts with a clear latch whatever the previous process's latch held.
/// Reasoned mutation (not run as a mutant): start `Barrier::new` from any non-CLEAR word and this
/// fails.
#[test]
fn rfc0054_4_restart_latch_is_clear_on_a_new_barrier() {
    let _watchdog = crate::support::watchdog();
    let before = Barrier::new();
    let _ = before.latch().report(0);
    assert!(!before.latch().capture().is_clear());
    drop(before);
    let after = Barrier::new();
    assert!(after.latch().capture().is_clear());
    assert!(EpochLatch::new().capture().is_clear());
    assert!(EpochLatch::default().capture().is_clear());
}
