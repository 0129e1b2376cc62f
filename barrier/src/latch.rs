//! The packed epoch latch (RFC 0054 §9.6): one `AtomicU64` holding the lowest failed epoch in
//! its high 32 bits and a generation in its low 32 bits, so report, capture and clear are each a
//! single-word operation and a capture is a coherent pair by construction.

use std::fmt;

use crate::sync::{AtomicU64, Ordering};

/// Left shift of the epoch half inside a [`LatchWord`].
pub const EPOCH_SHIFT: u32 = 32;
/// Mask of the epoch half inside a [`LatchWord`] (after the shift, it is a plain `u32`).
pub const EPOCH_MASK: u64 = 0xFFFF_FFFF << EPOCH_SHIFT;
/// Mask of the generation half inside a [`LatchWord`].
pub const GENERATION_MASK: u64 = 0x0000_0000_FFFF_FFFF;
/// The epoch half of the clear word. Reserved: no cut ever has this epoch and
/// [`EpochLatch::report`] refuses it, so a CAS to [`CLEAR`] is unambiguous.
pub const CLEAR_EPOCH: u32 = u32::MAX;
/// The generation half of the clear word.
pub const CLEAR_GENERATION: u32 = 0;
/// The generation at which the latch sticks: a report never carries the generation past it
/// (so it cannot wrap back to a value a captured word holds), and no clear succeeds from it.
/// Only a restart (a new latch) leaves it.
pub const STICKY_GENERATION: u32 = u32::MAX;
/// The highest epoch a cut can have. The cut at this epoch resets `barrier_epoch` to 0 instead
/// of advancing it into the reserved [`CLEAR_EPOCH`].
pub const LAST_EPOCH: u32 = u32::MAX - 1;
/// The clear word: epoch `u32::MAX`, generation 0 (never a zero word, which would read as
/// "epoch 0 failed").
pub const CLEAR: LatchWord = LatchWord::new(CLEAR_EPOCH, CLEAR_GENERATION);

/// One loaded value of an [`EpochLatch`]: the lowest failed epoch and the generation, as one
/// coherent pair.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct LatchWord(u64);

impl LatchWord {
    /// Packs `epoch` into the high half and `generation` into the low half.
    #[must_use]
    pub const fn new(epoch: u32, generation: u32) -> Self {
        Self(((epoch as u64) << EPOCH_SHIFT) | generation as u64)
    }

    /// The word with exactly these bits.
    #[must_use]
    pub const fn from_bits(bits: u64) -> Self {
        Self(bits)
    }

    /// The packed bits.
    #[must_use]
    pub const fn bits(self) -> u64 {
        self.0
    }

    /// The epoch half: the lowest epoch reported since the last clear, or [`CLEAR_EPOCH`].
    #[must_use]
    pub const fn epoch(self) -> u32 {
        ((self.0 & EPOCH_MASK) >> EPOCH_SHIFT) as u32
    }

    /// The generation half: how many reports since the last clear, sticky at
    /// [`STICKY_GENERATION`].
    #[must_use]
    pub const fn generation(self) -> u32 {
        (self.0 & GENERATION_MASK) as u32
    }

    /// True for exactly the [`CLEAR`] word: no failure is outstanding.
    #[must_use]
    pub const fn is_clear(self) -> bool {
        self.0 == CLEAR.0
    }

    /// True when the generation has reached [`STICKY_GENERATION`]: no clear can succeed from
    /// this word, and only a restart resets the latch. Export it.
    #[must_use]
    pub const fn is_sticky(self) -> bool {
        self.generation() == STICKY_GENERATION
    }

    /// The lowest failed epoch, or `None` when the word is clear (RFC 0052's `failed_epoch`).
    #[must_use]
    pub const fn failed_epoch(self) -> Option<u32> {
        if self.is_clear() {
            None
        } else {
            Some(self.epoch())
        }
    }

    /// The word after one report of `epoch`: the epoch half lowered to the minimum, the
    /// generation half incremented, stopping at [`STICKY_GENERATION`].
    fn after_report(self, epoch: u32) -> Self {
        Self::new(epoch.min(self.epoch()), self.generation().saturating_add(1))
    }
}

impl fmt::Debug for LatchWord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_clear() {
            return f.write_str("LatchWord(clear)");
        }
        f.debug_struct("LatchWord")
            .field("epoch", &self.epoch())
            .field("generation", &self.generation())
            .field("sticky", &self.is_sticky())
            .finish()
    }
}

/// What a [`EpochLatch::report`] did.
#[must_use = "a refused report recorded nothing; a sticky latch needs a restart"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reported {
    /// The report is in the word returned (the word right after this report).
    Recorded(LatchWord),
    /// The report is in the word returned, and its generation is now sticky: no clear will
    /// succeed until a restart.
    Sticky(LatchWord),
    /// The epoch was [`CLEAR_EPOCH`], which is reserved; nothing changed.
    Refused,
}

/// What an [`EpochLatch::clear`] did.
#[must_use = "a clear that raced or found a sticky word left the failure in place"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cleared {
    /// The latch held exactly the captured word and now holds [`CLEAR`] (also when the
    /// captured word was already clear and nothing was reported since).
    Cleared,
    /// A report changed the word since the capture; the latch keeps `current` and the failure
    /// survives for the next cut.
    Raced {
        /// The word the latch held when the clear compared.
        current: LatchWord,
    },
    /// The captured word's generation is sticky; no clear may succeed from it.
    Sticky,
}

/// The epoch latch: records that a guard was dropped by a panic, and at which lowest epoch,
/// until a cut that drained the requeued records clears it against the exact word it captured.
pub struct EpochLatch {
    word: AtomicU64,
}

impl EpochLatch {
    /// A clear latch. The latch is never persisted, so a restart always starts here.
    #[must_use]
    pub fn new() -> Self {
        Self::with_word(CLEAR)
    }

    /// A latch holding `word`, e.g. a generation just below [`STICKY_GENERATION`] so tests can
    /// reach the sticky state without four billion reports.
    #[must_use]
    pub fn with_word(word: LatchWord) -> Self {
        Self {
            word: AtomicU64::new(word.0),
        }
    }

    /// Records a failure at `epoch`: one CAS loop that lowers the epoch half to the minimum of
    /// `epoch` and what it read, and increments the generation half in the same word (sticky at
    /// [`STICKY_GENERATION`]). Everything the caller did before (its requeue) is visible to any
    /// later [`capture`](Self::capture) that sees this report.
    pub fn report(&self, epoch: u32) -> Reported {
        if epoch == CLEAR_EPOCH {
            return Reported::Refused;
        }
        // The first guess is CLEAR, the latch's state when a failure is first reported, rather
        // than a load: a wrong guess costs one failed CAS on this rare path, and every step of
        // the loop is then an RMW, which the loom models explore exhaustively against
        // capture and clear (a leading plain load defeats loom's exploration).
        let mut current = CLEAR.0;
        loop {
            let next = LatchWord(current).after_report(epoch);
            // Release on success: the reporter's requeue (program-ordered before this call)
            // happens-before any Acquire capture that reads this word or a later one; every
            // later write to the word is an RMW, so it continues this release sequence.
            // Relaxed on failure: the value read is only the next guess, validated by the next
            // CAS.
            match self
                .word
                .compare_exchange(current, next.0, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) if next.is_sticky() => return Reported::Sticky(next),
                Ok(_) => return Reported::Recorded(next),
                Err(actual) => current = actual,
            }
        }
    }

    /// Loads the word: one coherent (epoch, generation) pair.
    #[must_use]
    pub fn capture(&self) -> LatchWord {
        // Acquire: pairs with the Release of every report this load (transitively) reads, so
        // the requeues those reports follow are visible to the cut that captured them.
        LatchWord(self.word.load(Ordering::Acquire))
    }

    /// Clears the latch only if it still holds exactly `captured`: any report since the
    /// capture (a lower epoch, the same epoch, or neither) changed the word, so the clear fails
    /// and the failure survives. Never clears from a sticky word.
    pub fn clear(&self, captured: LatchWord) -> Cleared {
        if captured.is_sticky() {
            return Cleared::Sticky;
        }
        // Release on success: the cut's stamp (before this call) is visible to whoever captures
        // CLEAR with Acquire. Relaxed on failure: the word read is only reported back, nothing
        // is consumed from it.
        match self
            .word
            .compare_exchange(captured.0, CLEAR.0, Ordering::Release, Ordering::Relaxed)
        {
            Ok(_) => Cleared::Cleared,
            Err(actual) => Cleared::Raced {
                current: LatchWord(actual),
            },
        }
    }
}

impl Default for EpochLatch {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for EpochLatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Relaxed: a diagnostic snapshot; nothing is read through it.
        let word = LatchWord(self.word.load(Ordering::Relaxed));
        f.debug_tuple("EpochLatch").field(&word).finish()
    }
}
