//! Quarantine: a record that can never be written is held, with its `record_quarantined`
//! event, until that event is durable.

use super::*;

impl SharedParquetSink {
    pub(super) fn quarantine_underivable(&self, record: LogRecord, error: &DeriveError) -> u64 {
        let key = format!("tenant={}/underivable", record.tenant);
        self.quarantine(record, key, error.to_string(), error.error_type())
    }

    /// Emit the `record_quarantined` event, count it, and hold the record until the event is
    /// durable. Both happen under the sink lock, so the record is never only on this stack while
    /// its event is visible.
    pub(super) fn quarantine(
        &self,
        record: LogRecord,
        partition_key: String,
        error: String,
        error_type: &'static str,
    ) -> u64 {
        ::metrics::counter!(metrics::FLUSH_ERRORS, "error.type" => error_type, "consumer" => "records")
            .increment(1);
        ::metrics::counter!(metrics::SINK_QUARANTINED, "error.type" => error_type).increment(1);
        let bytes = record.estimated_bytes();
        let mut st = lock(&self.inner.state);
        let seq = self.inner.audit.emit(AuditEvent {
            tenant: record.tenant.clone(),
            timestamp_unix_nanos: now_unix_nanos(),
            kind: AuditKind::RecordQuarantined {
                record_id: record.id,
                partition_key,
                error,
            },
        });
        st.bytes += bytes;
        st.records += 1;
        st.held.push(Held { record, seq, bytes });
        st.gauges(&self.inner.gauges);
        seq
    }

    /// Drop the quarantined records whose `record_quarantined` event is now durable (they are
    /// settled: the event is the operator's pointer, the WAL keeps the record). Returns how many.
    /// The drains and `publish_owned` call it; callers may too.
    pub fn release_quarantined(&self) -> usize {
        let mut st = lock(&self.inner.state);
        let audit = &self.inner.audit;
        let before = st.held.len();
        let mut freed_bytes = 0;
        st.held.retain(|h| {
            let durable = audit.is_durable_through(&h.record.tenant, h.seq);
            if durable {
                freed_bytes += h.bytes;
            }
            !durable
        });
        let released = before - st.held.len();
        st.bytes -= freed_bytes;
        st.records -= released;
        st.gauges(&self.inner.gauges);
        released
    }
}
