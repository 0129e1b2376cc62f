//! Token fingerprints: a template's token slot and a line's token that compare equal (the
//! miner's token comparison) have equal fingerprints, so a slot whose fingerprint differs from
//! the token's is known to differ after one integer comparison, and the similarity of a line
//! and a template compares text only where the fingerprints agree. Fingerprints live in memory
//! only (never in a snapshot, a record or an event), so the hash may change between builds.

use std::hash::{Hash, Hasher};

use rustc_hash::FxHasher;

use crate::mask::MaskKind;

/// The fingerprint of a `<*>` slot. No token has it: every token's has its low bit set.
pub(crate) const WILDCARD: u64 = 0;

/// The bits of the hash a fingerprint keeps. Unit tests keep two, so that unequal tokens often
/// share a fingerprint and the exact comparison behind the fingerprints is what they test.
#[cfg(not(test))]
const KEEP: u64 = !0;
#[cfg(test)]
const KEEP: u64 = 0b110;

/// A piece of a token with holes: literal text or a hole of a kind.
pub(crate) enum Part<'a> {
    Lit(&'a str),
    Hole(MaskKind),
}

/// The fingerprint of a token without holes.
pub(crate) fn text(s: &str) -> u64 {
    let mut h = FxHasher::default();
    h.write_u8(0);
    s.hash(&mut h);
    finish(&h)
}

/// The fingerprint of a token with holes, from its pieces in order (adjacent literal pieces
/// merged, as both the masker and templates keep them).
pub(crate) fn masked<'a>(parts: impl IntoIterator<Item = Part<'a>>) -> u64 {
    let mut h = FxHasher::default();
    h.write_u8(1);
    for part in parts {
        match part {
            Part::Lit(s) => {
                h.write_u8(2);
                s.hash(&mut h);
            }
            Part::Hole(kind) => {
                h.write_u8(3);
                kind.hash(&mut h);
            }
        }
    }
    finish(&h)
}

fn finish(h: &FxHasher) -> u64 {
    (h.finish() & KEEP) | 1
}
