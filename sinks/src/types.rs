//! Records, partition keys and their derivation.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

/// Nanoseconds per hour and per day.
const NANOS_PER_HOUR: u64 = 3_600 * 1_000_000_000;
const NANOS_PER_DAY: u64 = 24 * NANOS_PER_HOUR;

/// A tenant name (the `X-Scope-OrgID` the node derived for a request).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tenant(String);

impl Tenant {
    /// Wrap a tenant name.
    pub fn new(name: impl Into<String>) -> Self {
        Self(name.into())
    }

    /// The tenant name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Tenant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for Tenant {
    fn from(name: &str) -> Self {
        Self::new(name)
    }
}

impl From<String> for Tenant {
    fn from(name: String) -> Self {
        Self(name)
    }
}

/// The stable identity of a record: the WAL frame it came from and its index in that frame.
///
/// Written into every Parquet row (`record_lsn`, `record_index`) so a duplicate is visible and
/// loss is countable by id, never by row count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordId {
    /// The WAL frame's log sequence number.
    pub lsn: u64,
    /// The record's index within the frame.
    pub index: u32,
}

impl fmt::Display for RecordId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.lsn, self.index)
    }
}

/// One mined log record, as the encode workers hand it to the record sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    /// Identity of the WAL the record's frame is in: with `id`, unique across nodes writing
    /// one store.
    pub wal_id: [u8; 16],
    /// Stable id (frame lsn, index in frame).
    pub id: RecordId,
    /// The tenant the frame belongs to.
    pub tenant: Tenant,
    /// Event time, nanoseconds since the Unix epoch (partitions the record).
    pub time_unix_nano: u64,
    /// Observation time, nanoseconds since the Unix epoch.
    pub observed_time_unix_nano: u64,
    /// OTLP severity number.
    pub severity_number: i32,
    /// OTLP severity text.
    pub severity_text: String,
    /// Content-addressed key of the template text the miner matched (what a reader joins the
    /// audit series on): the same text always has the same key, and a key never names two
    /// texts, whatever happened to the miner's state.
    pub template_key: [u8; 16],
    /// Template the miner matched (lineage: the id depends on the miner's history).
    pub template_id: u64,
    /// Template version at mining time.
    pub template_version: u32,
    /// The template's parameters for this line.
    pub params: Params,
    /// The original body, when the node keeps it.
    pub body: Option<String>,
    /// Log attributes.
    pub attributes: Attributes,
    /// Resource attributes: one copy per OTLP resource, shared by every record of it from
    /// decode to the encode (a small request with a large resource attribute and many records
    /// costs that attribute once, not once per record).
    pub resource_attributes: SharedAttributes,
    /// Trace id, when present.
    pub trace_id: Option<[u8; 16]>,
    /// Span id, when present.
    pub span_id: Option<[u8; 8]>,
    /// Sequence number (assigned by the audit sink) of the newest audit event of this tenant when
    /// the record was mined; 0 = none. The record may be published only once every event of its
    /// tenant up to this sequence is durable (I3).
    pub audit_watermark: u64,
}

impl LogRecord {
    /// An estimate of the memory this record holds, used for byte accounting and triggers.
    /// Shared resource attributes count in full for every record: the encode copies them per
    /// row, so encode chunks stay bounded, and the accounting errs high, never low.
    pub fn estimated_bytes(&self) -> usize {
        let strings = self.tenant.as_str().len()
            + self.severity_text.len()
            + self.body.as_ref().map_or(0, String::len)
            + self
                .resource_attributes
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>();
        std::mem::size_of::<Self>()
            + strings
            + self.attributes.heap_bytes()
            + self.params.heap_bytes()
            + self.resource_attributes.len() * std::mem::size_of::<(String, String)>()
    }
}

/// Attributes shared by many records (a resource's): cloning is a reference count.
pub type SharedAttributes = Arc<[(String, String)]>;

/// A record's attributes: key and value pairs in the order they came, their text in one
/// buffer.
///
/// A realistic record carries 10-20 attributes. Held as `(String, String)` pairs they are
/// 30-odd allocations, made on the thread that decoded the request and freed on the one that
/// published it; here they are two, and a pair costs its text and two offsets instead of two
/// string headers and two allocator size classes.
///
/// ```
/// use ourios_sinks::Attributes;
///
/// let mut attributes: Attributes = [("http.method", "GET")].into_iter().collect();
/// attributes.push("http.status", "200");
/// assert_eq!(attributes.len(), 2);
/// assert_eq!(attributes.get(1), Some(("http.status", "200")));
/// let keys: Vec<&str> = attributes.iter().map(|(k, _)| k).collect();
/// assert_eq!(keys, ["http.method", "http.status"]);
/// ```
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Attributes {
    /// Every key and value, one after the other.
    text: String,
    /// Per pair, where its key ends and where its value ends in `text` (each starts where the
    /// one before it ends).
    ends: Vec<(usize, usize)>,
}

impl Attributes {
    /// No attributes.
    pub fn new() -> Self {
        Self::default()
    }

    /// No attributes, with room for `pairs` pairs of `text_bytes` bytes in all.
    pub fn with_capacity(pairs: usize, text_bytes: usize) -> Self {
        Self {
            text: String::with_capacity(text_bytes),
            ends: Vec::with_capacity(pairs),
        }
    }

    /// Append a pair (a key may repeat: pairs are kept as they came).
    pub fn push(&mut self, key: &str, value: &str) {
        self.text.push_str(key);
        let key_end = self.text.len();
        self.text.push_str(value);
        self.ends.push((key_end, self.text.len()));
    }

    /// The number of pairs.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are no pairs.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The `i`th pair.
    pub fn get(&self, i: usize) -> Option<(&str, &str)> {
        let &(key_end, value_end) = self.ends.get(i)?;
        let start = match i.checked_sub(1) {
            Some(before) => self.ends[before].1,
            None => 0,
        };
        Some((&self.text[start..key_end], &self.text[key_end..value_end]))
    }

    /// The pairs in order.
    pub fn iter(&self) -> AttributesIter<'_> {
        AttributesIter {
            text: &self.text,
            ends: self.ends.iter(),
            start: 0,
        }
    }

    /// The memory its pairs take beyond its own size: their text and offsets, by length, not
    /// by the buffers' capacities, so a clone counts the same.
    pub fn heap_bytes(&self) -> usize {
        self.text.len() + self.ends.len() * std::mem::size_of::<(usize, usize)>()
    }
}

impl fmt::Debug for Attributes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<K: AsRef<str>, V: AsRef<str>> FromIterator<(K, V)> for Attributes {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(pairs: I) -> Self {
        let mut out = Self::new();
        out.extend(pairs);
        out
    }
}

impl<K: AsRef<str>, V: AsRef<str>> Extend<(K, V)> for Attributes {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, pairs: I) {
        for (k, v) in pairs {
            self.push(k.as_ref(), v.as_ref());
        }
    }
}

impl From<Vec<(String, String)>> for Attributes {
    fn from(pairs: Vec<(String, String)>) -> Self {
        let text_bytes = pairs.iter().map(|(k, v)| k.len() + v.len()).sum();
        let mut out = Self::with_capacity(pairs.len(), text_bytes);
        out.extend(pairs);
        out
    }
}

impl<'a> IntoIterator for &'a Attributes {
    type Item = (&'a str, &'a str);
    type IntoIter = AttributesIter<'a>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// The pairs of an [`Attributes`], in order.
#[derive(Debug, Clone)]
pub struct AttributesIter<'a> {
    text: &'a str,
    ends: std::slice::Iter<'a, (usize, usize)>,
    /// Where the next pair's key starts: the end of the pair before it (the encoder walks
    /// every pair of every record, so each is found without looking back).
    start: usize,
}

impl<'a> Iterator for AttributesIter<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        let &(key_end, value_end) = self.ends.next()?;
        let pair = (
            &self.text[self.start..key_end],
            &self.text[key_end..value_end],
        );
        self.start = value_end;
        Some(pair)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.ends.size_hint()
    }
}

impl ExactSizeIterator for AttributesIter<'_> {}

/// A record's template parameters, in slot order, their text in one buffer (as
/// `ourios_miner::Params` holds them; this crate does not know the miner).
///
/// ```
/// use ourios_sinks::Params;
///
/// let params: Params = ["10.0.0.1", "42"].into_iter().collect();
/// assert_eq!(params.len(), 2);
/// assert_eq!(params.get(1), Some("42"));
/// assert_eq!(params.iter().collect::<Vec<_>>(), ["10.0.0.1", "42"]);
/// ```
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Params {
    /// Every value, one after the other.
    text: String,
    /// Where each value ends in `text` (each starts where the one before it ends).
    ends: Vec<usize>,
}

impl Params {
    /// No parameters.
    pub fn new() -> Self {
        Self::default()
    }

    /// No parameters, with room for `count` of them of `text_bytes` bytes in all.
    pub fn with_capacity(count: usize, text_bytes: usize) -> Self {
        Self {
            text: String::with_capacity(text_bytes),
            ends: Vec::with_capacity(count),
        }
    }

    /// Append a value.
    pub fn push(&mut self, value: &str) {
        self.text.push_str(value);
        self.ends.push(self.text.len());
    }

    /// The number of values.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The `i`th value.
    pub fn get(&self, i: usize) -> Option<&str> {
        let end = *self.ends.get(i)?;
        let start = match i.checked_sub(1) {
            Some(before) => self.ends[before],
            None => 0,
        };
        Some(&self.text[start..end])
    }

    /// The values in order.
    pub fn iter(&self) -> ParamsIter<'_> {
        ParamsIter {
            text: &self.text,
            ends: self.ends.iter(),
            start: 0,
        }
    }

    /// The memory its values take beyond its own size: their text and ends, by length, not by
    /// the buffers' capacities, so a clone counts the same.
    pub fn heap_bytes(&self) -> usize {
        self.text.len() + self.ends.len() * std::mem::size_of::<usize>()
    }
}

impl fmt::Debug for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<S: AsRef<str>> FromIterator<S> for Params {
    fn from_iter<I: IntoIterator<Item = S>>(values: I) -> Self {
        let mut out = Self::new();
        out.extend(values);
        out
    }
}

impl<S: AsRef<str>> Extend<S> for Params {
    fn extend<I: IntoIterator<Item = S>>(&mut self, values: I) {
        for v in values {
            self.push(v.as_ref());
        }
    }
}

impl From<Vec<String>> for Params {
    fn from(values: Vec<String>) -> Self {
        let mut out = Self::with_capacity(values.len(), values.iter().map(String::len).sum());
        out.extend(values);
        out
    }
}

impl<'a> IntoIterator for &'a Params {
    type Item = &'a str;
    type IntoIter = ParamsIter<'a>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// The values of a [`Params`], in order.
#[derive(Debug, Clone)]
pub struct ParamsIter<'a> {
    text: &'a str,
    ends: std::slice::Iter<'a, usize>,
    /// Where the next value starts: the end of the one before it.
    start: usize,
}

impl<'a> Iterator for ParamsIter<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<Self::Item> {
        let end = *self.ends.next()?;
        let value = &self.text[self.start..end];
        self.start = end;
        Some(value)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.ends.size_hint()
    }
}

impl ExactSizeIterator for ParamsIter<'_> {}

/// A UTC calendar day.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Day {
    /// Year (proleptic Gregorian).
    pub year: i32,
    /// Month, 1-12.
    pub month: u32,
    /// Day of month, 1-31.
    pub day: u32,
}

impl Day {
    /// The UTC day `days` days after 1970-01-01 (Howard Hinnant's `civil_from_days`).
    pub fn from_days_since_epoch(days: i64) -> Self {
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        Self {
            // Nanosecond timestamps that fit an i64 span years 1677-2262: no truncation.
            year: i32::try_from(year).unwrap_or(i32::MAX),
            month: u32::try_from(month).unwrap_or(1),
            day: u32::try_from(day).unwrap_or(1),
        }
    }
}

impl fmt::Display for Day {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:02}-{:02}", self.year, self.month, self.day)
    }
}

/// Why a timestamp has no partition: the record or event cannot be written under any key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeriveError {
    /// The timestamp is later than the Parquet nanosecond timestamp column can hold (`i64::MAX` ns,
    /// 2262-04-11).
    #[error(
        "nanosecond overflow: tenant {tenant} timestamp {timestamp_unix_nanos} ns is past i64::MAX"
    )]
    NanosecondOverflow {
        /// The tenant of the record or event.
        tenant: Tenant,
        /// The timestamp that would not fit.
        timestamp_unix_nanos: i128,
    },
    /// The timestamp is before the Unix epoch (a miner clock running wrong).
    #[error(
        "pre-epoch timestamp: tenant {tenant} timestamp {timestamp_unix_nanos} ns is before 1970-01-01"
    )]
    PreEpoch {
        /// The tenant of the event.
        tenant: Tenant,
        /// The negative timestamp.
        timestamp_unix_nanos: i128,
    },
}

impl DeriveError {
    /// The `error.type` label this failure is counted under.
    pub fn error_type(&self) -> &'static str {
        match self {
            Self::NanosecondOverflow { .. } => "nanosecond_overflow",
            Self::PreEpoch { .. } => "pre_epoch",
        }
    }
}

/// Validate a nanosecond timestamp for a partition: it must be in `0..=i64::MAX`.
pub(crate) fn check_nanos(tenant: &Tenant, nanos: i128) -> Result<u64, DeriveError> {
    if nanos < 0 {
        return Err(DeriveError::PreEpoch {
            tenant: tenant.clone(),
            timestamp_unix_nanos: nanos,
        });
    }
    if nanos > i128::from(i64::MAX) {
        return Err(DeriveError::NanosecondOverflow {
            tenant: tenant.clone(),
            timestamp_unix_nanos: nanos,
        });
    }
    // In 0..=i64::MAX, so it fits a u64.
    Ok(u64::try_from(nanos).unwrap_or(0))
}

/// Where a record is buffered and written: tenant, UTC date and hour of its event time.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionKey {
    /// The record's tenant.
    pub tenant: Tenant,
    /// UTC date of the record's `time_unix_nano`.
    pub date: Day,
    /// UTC hour (0-23) of the record's `time_unix_nano`.
    pub hour: u32,
}

impl PartitionKey {
    /// Derive the key of `record`. Fails when the event time does not fit the nanosecond
    /// timestamp column (`> i64::MAX` ns): such a record can never be encoded and is quarantined.
    pub fn derive(record: &LogRecord) -> Result<Self, DeriveError> {
        let nanos = check_nanos(&record.tenant, i128::from(record.time_unix_nano))?;
        let days = nanos / NANOS_PER_DAY;
        let hour = (nanos % NANOS_PER_DAY) / NANOS_PER_HOUR;
        Ok(Self {
            tenant: record.tenant.clone(),
            // Under i64::MAX / NANOS_PER_DAY (106 751): both conversions are exact.
            date: Day::from_days_since_epoch(i64::try_from(days).unwrap_or(i64::MAX)),
            hour: u32::try_from(hour).unwrap_or(0),
        })
    }
}

impl fmt::Display for PartitionKey {
    /// The Hive-style path fragment: `tenant=T/date=YYYY-MM-DD/hour=HH`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "tenant={}/date={}/hour={:02}",
            self.tenant, self.date, self.hour
        )
    }
}

/// A partition that left the record buffer: the unit of one put. Only the sink makes and
/// changes one (its fields are the sink's; readers use the accessors), and it is never
/// copied: each record is in one place at a time.
#[derive(Debug)]
pub struct Partition {
    /// Its key.
    pub(crate) key: PartitionKey,
    /// Its records, oldest append first (requeued records ahead of newer ones).
    pub(crate) records: Vec<LogRecord>,
    /// Estimated bytes of `records` (the sum of [`LogRecord::estimated_bytes`]).
    pub(crate) bytes: usize,
    /// When its oldest record was appended.
    pub(crate) oldest: Instant,
    /// The maximum [`LogRecord::audit_watermark`] over `records`.
    pub(crate) audit_watermark: u64,
    /// While the partition is out of the sink's buffer (drained, detached, being published):
    /// the lowest record lsn it held when it left. The sink counts it in the tenant's
    /// [`unpublished_floor`](crate::SharedParquetSink::unpublished_floor) until the partition is
    /// settled (put returned Ok, or every record quarantined) or put back. Set and cleared by
    /// the sink only.
    pub(crate) out_floor: Option<u64>,
    /// Set by the sink when the partition is sealed (RFC 0058): the object key every put of it
    /// uses, its publish intent already durable. A sealed partition is never merged back into
    /// the open buffer; a requeue sends it to the sealed list.
    pub(crate) sealed: Option<String>,
}

impl Partition {
    /// Its key.
    pub fn key(&self) -> &PartitionKey {
        &self.key
    }

    /// Its records, oldest append first (requeued records ahead of newer ones).
    pub fn records(&self) -> &[LogRecord] {
        &self.records
    }

    /// Estimated bytes of its records.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The highest audit watermark of its records: the audit events it waits for (I3).
    pub fn audit_watermark(&self) -> u64 {
        self.audit_watermark
    }

    /// The object key it is sealed under (RFC 0058), once sealed.
    pub fn sealed(&self) -> Option<&str> {
        self.sealed.as_deref()
    }

    /// The ids of its records, in order.
    pub fn ids(&self) -> Vec<RecordId> {
        self.records.iter().map(|r| r.id).collect()
    }

    /// Recompute `bytes` and `audit_watermark` from `records` (after removing some).
    pub(crate) fn recompute(&mut self) {
        self.bytes = self.records.iter().map(LogRecord::estimated_bytes).sum();
        self.audit_watermark = self
            .records
            .iter()
            .map(|r| r.audit_watermark)
            .max()
            .unwrap_or(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pairs() -> impl Strategy<Value = Vec<(String, String)>> {
        // Short strings from a small alphabet with a two-byte letter, so empty keys and
        // values, repeats and a pair's text running into the next one's all come up.
        proptest::collection::vec(("[ab\u{e9}=]{0,3}", "[ab\u{e9}=]{0,3}"), 0..8)
    }

    proptest! {
        /// Proves `Attributes` gives back each pair as it was pushed, in order, by `iter` and
        /// `get`, and that two are equal exactly when their pairs are: a pair's boundary is
        /// kept, not only the text. Mutation check (by hand): `get` starting every pair at 0,
        /// the iterator not moving its start on, or `push` recording the value's end as the
        /// key's: each fails.
        #[test]
        fn attributes_keep_each_pair_as_pushed(a in pairs(), b in pairs()) {
            let held = Attributes::from(a.clone());
            let back: Vec<(String, String)> =
                held.iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
            prop_assert_eq!(&back, &a);
            prop_assert_eq!(held.len(), a.len());
            prop_assert_eq!(held.iter().len(), a.len());
            for (i, (k, v)) in a.iter().enumerate() {
                prop_assert_eq!(held.get(i), Some((k.as_str(), v.as_str())));
            }
            prop_assert_eq!(held.get(a.len()), None);
            let other: Attributes = b.iter().map(|(k, v)| (k, v)).collect();
            prop_assert_eq!(held == other, a == b);
        }

        /// Values come back by `iter` and `get` as pushed (empty ones and a two-byte letter
        /// included), and two `Params` are equal exactly when their values are.
        ///
        /// Mutation check (by hand): `get` starting every value at 0, and the iterator not
        /// moving its start on: each fails.
        #[test]
        fn params_keep_each_value_as_pushed(
            a in prop::collection::vec("[a-zé ]{0,4}", 0..8),
            b in prop::collection::vec("[a-zé ]{0,4}", 0..8),
        ) {
            let held = Params::from(a.clone());
            prop_assert_eq!(held.len(), a.len());
            prop_assert_eq!(held.iter().len(), a.len());
            prop_assert_eq!(held.iter().collect::<Vec<_>>(), a.clone());
            for (i, v) in a.iter().enumerate() {
                prop_assert_eq!(held.get(i), Some(v.as_str()));
            }
            prop_assert_eq!(held.get(a.len()), None);
            let other: Params = b.iter().collect();
            prop_assert_eq!(held == other, a == b);
        }
    }

    /// Proves a record's estimate counts its attributes' text and offsets the same for a
    /// clone (whose buffers may have other capacities) as for the record it was cloned from:
    /// the record buffer adds and subtracts estimates of what may be different copies.
    #[test]
    fn a_clone_estimates_the_same() {
        let mut attributes = Attributes::with_capacity(64, 4096);
        attributes.push("http.method", "GET");
        assert_eq!(
            attributes.heap_bytes(),
            14 + 2 * std::mem::size_of::<usize>()
        );
        assert_eq!(attributes.clone().heap_bytes(), attributes.heap_bytes());
        let mut params = Params::with_capacity(64, 4096);
        params.push("GET");
        assert_eq!(params.heap_bytes(), 3 + std::mem::size_of::<usize>());
        assert_eq!(params.clone().heap_bytes(), params.heap_bytes());
    }

    #[test]
    fn civil_days_match_known_dates() {
        assert_eq!(Day::from_days_since_epoch(0).to_string(), "1970-01-01");
        assert_eq!(Day::from_days_since_epoch(19_723).to_string(), "2024-01-01");
        assert_eq!(Day::from_days_since_epoch(19_782).to_string(), "2024-02-29");
        // i64::MAX ns is 2262-04-11T23:47:16.854775807Z.
        let last = u64::try_from(i64::MAX).unwrap() / NANOS_PER_DAY;
        assert_eq!(
            Day::from_days_since_epoch(i64::try_from(last).unwrap()).to_string(),
            "2262-04-11"
        );
    }
}
