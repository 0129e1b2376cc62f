//! `ourios-loadgen body`: one OTLP/HTTP protobuf request body in a file, for a client this
//! project did not write. ApacheBench (`ab -p body.pb -T application/x-protobuf`) repeats one
//! body; this writes it from the bench's corpora, or from a text file's lines (one record each),
//! which is how a measurement on real lines is taken: a machine's own logs, not generated ones.

use std::io::BufRead as _;
use std::path::PathBuf;

use anyhow::{Context, Result, ensure};

use crate::{Corpus, Rng, corpus};

#[derive(Debug, clap::Args)]
pub(crate) struct BodyArgs {
    /// Where the body goes.
    #[arg(long)]
    out: PathBuf,
    /// Records in the body.
    #[arg(long, default_value_t = 10)]
    lines: usize,
    /// What the records carry: a corpus of the bench's (the request the bench itself sends),
    /// unless `--from` names a file.
    #[arg(long, value_enum, default_value = "realistic")]
    corpus: Corpus,
    /// A text file whose lines become the records' bodies (blank lines skipped), taken from
    /// its start: `--from /var/log/dpkg.log`. Its first `--lines` non-blank lines are used.
    #[arg(long)]
    from: Option<PathBuf>,
}

pub(crate) fn body(args: &BodyArgs) -> Result<()> {
    ensure!(args.lines > 0, "body: --lines must be at least 1");
    let (bytes, source) = match &args.from {
        Some(path) => {
            let file = std::fs::File::open(path)
                .with_context(|| format!("body: opening {}", path.display()))?;
            let mut lines = Vec::with_capacity(args.lines);
            for line in std::io::BufReader::new(file).lines() {
                // A line that is not UTF-8 is not a string body; say so rather than guess.
                let line = line.with_context(|| format!("body: reading {}", path.display()))?;
                if !line.trim().is_empty() {
                    lines.push(line);
                }
                if lines.len() == args.lines {
                    break;
                }
            }
            ensure!(
                lines.len() == args.lines,
                "body: {} has {} non-blank lines, fewer than --lines {}",
                path.display(),
                lines.len(),
                args.lines
            );
            let records = lines.iter().map(|line| ((9, "INFO"), line));
            (
                crate::request_of("bench-body", records),
                path.display().to_string(),
            )
        }
        None => {
            let mut rng = Rng::with_seed(0x9e37_79b9_7f4a_7c15);
            let realistic = corpus::Corpus::new(0x5eed);
            let bytes = args.corpus.request(&realistic, &mut rng, 0, args.lines);
            (bytes, format!("the {} corpus", args.corpus))
        }
    };
    std::fs::write(&args.out, &bytes)
        .with_context(|| format!("body: writing {}", args.out.display()))?;
    println!(
        "{}: {} records from {source}, {} bytes; send it with\n  ab -k -c 16 -n 20000 -p {} \
         -T application/x-protobuf -H 'X-Scope-OrgID: bench-0' http://127.0.0.1:4318/v1/logs",
        args.out.display(),
        args.lines,
        bytes.len(),
        args.out.display(),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use prost::Message;

    use super::*;

    fn bodies_of(bytes: &[u8]) -> Vec<String> {
        let request = ExportLogsServiceRequest::decode(bytes).expect("a valid OTLP request");
        request
            .resource_logs
            .iter()
            .flat_map(|r| &r.scope_logs)
            .flat_map(|s| &s.log_records)
            .map(|r| match r.body.as_ref().and_then(|b| b.value.as_ref()) {
                Some(opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(s)) => {
                    s.clone()
                }
                other => panic!("not a string body: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_files_lines_become_the_records_in_order_blank_ones_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("syslog");
        std::fs::write(&from, "first line\n\n  \nsecond line é\nthird\nfourth\n").unwrap();
        let out = dir.path().join("body.pb");
        body(&BodyArgs {
            out: out.clone(),
            lines: 3,
            corpus: Corpus::Realistic,
            from: Some(from.clone()),
        })
        .unwrap();
        assert_eq!(
            bodies_of(&std::fs::read(&out).unwrap()),
            ["first line", "second line é", "third"]
        );
        // Too few lines is a refusal that names the counts, not a shorter body.
        let err = body(&BodyArgs {
            out,
            lines: 5,
            corpus: Corpus::Realistic,
            from: Some(from),
        })
        .unwrap_err();
        assert!(err.to_string().contains("4 non-blank lines"), "{err}");
    }

    #[test]
    fn a_corpus_body_holds_the_asked_number_of_records() {
        let dir = tempfile::tempdir().unwrap();
        for corpus in [Corpus::Synthetic, Corpus::Realistic] {
            let out = dir.path().join(format!("{corpus}.pb"));
            body(&BodyArgs {
                out: out.clone(),
                lines: 7,
                corpus,
                from: None,
            })
            .unwrap();
            let bodies = bodies_of(&std::fs::read(&out).unwrap());
            assert_eq!(bodies.len(), 7, "{corpus}");
            assert!(bodies.iter().all(|b| !b.is_empty()), "{corpus}");
        }
    }
}
