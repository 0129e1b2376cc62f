//! `ourios-loadgen encode`: the publisher's Parquet encode alone, in process, on one core - the
//! corpus decoded and mined as the node does, cut into partitions of the node's target size,
//! and each encoded with the node's writer properties and with a baseline in the same run, as a
//! ratio. The baseline is Parquet's defaults (ZSTD, a dictionary and statistics on every
//! column), or with `--plain COLUMN` the node's properties with those columns' dictionaries
//! off: what a change to `PLAIN_COLUMNS` would buy. `--columns` prints what each column of the
//! node's files is written as.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Result, ensure};
use bytes::Bytes;
use ourios_miner::{MinerConfig, SystemClock, TenantMiner};
use ourios_node::otlp::{self, Format};
use ourios_sinks::{LogRecord, Params, RecordId, Tenant};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use parquet::file::reader::FileReader;
use parquet::file::serialized_reader::SerializedFileReader;
use parquet::schema::types::ColumnPath;

use crate::decode::{UNLIMITED, median};
use crate::{Corpus, Load};

#[derive(Debug, clap::Args)]
pub(crate) struct EncodeArgs {
    /// Which bodies: the synthetic ones or the realistic corpus.
    #[arg(long, value_enum, default_value = "realistic")]
    corpus: Corpus,
    /// A partition is encoded when its records reach this many estimated bytes (the node's
    /// `--partition-target-bytes`).
    #[arg(long, default_value_t = 8 << 20)]
    partition_bytes: usize,
    /// Timed rounds; each encodes every partition both ways (the median is printed).
    #[arg(long, default_value_t = 7)]
    rounds: usize,
    /// Compare with the node's properties plus no dictionary on this column (a leaf path such
    /// as `attributes.entries.values`; repeatable) instead of with Parquet's defaults.
    #[arg(long)]
    plain: Vec<String>,
    /// Afterwards print each column of the node's first partition: its encodings, whether it
    /// has a dictionary page, and its bytes.
    #[arg(long)]
    columns: bool,
}

pub(crate) fn encode(args: &EncodeArgs) -> Result<()> {
    let partitions = partitions(args)?;
    let records: usize = partitions.iter().map(Vec::len).sum();
    println!(
        "{records} {} records in {} partitions of about {} MiB, one core",
        args.corpus,
        partitions.len(),
        args.partition_bytes >> 20
    );
    let node = ourios_sinks::record_writer_properties(true);
    let (baseline_name, baseline) = if args.plain.is_empty() {
        let defaults = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .build();
        ("Parquet defaults", defaults)
    } else {
        let mut builder = node.clone().into_builder();
        for column in &args.plain {
            let path = ColumnPath::from(column.split('.').map(str::to_owned).collect::<Vec<_>>());
            builder = builder.set_column_dictionary_enabled(path, false);
        }
        ("node + --plain", builder.build())
    };
    // Both must hold every row, or the ratio compares different work.
    for partition in &partitions {
        for properties in [&baseline, &node] {
            let file = ourios_sinks::encode_records_with(partition, properties.clone())?;
            let rows = SerializedFileReader::new(Bytes::from(file))?
                .metadata()
                .file_metadata()
                .num_rows();
            ensure!(
                usize::try_from(rows)? == partition.len(),
                "a file lost rows"
            );
        }
    }
    let mut timings = [Vec::new(), Vec::new()];
    let mut sizes = [0usize; 2];
    for _ in 0..args.rounds.max(1) {
        for (k, properties) in [&baseline, &node].into_iter().enumerate() {
            let start = Instant::now();
            let mut bytes = 0;
            for partition in &partitions {
                bytes += ourios_sinks::encode_records_with(partition, properties.clone())?.len();
            }
            timings[k].push(start.elapsed().as_secs_f64() * 1e6 / records as f64);
            sizes[k] = bytes;
        }
    }
    let (d, n) = (median(&mut timings[0]), median(&mut timings[1]));
    let per_record = |bytes: usize| bytes as f64 / records as f64;
    println!(
        "{baseline_name:<24} {d:>6.2} µs/record, {:>6.0} bytes/record (median of {})",
        per_record(sizes[0]),
        timings[0].len()
    );
    println!(
        "{:<24} {n:>6.2} µs/record, {:>6.0} bytes/record",
        "the node's properties",
        per_record(sizes[1])
    );
    println!(
        "ratio: the node's encode is {:.2}x as fast as the baseline's ({:.2}x its bytes)",
        d / n,
        sizes[1] as f64 / sizes[0].max(1) as f64
    );
    if args.columns
        && let Some(first) = partitions.first()
    {
        print_columns(first, node)?;
    }
    Ok(())
}

/// The corpus as the node's records: decoded, mined by one warm miner (as a running node's is)
/// and cut into partitions of `partition_bytes` estimated bytes.
fn partitions(args: &EncodeArgs) -> Result<Vec<Vec<LogRecord>>> {
    let load = Load::new(args.corpus, 1, 1000);
    let requests = load.bodies[0]
        .iter()
        .map(|body| {
            otlp::decode_decompressed(Format::Protobuf, Cow::from(&body[..]), UNLIMITED)
                .map(|(_, lines)| lines)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let tenant = Tenant::new("bench");
    let mut miner = TenantMiner::new("bench", MinerConfig::default(), Arc::new(SystemClock));
    for line in requests.iter().flatten() {
        miner.ingest(&line.body);
    }
    let mut partitions = vec![Vec::new()];
    let mut bytes = 0usize;
    for (lsn, lines) in (1..).zip(requests) {
        for (index, line) in (0..).zip(lines) {
            let mined = miner.ingest(&line.body).record;
            let mut params = Params::with_capacity(mined.params.len(), mined.params.text_len());
            params.extend(&mined.params);
            let record = LogRecord {
                wal_id: [7; 16],
                id: RecordId { lsn, index },
                tenant: tenant.clone(),
                time_unix_nano: line.time_unix_nano,
                observed_time_unix_nano: line.observed_time_unix_nano,
                severity_number: line.severity_number,
                severity_text: line.severity_text,
                template_key: mined.template_key.0,
                template_id: mined.template_id,
                template_version: mined.template_version,
                params,
                body: mined.body,
                attributes: line.attributes,
                resource_attributes: line.resource_attributes,
                trace_id: line.trace_id,
                span_id: line.span_id,
                audit_watermark: 0,
            };
            bytes += record.estimated_bytes();
            if bytes > args.partition_bytes {
                partitions.push(Vec::new());
                bytes = record.estimated_bytes();
            }
            partitions
                .last_mut()
                .expect("one partition at least")
                .push(record);
        }
    }
    Ok(partitions)
}

/// Each column of `records` written with `properties`: encodings, dictionary, bytes.
fn print_columns(records: &[LogRecord], properties: WriterProperties) -> Result<()> {
    let file = ourios_sinks::encode_records_with(records, properties)?;
    let reader = SerializedFileReader::new(Bytes::from(file))?;
    let mut columns = std::collections::BTreeMap::<String, (String, bool, i64, i64)>::new();
    for group in reader.metadata().row_groups() {
        for chunk in group.columns() {
            let entry = columns
                .entry(chunk.column_path().string())
                .or_insert_with(|| {
                    (
                        format!("{:?}", chunk.encodings().collect::<Vec<_>>()),
                        false,
                        0,
                        0,
                    )
                });
            entry.1 |= chunk.dictionary_page_offset().is_some();
            entry.2 += chunk.compressed_size();
            entry.3 += chunk.uncompressed_size();
        }
    }
    println!(
        "{:<40} {:>10} {:>12} {:>12}  encodings",
        "column", "dictionary", "compressed", "plain"
    );
    for (path, (encodings, dictionary, compressed, plain)) in columns {
        println!(
            "{path:<40} {:>10} {compressed:>12} {plain:>12}  {encodings}",
            if dictionary { "yes" } else { "no" }
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The partitions hold every record of the corpus once, in order, each within the target
    /// size (a record larger than it alone), so both sides of the ratio encode the same rows.
    #[test]
    fn partitions_hold_every_record_once_within_the_target() {
        let args = EncodeArgs {
            corpus: Corpus::Realistic,
            partition_bytes: 1 << 20,
            rounds: 1,
            plain: Vec::new(),
            columns: false,
        };
        let partitions = partitions(&args).unwrap();
        let ids: Vec<(u64, u32)> = partitions
            .iter()
            .flatten()
            .map(|r| (r.id.lsn, r.id.index))
            .collect();
        let mut unique = ids.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique, ids, "ids repeat or are out of order");
        let load = Load::new(Corpus::Realistic, 1, 1000);
        let expected: usize = load.bodies[0]
            .iter()
            .map(|b| otlp::wire_record_count(b).unwrap())
            .sum();
        assert_eq!(ids.len(), expected, "a line of the corpus is missing");
        assert!(partitions.len() > 1, "the target did not cut the corpus");
        for partition in &partitions {
            let bytes: usize = partition.iter().map(LogRecord::estimated_bytes).sum();
            assert!(
                bytes <= args.partition_bytes || partition.len() == 1,
                "a partition of {bytes} bytes"
            );
        }
    }
}
