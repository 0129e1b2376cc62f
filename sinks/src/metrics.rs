//! Metric names this crate emits through the `metrics` facade (one place, `ourios.*`).

/// Counter: flush errors, label `error.type` (`transient`, `permanent`, each quarantine variant:
/// `nanosecond_overflow`, `pre_epoch`, `observed_time_overflow`, ...) and `consumer`
/// (`records` or `audit`).
pub const FLUSH_ERRORS: &str = "ourios.flush.errors";
/// Counter: partitions or audit groups requeued into a buffer, label `consumer` and `cause`
/// (`refused` or `unwound`).
pub const SINK_REQUEUES: &str = "ourios.sink.requeues";
/// Counter: puts that were in flight when a handle unwound (the store may have accepted them:
/// possible duplicates), label `consumer`.
pub const SINK_AMBIGUOUS_PUTS: &str = "ourios.sink.ambiguous_puts";
/// Counter: rows written that may repeat rows already in the store, label `cause`:
/// `audit_replay` (a template key defined again after a restart; the same key and text, so
/// readers taking distinct keys see one) or `crash_replay` (records of frames above a tenant's
/// frontier that no publish intent names, republished by recovery: only objects written before
/// publish intents existed can hold them, RFC 0058 §Upgrade; readers deduplicate on the record
/// id).
pub const SINK_DUPLICATES: &str = "ourios.sink.duplicates";
/// Counter: units sealed (their publish intent made durable before the first put, RFC 0058).
pub const SINK_SEALS: &str = "ourios.sink.seals";
/// Counter: records of sealed units whose create-only put found the key taken and a check
/// confirmed the object: an earlier attempt (an ambiguous put, or a process that crashed
/// before its stamp) had landed it. Settled, not written again.
pub const SINK_ALREADY_PRESENT: &str = "ourios.sink.already_present";
/// Counter: replayed records recovery dropped because the intent naming them had landed (a
/// record of the unit is at or below its tenant's frontier): they are in the store once.
pub const SINK_REPLAY_LANDED: &str = "ourios.sink.replay_landed";
/// Gauge: sealed units waiting in the record sink for a (re)publish.
pub const SINK_SEALED_UNITS: &str = "ourios.sink.sealed_units";
/// Counter: partitions parked back into the record buffer by a worker whose enqueue failed.
pub const SINK_PARKS: &str = "ourios.sink.parks";
/// Counter: successful puts, label `consumer`.
pub const SINK_PUTS: &str = "ourios.sink.puts";
/// Counter: bytes of successful puts, label `consumer`.
pub const SINK_PUT_BYTES: &str = "ourios.sink.put_bytes";
/// Counter: records made durable in the record store.
pub const SINK_RECORDS_PUBLISHED: &str = "ourios.sink.records_published";
/// Counter: records quarantined (their `record_quarantined` event emitted), label `error.type`.
pub const SINK_QUARANTINED: &str = "ourios.sink.quarantined";
/// Counter: partitions a publish refused because their audit events were not yet durable (I3).
pub const SINK_REFUSED_UNORDERED: &str = "ourios.sink.refused_unordered";
/// Gauge: estimated bytes held by the record sink (buffers, set-aside tenants and quarantined
/// records awaiting their event).
pub const SINK_BUFFERED_BYTES: &str = "ourios.sink.buffered_bytes";
/// Gauge: records held by the record sink (same scope as the byte gauge).
pub const SINK_BUFFERED_RECORDS: &str = "ourios.sink.buffered_records";
/// Gauge: quarantined records held until their `record_quarantined` event is durable.
pub const SINK_QUARANTINE_HELD: &str = "ourios.sink.quarantine_held";
/// Gauge: audit events buffered (emitted or requeued, not yet taken).
pub const AUDIT_BUFFERED_EVENTS: &str = "ourios.audit.buffered_events";
/// Gauge: audit events not yet durable (buffered, in flight, retained or permanently failed).
pub const AUDIT_OUTSTANDING_EVENTS: &str = "ourios.audit.outstanding_events";
/// Gauge: 1 for each terminal (set-aside) tenant, label `tenant`.
pub const TENANT_TERMINAL: &str = "ourios.tenant.terminal";

/// Counts a requeue of `n` items under `consumer` (`records`, `audit`) by its cause, and the
/// ambiguous puts an unwind reports.
pub(crate) fn count_requeue(
    consumer: &'static str,
    n: usize,
    cause: ourios_recoverable::RequeueCause,
) {
    match cause {
        ourios_recoverable::RequeueCause::Refused => {
            ::metrics::counter!(SINK_REQUEUES, "consumer" => consumer, "cause" => "refused")
                .increment(n as u64);
        }
        ourios_recoverable::RequeueCause::Unwound { ambiguous } => {
            ::metrics::counter!(SINK_REQUEUES, "consumer" => consumer, "cause" => "unwound")
                .increment(n as u64);
            ::metrics::counter!(SINK_AMBIGUOUS_PUTS, "consumer" => consumer)
                .increment(ambiguous as u64);
        }
    }
}
