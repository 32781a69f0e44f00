//! `ferrite-bench`: the measuring binary behind `ferrite bench`, `ferrite
//! repro` and `ferrite io-probe`, and of `hit-path`, run directly.
//!
//! It is a binary of its own so that what only measurements need stays
//! out of the user-facing `ferrite` tool: the counting global allocator
//! (index memory is read from it) and the harness with its peers. The
//! `ferrite` tool forwards those three subcommands here unchanged.

mod bench;
mod hit_path;
mod io_probe;
mod repro;

use clap::{Parser, Subcommand};
use ferrite_bench::counting_alloc::CountingAlloc;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

#[derive(Parser)]
#[command(
    name = "ferrite-bench",
    version,
    about = "ferrite's benchmarks: side-by-side comparisons, paper experiments, device probes"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compare stores side by side on YCSB or custom workloads.
    Bench(Box<bench::BenchArgs>),
    /// Run a paper experiment and judge its claims (`repro list`).
    Repro(repro::ReproArgs),
    /// Measure dependent versus batched 4 KiB O_DIRECT random reads.
    IoProbe(io_probe::IoProbeArgs),
    /// Take the B+tree's in-cache lookup apart: ns per lookup, part by part.
    HitPath(hit_path::HitPathArgs),
}

fn main() -> anyhow::Result<()> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    // Record the date and machine now, before any long run starts.
    let _ = ferrite_bench::provenance::Provenance::capture();
    match cli.command {
        Command::Bench(args) => bench::run(*args),
        Command::Repro(args) => repro::run(args),
        Command::IoProbe(args) => io_probe::run(args),
        Command::HitPath(args) => hit_path::run(args),
    }
}
