//! `ferrite`: the command-line tool.
//!
//! Each subcommand lives in its own module under `command/`; this file only
//! parses arguments and dispatches. Engines are reached through the
//! `ferrite` facade only, never by type.

mod command;

/// The process allocator is jemalloc, as in redis-server: the server's
/// many threads (event loops, flushers, compactions, the script thread)
/// allocate and free short-lived buffers, and glibc's malloc gives each
/// thread an arena of its own that it rarely hands back to the kernel, so
/// a long-running server's resident memory grew far past what it used.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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
    /// Copy a store, consistently, into a new directory (a backup that
    /// opens as a store; the store must not be open in another process).
    Backup {
        /// The store to copy.
        #[arg(long)]
        path: PathBuf,
        /// Where the copy goes; must not exist.
        #[arg(long)]
        to: PathBuf,
    },
    /// Check a backup and copy it into a new store directory.
    Restore {
        /// The backup (`ferrite backup --to`).
        #[arg(long)]
        from: PathBuf,
        /// Where the restored store goes; must not exist.
        #[arg(long)]
        path: PathBuf,
    },
    /// List the engines and whether this build contains them.
    Engines,
    /// Measure dependent versus batched 4 KiB O_DIRECT random reads
    /// (runs `ferrite-bench io-probe`).
    #[command(disable_help_flag = true)]
    IoProbe(Forwarded),
    /// Compare stores side by side on YCSB or custom workloads (runs
    /// `ferrite-bench bench`).
    #[command(disable_help_flag = true)]
    Bench(Forwarded),
    /// Run a paper experiment and judge its claims, `ferrite repro list`
    /// for the list (runs `ferrite-bench repro`).
    #[command(disable_help_flag = true)]
    Repro(Forwarded),
    /// Summarise a block I/O trace as the replayer sees it.
    Trace(command::trace::TraceArgs),
    /// Serve a store over the Redis protocol (RESP2/RESP3) until SIGINT,
    /// SIGTERM or SHUTDOWN.
    Serve(command::serve::ServeArgs),
    /// A virtual disk whose block map is RASK, served over NBD.
    Volume {
        #[command(subcommand)]
        op: command::volume::VolumeOp,
    },
    /// Kill a worker process at random instants, reopen, and check that
    /// every acknowledged write survived, for one engine (runs
    /// `ferrite-crashtest run`).
    #[command(disable_help_flag = true)]
    Crashtest(Forwarded),
}

/// A subcommand's arguments, passed on unparsed (`--help` included).
#[derive(clap::Args)]
struct Forwarded {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    args: Vec<std::ffi::OsString>,
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

fn main() -> anyhow::Result<()> {
    restore_sigpipe();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    match cli.command {
        Command::Demo { dir } => command::demo::run(dir),
        Command::Kv { op } => command::kv::run(op),
        Command::Rask { op } => command::rask::run(op),
        Command::Inspect { path } => command::inspect::run(&path),
        Command::Backup { path, to } => command::backup::backup(&path, &to),
        Command::Restore { from, path } => command::backup::restore(&from, &path),
        Command::Engines => {
            command::engines::print();
            Ok(())
        }
        Command::IoProbe(f) => std::process::exit(command::harness::bench("io-probe", &f.args)?),
        Command::Bench(f) => std::process::exit(command::harness::bench("bench", &f.args)?),
        Command::Repro(f) => std::process::exit(command::harness::bench("repro", &f.args)?),
        Command::Trace(args) => command::trace::run(args),
        Command::Serve(args) => command::serve::run(args),
        Command::Volume { op } => command::volume::run(op),
        Command::Crashtest(f) => std::process::exit(command::harness::crashtest(&f.args)?),
    }
}
