//! Sealed units and publish intents: what makes a record put exactly once (RFC 0058).
//!
//! When a partition is ready to put (its tenant is not terminal, its audit events are durable,
//! it is encoded and its poisoned records are quarantined out), the sink *seals* it: the unit
//! gets an object key derived from its first record's id and the WAL's identity, and a
//! [`Sealer`] makes a *publish intent* durable (the node appends it to the WAL) before the
//! first put. From then on the unit is never merged back into the open buffer: every requeue
//! sends it to the sealed list, from which it is republished first, under the same key, with a
//! create-only put. A put that finds the key taken settles the unit (it landed earlier, through
//! a put whose call failed or panicked, or in a process that crashed before its stamp).
//!
//! Recovery reads the intents above the frontiers before it mines anything and tells the sink
//! ([`SharedParquetSink::expect_sealed`](crate::SharedParquetSink::expect_sealed),
//! [`SharedParquetSink::drop_landed`](crate::SharedParquetSink::drop_landed)) which replayed
//! records rebuild which unit and which are in the store already.
//!
//! Intent payload (little-endian; the WAL frame around it carries length and CRC):
//!
//! ```text
//! magic [0xFF, 'O', 'I', 1] | tenant_len u8 | tenant | path_len u16 | path
//!                           | ranges u32 | (lsn u64 | first u32 | last u32) * ranges
//! ```
//!
//! The first byte, 0xFF, is never the first byte of an OTLP protobuf (wire type 7 does not
//! exist), so a reader of the WAL tells an intent from a request frame by it.

use std::fmt;

use crate::types::{RecordId, Tenant};

/// The first bytes of every intent payload.
pub const INTENT_MAGIC: [u8; 4] = [0xFF, b'O', b'I', 1];

/// The record indices `first..=last` of the WAL frame `lsn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IdRange {
    /// The frame.
    pub lsn: u64,
    /// The first record index in the range.
    pub first: u32,
    /// The last record index in the range (inclusive).
    pub last: u32,
}

impl IdRange {
    /// How many records the range names (at least one).
    pub(crate) fn len(&self) -> usize {
        (self.last - self.first) as usize + 1
    }
}

/// The ranges naming exactly `ids`, sorted, adjacent indices merged.
pub fn ranges_of(ids: impl IntoIterator<Item = RecordId>) -> Vec<IdRange> {
    let mut ids: Vec<RecordId> = ids.into_iter().collect();
    ids.sort_unstable();
    ids.dedup();
    let mut out: Vec<IdRange> = Vec::new();
    for id in ids {
        match out.last_mut() {
            Some(r) if r.lsn == id.lsn && r.last.checked_add(1) == Some(id.index) => {
                r.last = id.index;
            }
            _ => out.push(IdRange {
                lsn: id.lsn,
                first: id.index,
                last: id.index,
            }),
        }
    }
    out
}

/// One sealed unit's intent: whose records, under which object key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intent {
    /// The records' tenant.
    pub tenant: Tenant,
    /// The object key (store path) the unit is put under, whatever the attempt.
    pub path: String,
    /// Exactly the unit's record ids.
    pub ranges: Vec<IdRange>,
}

/// Why bytes are not an intent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a publish intent: {0}")]
pub struct IntentError(&'static str);

impl Intent {
    /// Whether `payload` is an intent (by its magic), not a request.
    pub fn is_intent(payload: &[u8]) -> bool {
        payload.starts_with(&INTENT_MAGIC)
    }

    /// The highest frame lsn the intent names.
    pub fn max_lsn(&self) -> u64 {
        self.ranges.iter().map(|r| r.lsn).max().unwrap_or(0)
    }

    /// The lowest frame lsn the intent names.
    pub fn min_lsn(&self) -> u64 {
        self.ranges.iter().map(|r| r.lsn).min().unwrap_or(0)
    }

    /// How many records it names.
    pub fn records(&self) -> usize {
        self.ranges.iter().map(IdRange::len).sum()
    }

    /// The payload a [`Sealer`] makes durable.
    pub fn encode(&self) -> Vec<u8> {
        let tenant = self.tenant.as_str().as_bytes();
        let path = self.path.as_bytes();
        let mut out =
            Vec::with_capacity(4 + 1 + tenant.len() + 2 + path.len() + 4 + 16 * self.ranges.len());
        out.extend_from_slice(&INTENT_MAGIC);
        // A tenant is at most 64 bytes and a key far under 64 KiB (prefix, tenant, date, hour,
        // a fixed-width name); both are checked by `seal` before it gets here.
        out.push(u8::try_from(tenant.len()).unwrap_or(u8::MAX));
        out.extend_from_slice(tenant);
        out.extend_from_slice(&u16::try_from(path.len()).unwrap_or(u16::MAX).to_le_bytes());
        out.extend_from_slice(path);
        out.extend_from_slice(
            &u32::try_from(self.ranges.len())
                .unwrap_or(u32::MAX)
                .to_le_bytes(),
        );
        for r in &self.ranges {
            out.extend_from_slice(&r.lsn.to_le_bytes());
            out.extend_from_slice(&r.first.to_le_bytes());
            out.extend_from_slice(&r.last.to_le_bytes());
        }
        out
    }

    /// Decodes an intent payload.
    ///
    /// # Errors
    /// [`IntentError`] naming what is wrong: no magic, a short field, a range whose `first` is
    /// above its `last`, bytes left over.
    pub fn decode(payload: &[u8]) -> Result<Intent, IntentError> {
        let mut c = Cursor(
            payload
                .strip_prefix(&INTENT_MAGIC)
                .ok_or(IntentError("no intent magic"))?,
        );
        let tenant_len = c.take(1, "short tenant length")?[0] as usize;
        let tenant = std::str::from_utf8(c.take(tenant_len, "short tenant")?)
            .map_err(|_| IntentError("tenant is not UTF-8"))?
            .to_owned();
        let path_len = u16::from_le_bytes(c.array("short path length")?);
        let path = std::str::from_utf8(c.take(usize::from(path_len), "short path")?)
            .map_err(|_| IntentError("path is not UTF-8"))?
            .to_owned();
        let n = u32::from_le_bytes(c.array("short range count")?);
        let mut ranges = Vec::with_capacity((n as usize).min(c.0.len() / 16));
        for _ in 0..n {
            let lsn = u64::from_le_bytes(c.array("short range")?);
            let first = u32::from_le_bytes(c.array("short range")?);
            let last = u32::from_le_bytes(c.array("short range")?);
            if first > last {
                return Err(IntentError("a range ends before it starts"));
            }
            ranges.push(IdRange { lsn, first, last });
        }
        if !c.0.is_empty() {
            return Err(IntentError("bytes after the last range"));
        }
        Ok(Intent {
            tenant: Tenant::new(tenant),
            path,
            ranges,
        })
    }
}

/// Reads an intent payload front to back.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], IntentError> {
        if self.0.len() < n {
            return Err(IntentError(what));
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], IntentError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }
}

/// Makes a publish intent durable before the unit's first put (the node appends it to the
/// WAL, group-committed). Called from the publisher thread and from a cut's drain, never under
/// a sink lock; it may block for one durable write.
pub trait Sealer: Send + Sync + fmt::Debug {
    /// The WAL identity object keys are derived from (16 bytes).
    fn wal_id(&self) -> [u8; 16];

    /// Makes `intent` durable. After `Ok`, a recovery routes the intent's records to its key.
    ///
    /// # Errors
    /// Why it could not (the WAL refused the write): the unit stays unsealed and is requeued.
    fn seal(&self, intent: &Intent) -> Result<(), String>;
}

/// The object name of a sealed unit: `<wal id, 32 hex>-<first lsn, 20 digits>-<first index, 10
/// digits>-<digest of its ranges, 16 hex>.parquet`. A record is sealed into one put unit at most,
/// so the first record and the WAL identity (which differs per node) already name the unit; the
/// digest of the exact ranges makes that hold even if a record were ever sealed twice, so a
/// create-only put that finds its key taken has found the very same set of records.
pub fn sealed_name(wal_id: [u8; 16], ranges: &[IdRange]) -> String {
    let first = ranges.first().map_or((0, 0), |r| (r.lsn, r.first));
    // FNV-1a, 64 bits: stable across releases and platforms (it is part of the key).
    let mut digest: u64 = 0xcbf2_9ce4_8422_2325;
    for r in ranges {
        for b in r
            .lsn
            .to_le_bytes()
            .into_iter()
            .chain(r.first.to_le_bytes())
            .chain(r.last.to_le_bytes())
        {
            digest ^= u64::from(b);
            digest = digest.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!(
        "{}-{:020}-{:010}-{digest:016x}.parquet",
        crate::read::hex(&wal_id),
        first.0,
        first.1
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn intent(ranges: Vec<IdRange>) -> Intent {
        Intent {
            tenant: Tenant::new("tenant-a"),
            path: "records/tenant=tenant-a/date=2026-11-30/hour=23/x.parquet".into(),
            ranges,
        }
    }

    proptest! {
        /// An intent decodes to itself, and every strict prefix of its payload is refused.
        #[test]
        fn intent_round_trips_and_truncation_is_refused(
            raw in proptest::collection::vec((1u64..1000, 0u32..50, 0u32..50), 0..20)
        ) {
            let ranges: Vec<IdRange> = raw
                .into_iter()
                .map(|(lsn, a, b)| IdRange { lsn, first: a.min(b), last: a.max(b) })
                .collect();
            let i = intent(ranges);
            let bytes = i.encode();
            prop_assert!(Intent::is_intent(&bytes));
            prop_assert_eq!(Intent::decode(&bytes).unwrap(), i);
            for cut in 0..bytes.len() {
                prop_assert!(Intent::decode(&bytes[..cut]).is_err(), "prefix of {cut} bytes");
            }
        }
    }

    #[test]
    fn ranges_merge_adjacent_indices_per_frame_and_drop_repeats() {
        let ids = [
            (3, 0),
            (3, 1),
            (3, 2),
            (3, 4),
            (5, 0),
            (4, 7),
            (3, 3),
            (4, 7),
            // Follows (5, 0): adjacent indices of another frame are not merged.
            (6, 1),
        ];
        assert_eq!(
            ranges_of(ids.iter().map(|&(lsn, index)| RecordId { lsn, index })),
            vec![
                IdRange {
                    lsn: 3,
                    first: 0,
                    last: 4
                },
                IdRange {
                    lsn: 4,
                    first: 7,
                    last: 7
                },
                IdRange {
                    lsn: 5,
                    first: 0,
                    last: 0
                },
                IdRange {
                    lsn: 6,
                    first: 1,
                    last: 1
                },
            ]
        );
    }

    #[test]
    fn an_intent_counts_its_records_and_spans_its_frames() {
        let i = intent(vec![
            IdRange {
                lsn: 9,
                first: 3,
                last: 7,
            },
            IdRange {
                lsn: 4,
                first: 2,
                last: 2,
            },
        ]);
        assert_eq!((i.records(), i.min_lsn(), i.max_lsn()), (6, 4, 9));
    }

    #[test]
    fn a_sealed_name_is_stable_and_tells_ranges_apart() {
        let one = [IdRange {
            lsn: 3,
            first: 0,
            last: 2,
        }];
        let two = [IdRange {
            lsn: 3,
            first: 0,
            last: 7,
        }];
        // Part of every sealed key: a change here republishes landed units under new keys.
        assert_eq!(
            sealed_name([0xab; 16], &one),
            "abababababababababababababababab-00000000000000000003-0000000000-9728dd70c7a90384.parquet"
        );
        assert_ne!(sealed_name([0xab; 16], &one), sealed_name([0xab; 16], &two));
        assert_ne!(sealed_name([0xab; 16], &one), sealed_name([0xcd; 16], &one));
    }

    #[test]
    fn an_otlp_request_is_never_an_intent() {
        // A non-empty canonical request starts with field 1's key (0x0A); an empty one is empty.
        assert!(!Intent::is_intent(&[]));
        assert!(!Intent::is_intent(&[0x0A, 0x00]));
        assert!(Intent::decode(&[0x0A, 0x00]).is_err());
    }
}
