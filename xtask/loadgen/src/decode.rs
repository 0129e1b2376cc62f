//! `ourios-loadgen decode`: the node's request decoding alone, in process, on one core - the
//! lines read from the protobuf bytes (`otlp::decode_decompressed`, what the node runs) against
//! prost's decoding and `otlp::into_lines` on the same bodies in the same run, as a ratio.

use std::borrow::Cow;
use std::time::Instant;

use anyhow::{Result, ensure};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use ourios_node::otlp::{self, Format, Limits};
use prost::Message;

use crate::{Corpus, Load};

#[derive(Debug, clap::Args)]
pub(crate) struct DecodeArgs {
    /// Which bodies: the synthetic ones or the realistic corpus.
    #[arg(long, value_enum, default_value = "realistic")]
    corpus: Corpus,
    /// Records per request.
    #[arg(long, default_value_t = 1000)]
    batch: usize,
    /// Timed rounds; each decodes every body both ways (the median is printed).
    #[arg(long, default_value_t = 15)]
    rounds: usize,
}

/// No limit a corpus request could reach: the loops time decoding, not refusals.
pub(crate) const UNLIMITED: Limits = Limits {
    body_bytes: usize::MAX / 8,
    records: usize::MAX,
};

/// The median of `v` (sorted in place); `v` holds one value at least.
pub(crate) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub(crate) fn decode(args: &DecodeArgs) -> Result<()> {
    let load = Load::new(args.corpus, 1, args.batch);
    let bodies = &load.bodies[0];
    let lines: usize = bodies
        .iter()
        .map(|b| otlp::wire_record_count(b).unwrap_or(0))
        .sum();
    let bytes: usize = bodies.iter().map(Vec::len).sum();
    println!(
        "{} requests of {} {} records, {:.0} bytes/record, one core",
        bodies.len(),
        args.batch,
        args.corpus,
        bytes as f64 / lines.max(1) as f64
    );
    // Both ways must make the same lines, or the ratio compares different work.
    for body in bodies {
        let (_, read) =
            otlp::decode_decompressed(Format::Protobuf, Cow::from(&body[..]), UNLIMITED)?;
        ensure!(
            read == otlp::into_lines(ExportLogsServiceRequest::decode(&body[..])?),
            "the node's lines differ from prost's"
        );
    }
    let mut prost_us = Vec::new();
    let mut node_us = Vec::new();
    for _ in 0..args.rounds.max(1) {
        let start = Instant::now();
        for body in bodies {
            let request = ExportLogsServiceRequest::decode(&body[..])?;
            std::hint::black_box(otlp::into_lines(request));
        }
        prost_us.push(start.elapsed().as_secs_f64() * 1e6 / lines as f64);
        let start = Instant::now();
        for body in bodies {
            let decoded =
                otlp::decode_decompressed(Format::Protobuf, Cow::from(&body[..]), UNLIMITED);
            std::hint::black_box(decoded?);
        }
        node_us.push(start.elapsed().as_secs_f64() * 1e6 / lines as f64);
    }
    let (p, n) = (median(&mut prost_us), median(&mut node_us));
    println!(
        "prost + into_lines: {p:>6.2} µs/line (median of {})",
        prost_us.len()
    );
    println!("the node's decode:  {n:>6.2} µs/line (read from the wire, with its checks)");
    println!("ratio: the node's decode is {:.2}x as fast", p / n);
    Ok(())
}
