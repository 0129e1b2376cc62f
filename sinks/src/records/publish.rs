//! Publishing: sealing a unit, its create-only put, and what each outcome does to it.

use super::*;
use crate::store::Put;

impl SharedParquetSink {
    /// A partition taken out of a batch as settled: its records are durable (or held in
    /// quarantine, which the floor counts separately).
    fn settled(&self, p: &Partition) {
        let mut st = lock(&self.inner.state);
        st.returned(&p.key.tenant, p.out_floor);
    }

    /// `<prefix>/records/tenant=<t>/date=<d>/hour=<h>/<name>` for partition `p`.
    fn object_path(&self, p: &Partition, name: &str) -> Path {
        let tenant_part = format!("tenant={}", p.key.tenant);
        let date_part = format!("date={}", p.key.date);
        let hour_part = format!("hour={:02}", p.key.hour);
        object_path(
            &self.inner.config.prefix,
            [
                "records",
                tenant_part.as_str(),
                date_part.as_str(),
                hour_part.as_str(),
                name,
            ],
        )
    }

    /// A fresh key for an unsealed put (no sealer): unique per attempt.
    fn unique_path(&self, p: &Partition) -> Path {
        let first = p.records.iter().map(|r| r.id.lsn).min().unwrap_or(0);
        self.object_path(p, &unique_name(first))
    }

    /// Seals `p` (RFC 0058): its key from its first record and the WAL identity, its intent
    /// made durable by `sealer`. Returns the key.
    fn seal(&self, sealer: &dyn Sealer, p: &Partition) -> Result<Path, String> {
        let ranges = ranges_of(p.records.iter().map(|r| r.id));
        if ranges.is_empty() {
            return Err("an empty unit is never sealed".to_owned());
        }
        let path = self.object_path(p, &sealed_name(sealer.wal_id(), &ranges));
        let intent = Intent {
            tenant: p.key.tenant.clone(),
            path: path.to_string(),
            ranges,
        };
        if intent.path.len() > usize::from(u16::MAX) {
            return Err(format!(
                "object key of {} bytes is too long for an intent",
                intent.path.len()
            ));
        }
        sealer.seal(&intent)?;
        ::metrics::counter!(metrics::SINK_SEALS).increment(1);
        Ok(path)
    }

    /// Publish every pending partition of `batch`, one put per partition (RFC 0054 §9.4).
    ///
    /// Per partition: begin (InFlight); a terminal tenant's partition is requeued; a partition
    /// whose audit events are not all durable (`is_durable_through(tenant, audit_watermark)`) is
    /// requeued at once (I3); the partition is encoded, and if the encoder rejects content the
    /// poisoned records are found, quarantined (event, counter, held until the event is durable)
    /// and removed from the item; with a sealer, the remainder is sealed (its key derived from
    /// its records, its intent made durable; a refused seal requeues it unsealed) and put
    /// create-only, a taken key settling it once the store confirms the object (RFC 0058);
    /// without one, it is put under a fresh key. Ok settles it `Durable`; a store error
    /// requeues it at once, before the next put starts (a permanent one is also reported). A
    /// sealed partition (a retry) skips the quarantine and the seal: its content and key are
    /// fixed. A panic (in a put or the encoder) leaves the in-flight and pending partitions in
    /// `batch`, whose `Drop` requeues them: one ambiguous put at most, which a sealed unit's
    /// retry then finds under its key.
    pub async fn publish_owned(&self, batch: &mut RecoverableBatch<Partition>) -> PublishReport {
        let mut report = PublishReport::default();
        let zstd = self.inner.config.zstd;
        for index in batch.pending_indices() {
            if batch.state(index) != ItemState::Pending {
                continue;
            }
            let lease = batch.begin(index);
            let (tenant, watermark) = {
                let p = batch.item(&lease);
                (p.key.tenant.clone(), p.audit_watermark)
            };
            if self.is_terminal(&tenant) {
                batch.requeue(lease);
                report.refused_terminal += 1;
                continue;
            }
            if !self.inner.audit.is_durable_through(&tenant, watermark) {
                ::metrics::counter!(metrics::SINK_REFUSED_UNORDERED).increment(1);
                batch.requeue(lease);
                report.refused_unordered += 1;
                continue;
            }
            let sealed = batch.item(&lease).sealed.clone();
            let encoded = match encode_records(&batch.item(&lease).records, zstd) {
                Ok(bytes) => Ok(bytes),
                // A sealed unit's content is fixed (its intent names every record): it encoded
                // when it was sealed, and nothing may be taken out of it now.
                Err(e) if sealed.is_some() => Err(e),
                Err(_) => {
                    let part = batch.item_mut(&lease);
                    let poisoned = find_poisoned(&part.records, zstd);
                    let removed = take_poisoned(part, poisoned);
                    let key_text = part.key.to_string();
                    report.quarantined += removed.len();
                    for (record, error) in removed {
                        let _ = self.quarantine(
                            record,
                            key_text.clone(),
                            error.to_string(),
                            error.error_type(),
                        );
                    }
                    if batch.item(&lease).records.is_empty() {
                        // Every record is quarantined (and held): nothing left to put.
                        let p = batch.settle(lease, Settlement::Dropped);
                        self.settled(&p);
                        continue;
                    }
                    encode_records(&batch.item(&lease).records, zstd)
                }
            };
            let bytes = match encoded {
                Ok(bytes) => bytes,
                Err(e) => {
                    // No record is to blame (each encodes alone): not a quarantine; requeue and
                    // report it as permanent for the publisher to decide.
                    ::metrics::counter!(metrics::FLUSH_ERRORS, "error.type" => e.error_type(), "consumer" => "records")
                        .increment(1);
                    let key = batch.item(&lease).key.clone();
                    batch.requeue(lease);
                    report.requeued += 1;
                    report.permanent.push(PublishFailure {
                        key,
                        error: e.to_string(),
                    });
                    continue;
                }
            };
            let (path, create_only) = match (sealed, self.sealer()) {
                (Some(sealed), _) => (Path::from(sealed), true),
                (None, Some(sealer)) => match self.seal(&*sealer, batch.item(&lease)) {
                    Ok(path) => {
                        batch.item_mut(&lease).sealed = Some(path.to_string());
                        (path, true)
                    }
                    Err(error) => {
                        // The intent is not durable: the unit stays open and is retried.
                        ::metrics::counter!(metrics::FLUSH_ERRORS, "error.type" => "seal", "consumer" => "records")
                            .increment(1);
                        let key = batch.item(&lease).key.clone();
                        batch.requeue(lease);
                        report.requeued += 1;
                        report.unsealed.push(PublishFailure { key, error });
                        continue;
                    }
                },
                (None, None) => (self.unique_path(batch.item(&lease)), false),
            };
            // A panic here is a panic inside the record publish with this partition InFlight.
            fail::fail_point!("sinks::publish::before_put");
            // Create-only for a sealed unit: the key is taken only by an earlier attempt at this
            // very unit.
            let put = crate::store::put(
                self.inner.store.as_ref(),
                &path,
                bytes,
                create_only,
                "records",
            )
            .await;
            match put {
                Ok(put) => {
                    let p = batch.settle(lease, Settlement::Durable);
                    self.settled(&p);
                    report.durable += 1;
                    report.durable_records += p.records.len();
                    if put == Put::AlreadyThere {
                        report.already_present += p.records.len();
                        ::metrics::counter!(metrics::SINK_ALREADY_PRESENT)
                            .increment(p.records.len() as u64);
                    } else {
                        ::metrics::counter!(metrics::SINK_RECORDS_PUBLISHED)
                            .increment(p.records.len() as u64);
                    }
                }
                Err((class, e)) => {
                    let key = batch.item(&lease).key.clone();
                    batch.requeue(lease);
                    report.requeued += 1;
                    if class == ErrorClass::Permanent {
                        report.permanent.push(PublishFailure {
                            key,
                            error: format!("put {path} failed permanently: {e}"),
                        });
                    }
                }
            }
        }
        self.release_quarantined();
        report
    }
}

/// Remove the poisoned records from `part` (recomputing its accounting) and return them with
/// their errors.
fn take_poisoned(
    part: &mut Partition,
    poisoned: Vec<(usize, EncodeError)>,
) -> Vec<(LogRecord, EncodeError)> {
    let mut errors: BTreeMap<usize, EncodeError> = poisoned.into_iter().collect();
    let mut kept = Vec::with_capacity(part.records.len());
    let mut removed = Vec::new();
    for (i, r) in std::mem::take(&mut part.records).into_iter().enumerate() {
        match errors.remove(&i) {
            Some(e) => removed.push((r, e)),
            None => kept.push(r),
        }
    }
    part.records = kept;
    part.recompute();
    removed
}

impl RequeueTarget<Partition> for SharedParquetSink {
    fn requeue(&self, items: Vec<Partition>, cause: RequeueCause) {
        metrics::count_requeue("records", items.len(), cause);
        SharedParquetSink::requeue(self, items);
    }
}
