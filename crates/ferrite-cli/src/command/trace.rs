//! `ferrite trace`: parse a block trace and summarise it, as the replayer
//! will see it (4 KiB blocks, the rounding rule of `ferrite_trace`), and
//! optionally write it as a fio iolog for replay against a real export.

use std::collections::HashSet;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use ferrite_trace::{self as trace, BlockRequest, TraceSummary};

#[derive(Args)]
pub struct TraceArgs {
    /// cloudphysics, tectonic or fio.
    #[arg(long)]
    format: String,
    path: PathBuf,
    /// Print the first N requests too.
    #[arg(long, default_value_t = 0)]
    head: usize,
    /// Also write the requests as a fio iolog (v2) to this file, for
    /// `fio --ioengine=nbd --filename=nbd --read_iolog=FILE`.
    #[arg(long)]
    iolog: Option<PathBuf>,
}

pub fn run(a: TraceArgs) -> Result<()> {
    let reqs: Vec<BlockRequest> = trace::parse_named(&a.format, &a.path)?;
    let s = TraceSummary::of(&reqs);
    let distinct: HashSet<u64> = reqs.iter().flat_map(|r| r.start..=r.last()).collect();
    let span = reqs.iter().map(|r| r.time_us).max().unwrap_or(0);
    println!(
        "{}: {} requests over {:.1} s",
        a.path.display(),
        reqs.len(),
        span as f64 / 1e6
    );
    println!(
        "  reads  {:>9} requests, {:>10} blocks",
        s.reads, s.read_blocks
    );
    println!(
        "  writes {:>9} requests, {:>10} blocks",
        s.writes, s.write_blocks
    );
    if s.trims > 0 {
        println!(
            "  trims  {:>9} requests, {:>10} blocks",
            s.trims, s.trim_blocks
        );
    }
    println!("  distinct 4 KiB blocks touched: {}", distinct.len());
    let multi = reqs.iter().filter(|r| r.blocks > 1).count();
    println!(
        "  requests longer than one block: {:.1}%",
        100.0 * multi as f64 / reqs.len().max(1) as f64
    );
    for r in reqs.iter().take(a.head) {
        println!(
            "  {:>12} µs {:<5} blocks {}..={}",
            r.time_us,
            r.op.name(),
            r.start,
            r.last()
        );
    }
    if let Some(path) = &a.iolog {
        let file =
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        let n = trace::write_fio_iolog(file, "nbd", &reqs)
            .with_context(|| format!("writing {}", path.display()))?;
        println!("  wrote {n} requests to {} (fio iolog v2)", path.display());
    }
    Ok(())
}
