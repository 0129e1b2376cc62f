//! `ourios-loadgen mine`: the miner alone on a corpus, in process, on one core - what mining
//! costs per line without the node's I/O, threads and encoding around it, and what the miner
//! made of the corpus (templates created and widened). `PROFILE.md` profiles the node; this is
//! the loop to profile when the node's profile says the time is the miner's.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use ourios_miner::{MinerConfig, SystemClock, TenantMiner};

use crate::{Corpus, Rng, corpus};

#[derive(Debug, clap::Args)]
pub(crate) struct MineArgs {
    /// Which lines: the synthetic bodies or the realistic corpus.
    #[arg(long, value_enum, default_value = "realistic")]
    corpus: Corpus,
    /// Distinct lines generated, then mined in order.
    #[arg(long, default_value_t = 200_000)]
    lines: usize,
    /// Passes over the lines after the first (a warm miner: no new templates).
    #[arg(long, default_value_t = 2)]
    warm_passes: usize,
    /// Afterwards print the token counts holding the most templates and the last N templates
    /// created (what a corpus that makes too many templates makes).
    #[arg(long, default_value_t = 0)]
    show_templates: usize,
}

pub(crate) fn mine(args: &MineArgs) -> Result<()> {
    let mut rng = Rng::with_seed(0x9e37_79b9_7f4a_7c15);
    let realistic = corpus::Corpus::new(0x5eed);
    let lines: Vec<String> = (0..args.lines)
        .map(|_| args.corpus.line(&realistic, &mut rng))
        .collect();
    let bytes: usize = lines.iter().map(String::len).sum();
    // What the miner holds: resident memory grows by it (the lines were generated above).
    let me = std::process::id();
    let rss_before = ourios_testkit::procfs::rss_kib(me).map(|(_, now)| now);
    let mut miner = TenantMiner::new("bench", MinerConfig::default(), Arc::new(SystemClock));
    let pass = |name: &str, miner: &mut TenantMiner| {
        let start = Instant::now();
        let mut params = 0usize;
        for line in &lines {
            params += miner.ingest(line).record.params.len();
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "{name:>5}: {:>9.0} lines/s, {:>6.2} µs/line, {:>5.0} MB/s ({params} parameters)",
            lines.len() as f64 / secs,
            secs * 1e6 / lines.len() as f64,
            bytes as f64 / secs / 1e6,
        );
    };
    println!(
        "{} {} lines, {:.0} bytes/line, one core",
        lines.len(),
        args.corpus,
        bytes as f64 / lines.len().max(1) as f64
    );
    pass("cold", &mut miner);
    for _ in 0..args.warm_passes {
        pass("warm", &mut miner);
    }
    let widened = miner.templates().filter(|(_, v, _)| *v > 1).count();
    println!("templates: {} ({widened} widened)", miner.template_count());
    let rss_after = ourios_testkit::procfs::rss_kib(me).map(|(_, now)| now);
    let grown = match (rss_before, rss_after) {
        (Some(a), Some(b)) => format!("{:.2} MiB", b.saturating_sub(a) as f64 / 1024.0),
        _ => "unknown".to_owned(),
    };
    println!(
        "the miner's state: about {:.2} MiB by its own count, resident memory grew {grown}",
        miner.approx_heap_bytes() as f64 / (1024.0 * 1024.0),
    );
    if args.show_templates > 0 {
        // Where the templates are: Drain compares a line only with templates of its token
        // count, so a crowded count is where mining time goes.
        let mut by_len = std::collections::BTreeMap::<usize, usize>::new();
        for (_, _, t) in miner.templates() {
            *by_len.entry(t.token_count()).or_default() += 1;
        }
        let mut crowded: Vec<_> = by_len.into_iter().collect();
        crowded.sort_by_key(|&(_, n)| std::cmp::Reverse(n));
        crowded.truncate(10);
        println!("templates by token count, most first (tokens, templates): {crowded:?}");
        let skip = miner.template_count().saturating_sub(args.show_templates);
        println!("the last {} templates created:", args.show_templates);
        for (id, version, t) in miner.templates().skip(skip) {
            let text = t.to_string();
            let cut = text.floor_char_boundary(300);
            println!("  {id} v{version}: {}", &text[..cut]);
        }
    }
    Ok(())
}
