//! `ferrite`: the command-line tool.
//!
//! Each subcommand lives in its own module under `command/`; this file only
//! parses arguments and dispatches. Engines are reached through the
//! `ferrite` facade only, never by type.

mod command;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "ferrite",
    version,
    about = "SSD-native key-value storage engines"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// A guided tour of what this build contains, in a temporary directory.
    Demo {
        /// Run in this directory instead of a fresh temporary one.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Read and write a store.
    Kv {
        #[command(subcommand)]
        op: command::kv::KvOp,
    },
    /// Map block ranges to physical runs in a durable RASK index.
    Rask {
        #[command(subcommand)]
        op: command::rask::RaskOp,
    },
    /// Describe a store directory: engine, size, statistics, invariants.
    Inspect {
        #[arg(long)]
        path: PathBuf,
    },
    /// List the engines and whether this build contains them.
    Engines,
    /// Measure dependent versus batched 4 KiB O_DIRECT random reads.
    IoProbe(command::io_probe::IoProbeArgs),
    /// Compare stores side by side on YCSB or custom workloads.
    Bench(Box<command::bench::BenchArgs>),
    /// Run a paper experiment and judge its claims (`ferrite repro list`).
    Repro(command::repro::ReproArgs),
    /// Summarise a block I/O trace as the replayer sees it.
    Trace(command::trace::TraceArgs),
}

/// Lets a closed output pipe (`ferrite kv scan ... | head`) end the
/// process quietly, as it ends other Unix tools, rather than make the next
/// `println!` panic: Rust's runtime ignores SIGPIPE by default.
fn restore_sigpipe() {
    // SAFETY: called first thing in `main`, before any other thread exists;
    // SIG_DFL is a valid disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(feature = "counting-alloc")]
#[global_allocator]
static ALLOC: ferrite_bench::counting_alloc::CountingAlloc =
    ferrite_bench::counting_alloc::CountingAlloc::new();

fn main() -> anyhow::Result<()> {
    restore_sigpipe();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    // Record commit and machine now, before any long run starts.
    let _ = ferrite_bench::provenance::Provenance::capture();
    match cli.command {
        Command::Demo { dir } => command::demo::run(dir),
        Command::Kv { op } => command::kv::run(op),
        Command::Rask { op } => command::rask::run(op),
        Command::Inspect { path } => command::inspect::run(&path),
        Command::Engines => {
            command::engines::print();
            Ok(())
        }
        Command::IoProbe(args) => command::io_probe::run(args),
        Command::Bench(args) => command::bench::run(*args),
        Command::Repro(args) => command::repro::run(args),
        Command::Trace(args) => command::trace::run(args),
    }
}
