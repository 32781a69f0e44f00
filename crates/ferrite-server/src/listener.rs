//! Accepting connections and stopping: [`Server`].
//!
//! An acceptor thread waits in a `mio` poll on the listening sockets and
//! hands each new connection to the event loop holding the fewest (see
//! `event_loop`); two more threads run the expiry cycle and the sweeper.
//! `maxclients` bounds the connections; the server raises its open-file
//! limit to hold them, or lowers `maxclients` to what the limit allows and
//! says so.
//!
//! Stopping (`SHUTDOWN`, a signal, [`Server::shutdown`]): the acceptor
//! stops taking connections, each connection finishes the commands it
//! has received and closes, the loops and the background threads stop,
//! then the store is closed (synced, background work stopped) and its
//! result reported by [`Server::wait`].

use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use ferrite::Store;
use ferrite_net::{Listeners, NetError};

use crate::config::ServerConfig;
use crate::event_loop::{EventLoop, Signal};
use crate::model::Keyspace;
use crate::readers::Readers;
use crate::shared::Shared;
use crate::ServerError;

/// How often the acceptor looks at the shutdown flag.
const ACCEPT_TICK: Duration = Duration::from_millis(50);

/// Descriptors kept beside the clients' for the store's files, the
/// listeners and the loops' polls.
const RESERVED_FDS: u64 = 1024;

/// A running server.
pub struct Server {
    shared: Arc<Shared>,
    local: SocketAddr,
    /// The event loops and the acceptor.
    threads: Vec<JoinHandle<()>>,
    background: Vec<JoinHandle<()>>,
}

impl Server {
    /// Serves `store` as `config` says, from threads of its own.
    pub fn start(mut config: ServerConfig, store: Store) -> Result<Self, ServerError> {
        config.max_clients = fit_open_files(config.max_clients);
        let mut listeners =
            Listeners::bind(Some(config.listen), config.unix.as_deref()).map_err(|e| match e {
                NetError::Bind { addr, source } => ServerError::Bind { addr, source },
                other => ServerError::Io(std::io::Error::other(other)),
            })?;
        let local = listeners
            .local_addr()
            .ok_or_else(|| ServerError::Io(std::io::Error::other("no TCP listener")))?;
        let io_threads = config.io_threads.max(1);
        let ks = Keyspace::open(store).map_err(ServerError::Model)?;
        let shared = Shared::new(config, ks)
            .map_err(|e| ServerError::Io(std::io::Error::other(format!("scripting: {e}"))))?
            .into_arc();
        crate::replication::follower::resume(&shared, local.port()).map_err(ServerError::Model)?;
        let mut signals = Vec::with_capacity(io_threads);
        let mut loops = Vec::with_capacity(io_threads);
        // The readers stop after the loops, the last holders of their
        // handle: `wait` joins them after the loops.
        let (readers, reader_threads) =
            Readers::start(&shared, shared.config.readers).map_err(ServerError::Io)?;
        for i in 0..io_threads {
            let (ev, signal) =
                EventLoop::new(shared.clone(), readers.clone()).map_err(ServerError::Io)?;
            signals.push(signal);
            loops.push(
                std::thread::Builder::new()
                    .name(format!("ferrite-io-{i}"))
                    .spawn(move || ev.run())
                    .map_err(ServerError::Io)?,
            );
        }
        drop(readers);
        let mut background = crate::background::spawn(&shared).map_err(ServerError::Io)?;
        background.push(crate::script::runner::spawn(&shared).map_err(ServerError::Io)?);
        let sh = shared.clone();
        let accept = std::thread::Builder::new()
            .name("ferrite-accept".into())
            .spawn(move || accept_loop(&sh, &mut listeners, &signals))
            .map_err(ServerError::Io)?;
        loops.push(accept);
        loops.extend(reader_threads);
        Ok(Self {
            shared,
            local,
            threads: loops,
            background,
        })
    }

    /// The TCP address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The flag that stops it when set (for signal handlers).
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.shared.stop_flag()
    }

    /// Asks it to stop; [`Server::wait`] returns when it has.
    pub fn shutdown(&self) {
        self.shared.begin_shutdown();
    }

    /// Waits until the server stops, then closes the store and reports
    /// whether closing it succeeded.
    pub fn wait(mut self) -> Result<(), ServerError> {
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        for b in self.background.drain(..) {
            let _ = b.join();
        }
        if let Some(path) = &self.shared.config.unix {
            let _ = std::fs::remove_file(path);
        }
        // Replication links end within a second of the shutdown.
        self.shared.repl.drop_all();
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while Arc::strong_count(&self.shared) > 1 && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        match Arc::try_unwrap(self.shared) {
            Ok(shared) => shared.ks.into_store().close().map_err(ServerError::Store),
            // Unreachable once every thread is joined; sync what we can.
            Err(shared) => shared.ks.store().sync().map_err(ServerError::Store),
        }
    }
}

/// Raises the open-file limit to hold `max_clients` connections beside
/// the store's files; if the hard limit forbids it, returns the clients
/// the limit allows and logs why (as Redis lowers `maxclients`).
fn fit_open_files(max_clients: usize) -> usize {
    let want = max_clients as u64 + RESERVED_FDS;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return max_clients;
    }
    if lim.rlim_cur >= want {
        return max_clients;
    }
    let raised = libc::rlimit {
        rlim_cur: want.min(lim.rlim_max),
        rlim_max: lim.rlim_max,
    };
    // SAFETY: setrlimit reads the struct it is given.
    let ok = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0;
    let have = if ok { raised.rlim_cur } else { lim.rlim_cur };
    if have >= want {
        return max_clients;
    }
    let fits = have.saturating_sub(RESERVED_FDS).max(1) as usize;
    log::warn!(
        "maxclients {max_clients} needs {want} open files but the limit is {have} \
         (hard limit {}): maxclients lowered to {fits}; raise `ulimit -n` to hold more",
        lim.rlim_max
    );
    fits
}

fn accept_loop(shared: &Arc<Shared>, listeners: &mut Listeners, loops: &[Arc<Signal>]) {
    while !shared.shutting_down() {
        listeners.accept(ACCEPT_TICK, |stream| {
            shared.stats.count_connection();
            let id = shared.next_client_id();
            // The loop holding the fewest connections.
            if let Some(l) = loops.iter().min_by_key(|l| l.load()) {
                l.hand(stream, id);
            }
        });
    }
    for l in loops {
        l.nudge();
    }
}

/// Makes SIGINT and SIGTERM stop `server` cleanly; a second signal exits
/// the process at once (recovery at the next open handles what was in
/// flight).
pub fn stop_on_signals(server: &Server) -> Result<(), ServerError> {
    let stop = server.stop_flag();
    for sig in signal_hook::consts::TERM_SIGNALS {
        signal_hook::flag::register_conditional_shutdown(*sig, 130, stop.clone())
            .map_err(ServerError::Io)?;
        signal_hook::flag::register(*sig, stop.clone()).map_err(ServerError::Io)?;
    }
    Ok(())
}
