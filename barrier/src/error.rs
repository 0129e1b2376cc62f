//! Errors, one enum per operation family.

use crate::latch::{CLEAR_EPOCH, LAST_EPOCH};

/// Building a [`Barrier`](crate::Barrier) from a saved or synthetic state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartError {
    /// The starting epoch is the reserved clear epoch.
    #[error(
        "barrier epoch {epoch} is reserved for the clear latch word; the highest live epoch is {LAST_EPOCH}"
    )]
    ReservedEpoch {
        /// The epoch that was asked for (always [`CLEAR_EPOCH`]).
        epoch: u32,
    },
}

/// Entering a guard without waiting ([`Barrier::try_enter_encode`](crate::Barrier::try_enter_encode),
/// [`Barrier::try_enter_publish`](crate::Barrier::try_enter_publish)).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnterError {
    /// The cut at the last epoch is resetting `barrier_epoch` to 0; new work waits until every
    /// guard tagged with the old epochs has ended.
    #[error(
        "an epoch reset is in progress (cut at epoch {cut_epoch}); new work waits until no guard is outstanding"
    )]
    ResetInProgress {
        /// The epoch of the resetting cut.
        cut_epoch: u32,
    },
}

const _: () = assert!(LAST_EPOCH == CLEAR_EPOCH - 1);
