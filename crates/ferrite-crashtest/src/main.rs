//! `ferrite-crashtest`: the crash tester, a binary of its own so that
//! `ferrite`, the user's binary, carries no harness (`ferrite crashtest`
//! runs this one). It kills a real process at random instants, reopens
//! the store, and checks that it holds exactly what the process's
//! acknowledgments promise (`driver.rs` tells the campaign).
//!
//! | file | owns |
//! |---|---|
//! | `driver.rs` | the campaign: kills, recoveries, the checks, the summary |
//! | `ops.rs` | the seeded operation stream |
//! | `oracle.rs` | which recovered states are allowed (pure) |
//! | `expected.rs` | the expected state beside the store, to resume a run |
//! | `setup.rs` | how each engine is opened (small, so background work runs) |
//! | `worker.rs` | `ferrite-crashtest worker`: the process that gets killed |
//! | `board_file.rs` | the worker's background-work board, readable after its death |
//! | `server_target.rs` | `--server`: `ferrite serve` killed instead, driven by a Redis client |
//! | `volume_target.rs` | `--volume`: `ferrite volume serve` killed instead, driven over NBD |
//! | `served.rs`, `nbd_client.rs` | starting and stopping those servers; the NBD client |
//! | `guest.rs` | the power-cut rig: a qemu guest whose disk loses unflushed writes |
//! | `power_cut.rs` | `--power-cut`: the worker in that guest, the machine killed |

mod board_file;
mod driver;
mod expected;
mod guest;
mod nbd_client;
mod ops;
mod oracle;
mod power_cut;
mod served;
mod server_target;
mod setup;
mod volume_target;
mod worker;

use clap::{Parser, Subcommand};

pub(crate) use driver::*;

#[derive(Parser)]
#[command(name = "ferrite-crashtest", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Kill a worker process at random instants, reopen, and check that
    /// every acknowledged write survived (for one engine).
    Run(CrashtestArgs),
    /// The process `run` kills (internal).
    #[command(hide = true)]
    Worker(WorkerArgs),
}

fn main() -> anyhow::Result<()> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    match Cli::parse().command {
        Command::Run(args) => driver::run(args),
        Command::Worker(w) => worker::run(&w),
    }
}
