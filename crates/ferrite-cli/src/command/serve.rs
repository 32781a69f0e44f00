//! `ferrite serve`: a store behind the Redis protocol until SIGINT,
//! SIGTERM or `SHUTDOWN`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use ferrite::{Config, EngineKind, SyncMode};
use ferrite_server::{Limits, Server, ServerConfig};

#[derive(Args)]
pub struct ServeArgs {
    /// Engine of a new store (an existing one is opened with its own).
    #[arg(long)]
    engine: Option<EngineKind>,
    /// The store's directory (created if missing).
    #[arg(long)]
    path: PathBuf,
    /// TCP address to listen on (port 0: any free port, printed at start).
    #[arg(long, default_value = "127.0.0.1:6380")]
    listen: SocketAddr,
    /// A Unix socket to listen on as well.
    #[arg(long)]
    unix: Option<PathBuf>,
    /// Durability: always, never or batched:<ms>.
    #[arg(long, default_value = "batched:10", value_parser = SyncMode::parse)]
    sync: SyncMode,
    /// The store's cache budget in MiB.
    #[arg(long, default_value_t = 256)]
    cache_mb: u64,
    /// Table block compression of an lsm store (none, lz4, zstd or
    /// zstd:LEVEL); tables written from now on use it.
    #[arg(long, default_value = "lz4")]
    compression: ferrite::lsm::Compression,
    /// Connections past this are refused.
    #[arg(long, default_value_t = 10_000)]
    max_clients: usize,
    /// Event loops serving the connections (default: one per core).
    #[arg(long)]
    io_threads: Option<usize>,
    /// Threads that run key reads while they miss the cache, so a read
    /// waiting on the device holds no event loop (default: four per
    /// core; 0 runs every read on its loop).
    #[arg(long)]
    readers: Option<usize>,
    /// Longest argument (value) in bytes.
    #[arg(long, default_value_t = 4 << 20)]
    max_bulk: usize,
    /// Most arguments in one command.
    #[arg(long, default_value_t = 1024 * 1024)]
    max_args: usize,
    /// Seconds a client may leave a request half sent before it is dropped.
    #[arg(long, default_value_t = 30)]
    client_timeout: u64,
    /// Clients must AUTH with this password.
    #[arg(long)]
    requirepass: Option<String>,
    /// Start as a replica of the server at HOST PORT (a store that was a
    /// replica when it stopped follows its master again without this;
    /// `REPLICAOF NO ONE` makes it a master).
    #[arg(long, num_args = 2, value_names = ["HOST", "PORT"])]
    replicaof: Option<Vec<String>>,
    /// Count background work on a board mapped from this file (for
    /// `ferrite crashtest --server`, which reads it after a kill).
    #[arg(long, hide = true)]
    board: Option<std::path::PathBuf>,
}

pub fn run(a: ServeArgs) -> Result<()> {
    // A client that goes away must not take the server with it.
    // SAFETY: called before the server starts any thread; SIG_IGN is a
    // valid disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    let engine = match (a.engine, ferrite::detect(&a.path)) {
        (_, Ok(id)) => id.engine,
        (Some(e), Err(_)) => e,
        (None, Err(e)) => {
            return Err(anyhow::Error::new(e).context(format!(
                "{}: give --engine to create a store there",
                a.path.display()
            )))
        }
    };
    if let Some(b) = &a.board {
        ferrite::background::install_file(b)
            .map_err(|e| anyhow::anyhow!("mapping the board {}: {e}", b.display()))?;
    }
    let cache_bytes = a.cache_mb << 20;
    let builder = Config::builder(engine)
        .sync(ferrite_server::store_sync_mode(a.sync))
        .cache_bytes(cache_bytes);
    let builder = match engine {
        EngineKind::Lsm => {
            // The type layer reads each key it writes (its kind and
            // deadline), so what a flush writes is read back at once.
            builder.lsm(
                ferrite::lsm::LsmOptions::default()
                    .compression(a.compression)
                    .cache_flushed(true),
            )
        }
        _ => builder,
    };
    let store = builder
        .open(&a.path)
        .with_context(|| format!("opening {} as {engine}", a.path.display()))?;
    let mut config = ServerConfig::default();
    config.listen = a.listen;
    config.unix = a.unix;
    config.sync = a.sync;
    config.cache_bytes = cache_bytes;
    config.max_clients = a.max_clients;
    if let Some(n) = a.io_threads {
        anyhow::ensure!(n > 0, "--io-threads must be at least 1");
        config.io_threads = n;
    }
    if let Some(n) = a.readers {
        config.readers = n;
    }
    config.limits = Limits {
        max_bulk: a.max_bulk,
        max_args: a.max_args,
        ..Limits::default()
    };
    config.requirepass = a.requirepass;
    config.client_timeout = Duration::from_secs(a.client_timeout);
    if let Some(m) = &a.replicaof {
        let port: u16 = m[1]
            .parse()
            .with_context(|| format!("--replicaof: {:?} is not a port", m[1]))?;
        config.replicaof = Some((m[0].clone(), port));
    }
    let server = Server::start(config, store)?;
    ferrite_server::stop_on_signals(&server)?;
    // Scripts and tests read the address from the first line.
    println!("ferrite {engine} listening on {}", server.local_addr());
    server.wait().context("closing the store")?;
    eprintln!("ferrite: stopped; the store is closed");
    Ok(())
}
