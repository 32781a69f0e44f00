//! `ferrite repro` (`ferrite-bench repro`): paper experiments with their claims, measured.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use ferrite_bench::repro::{self, ReproContext, Scale};

#[derive(Args)]
pub struct ReproArgs {
    /// Experiment name, or `list` (every experiment with its claims and
    /// its sizes at each scale).
    experiment: String,
    /// smoke (seconds, for CI), default (≤ ~10 minutes, claims judged) or full.
    #[arg(long, default_value = "default")]
    scale: String,
    /// Write the result JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write Markdown and plots into this directory (e.g. docs/results).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Scratch directory for the stores.
    #[arg(long, default_value = ".")]
    work_dir: PathBuf,
    #[arg(long, default_value = "../shared/data")]
    data_dir: PathBuf,
    /// More real key sets (SOSD files, `*.u64`), used beside
    /// DATA_DIR/keys where an experiment compares key sets;
    /// `scripts/make-keys.sh` writes them.
    #[arg(long, default_value = "data/keys")]
    keys_dir: PathBuf,
    /// A recording of a volume's block-map operations (`ferrite volume
    /// serve --record-map-ops FILE`), replayed by `rask` beside the
    /// traces; repeatable.
    #[arg(long = "ops", value_name = "FILE")]
    ops: Vec<PathBuf>,
    /// `volume`: record the RASK volume's block-map operations of each
    /// phase into DIR/<phase>.ops (for `rask --ops`).
    #[arg(long, value_name = "DIR")]
    record_map_ops: Option<PathBuf>,
    /// Table block compression of the LSM stores and of the peers that
    /// compress: none, lz4 or zstd[:LEVEL].
    #[arg(long, default_value_t = ferrite::lsm::Compression::default())]
    compression: ferrite::lsm::Compression,
    /// Allow a debug build (only sensible at smoke scale).
    #[arg(long)]
    allow_debug: bool,
    /// Rebuild the Markdown and plots in --out from the JSON of an earlier
    /// run, without measuring again.
    #[arg(long)]
    rerender: bool,
}

/// Every experiment with its claims and its sizes at each scale.
fn list(out: &mut impl Write) -> std::io::Result<()> {
    for e in repro::registry() {
        writeln!(out, "{:<12} {}", e.name(), e.summary())?;
        for c in e.claims() {
            writeln!(
                out,
                "{:<12}   {} {}  (paper: {})",
                "", c.metric, c.target, c.paper
            )?;
        }
        for r in e.sizes() {
            let [smoke, default, full] = r.at;
            writeln!(
                out,
                "{:<12}   size {}: {smoke} (smoke), {default} (default), {full} (full)",
                "", r.name
            )?;
        }
    }
    Ok(())
}

pub fn run(a: ReproArgs) -> Result<()> {
    if a.experiment == "list" {
        // A closed pipe (`repro list | head`) ends the listing quietly.
        let _ = list(&mut std::io::stdout().lock());
        return Ok(());
    }
    let scale = Scale::parse(&a.scale)?;
    if cfg!(debug_assertions) && !a.allow_debug && scale != Scale::Smoke {
        bail!("experiments need a release build: cargo run --release -- repro ...");
    }
    let exp = repro::find(&a.experiment)?;
    let ctx = ReproContext {
        scale,
        out_dir: a.out.clone(),
        work_dir: a.work_dir.clone(),
        data_dir: a.data_dir.clone(),
        keys_dir: a.keys_dir.clone(),
        map_ops: a.ops.clone(),
        record_map_ops: a.record_map_ops.clone(),
        compression: a.compression,
        show_progress: true,
    };
    if a.rerender {
        if exp.rerender(&ctx)? {
            // The claims of the run the JSON came from, if it was saved
            // next to the plots as `<out>/<experiment>/repro.json`.
            if let Some(out) = &a.out {
                let saved = out.join(exp.name()).join("repro.json");
                let md = out.join(format!("{}.md", exp.name()));
                if let (Ok(json), true) = (std::fs::read_to_string(&saved), md.exists()) {
                    let report: repro::ReproReport = serde_json::from_str(&json)
                        .with_context(|| format!("reading {}", saved.display()))?;
                    let mut text = std::fs::read_to_string(&md)?;
                    text.push_str(&claims_section(&report));
                    std::fs::write(&md, text)?;
                }
            }
            println!("re-rendered {} from its saved JSON", exp.name());
            return Ok(());
        }
        bail!(
            "{} cannot re-render (give --out with the directory of a previous run)",
            exp.name()
        );
    }
    let report = repro::run(exp.as_ref(), &ctx)?;
    println!(
        "experiment {} at {} scale (commit {})",
        report.experiment,
        scale.name(),
        report.commit
    );
    for c in &report.claims {
        let verdict = match c.holds {
            Some(true) => "holds",
            Some(false) => "DOES NOT HOLD",
            None => "not judged",
        };
        let measured = c.measured.map_or("–".into(), |m| format!("{m:.3}"));
        println!(
            "  {:<32} paper: {:<28} target {:<8} measured {:<10} {verdict}",
            c.name, c.paper, c.target, measured
        );
    }
    println!("  {} metrics", report.metrics.len());
    if let Some(out) = &a.out {
        let md = out.join(format!("{}.md", report.experiment));
        if md.exists() {
            let mut text = std::fs::read_to_string(&md)?;
            text.push_str(&claims_section(&report));
            std::fs::write(&md, text)?;
        }
    }
    if let Some(p) = &a.json {
        ferrite_bench::report::write_file(p, &(serde_json::to_string_pretty(&report)? + "\n"))?;
        println!("wrote {}", p.display());
    }
    Ok(())
}

/// The claims table appended to an experiment's Markdown report.
fn claims_section(r: &repro::ReproReport) -> String {
    let mut s = format!(
        "\n## Claims ({} scale, commit `{}`, {})\n\n| metric | target | measured | verdict |\n|---|---|---|---|\n",
        r.scale.name(),
        r.commit,
        r.date
    );
    for c in &r.claims {
        let measured = c.measured.map_or("–".into(), |m| format!("{m:.3}"));
        let verdict = match c.holds {
            Some(true) => "holds",
            Some(false) => "**does not hold**",
            None => "not judged",
        };
        s.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            c.name, c.target, measured, verdict
        ));
    }
    s
}
