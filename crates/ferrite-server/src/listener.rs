//! Accepting connections and stopping: [`Server`].
//!
//! Each client gets a thread (see `ARCHITECTURE.md`), waiting in a poll
//! on its socket and its mailbox; two more run the expiry cycle and the
//! sweeper. `maxclients` bounds the client threads.
//!
//! Stopping (`SHUTDOWN`, a signal, [`Server::shutdown`]): the accept loop
//! stops taking connections, each connection finishes the commands it
//! has received and closes, the background threads stop, then the store
//! is closed (synced, background work stopped) and its result reported
//! by [`Server::wait`].

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener};
use std::os::unix::net::UnixListener;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use ferrite::Store;

use crate::config::ServerConfig;
use crate::model::Keyspace;
use crate::shared::Shared;
use crate::stream::Stream;
use crate::ServerError;

/// How long the accept loop sleeps when no connection is waiting.
const ACCEPT_TICK: Duration = Duration::from_millis(5);

/// A running server.
pub struct Server {
    shared: Arc<Shared>,
    local: SocketAddr,
    accept: Option<JoinHandle<Vec<JoinHandle<()>>>>,
    background: Vec<JoinHandle<()>>,
}

impl Server {
    /// Serves `store` as `config` says, from threads of its own.
    pub fn start(config: ServerConfig, store: Store) -> Result<Self, ServerError> {
        let tcp = TcpListener::bind(config.listen).map_err(|e| ServerError::Bind {
            addr: config.listen.to_string(),
            source: e,
        })?;
        let local = tcp.local_addr().map_err(ServerError::Io)?;
        tcp.set_nonblocking(true).map_err(ServerError::Io)?;
        let unix = match &config.unix {
            Some(path) => {
                let _ = std::fs::remove_file(path);
                let l = UnixListener::bind(path).map_err(|e| ServerError::Bind {
                    addr: path.display().to_string(),
                    source: e,
                })?;
                l.set_nonblocking(true).map_err(ServerError::Io)?;
                Some(l)
            }
            None => None,
        };
        let ks = Keyspace::open(store).map_err(ServerError::Model)?;
        let shared = Arc::new(Shared::new(config, ks));
        let background = crate::background::spawn(&shared).map_err(ServerError::Io)?;
        let sh = shared.clone();
        let accept = std::thread::Builder::new()
            .name("ferrite-accept".into())
            .spawn(move || accept_loop(&sh, &tcp, unix.as_ref()))
            .map_err(ServerError::Io)?;
        Ok(Self {
            shared,
            local,
            accept: Some(accept),
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
        let conns = self
            .accept
            .take()
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default();
        for c in conns {
            let _ = c.join();
        }
        for b in self.background.drain(..) {
            let _ = b.join();
        }
        if let Some(path) = &self.shared.config.unix {
            let _ = std::fs::remove_file(path);
        }
        match Arc::try_unwrap(self.shared) {
            Ok(shared) => shared.ks.into_store().close().map_err(ServerError::Store),
            // Unreachable once every thread is joined; sync what we can.
            Err(shared) => shared.ks.store().sync().map_err(ServerError::Store),
        }
    }
}

fn accept_loop(
    shared: &Arc<Shared>,
    tcp: &TcpListener,
    unix: Option<&UnixListener>,
) -> Vec<JoinHandle<()>> {
    let mut conns: Vec<JoinHandle<()>> = Vec::new();
    while !shared.shutting_down() {
        let mut got = None;
        match tcp.accept() {
            Ok((s, _)) => match Stream::tcp(s) {
                Ok(s) => got = Some(s),
                Err(e) => log::warn!("accept: {e}"),
            },
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => log::warn!("accept: {e}"),
        }
        if got.is_none() {
            if let Some(u) = unix {
                match u.accept() {
                    Ok((s, _)) => match Stream::unix(s) {
                        Ok(s) => got = Some(s),
                        Err(e) => log::warn!("accept: {e}"),
                    },
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) => log::warn!("accept: {e}"),
                }
            }
        }
        let Some(stream) = got else {
            conns.retain(|c| !c.is_finished());
            std::thread::sleep(ACCEPT_TICK);
            continue;
        };
        shared.stats.count_connection();
        let id = shared.next_client_id();
        let sh = shared.clone();
        match std::thread::Builder::new()
            .name(format!("ferrite-client-{id}"))
            .spawn(move || crate::conn::serve(stream, &sh, id))
        {
            Ok(h) => conns.push(h),
            Err(e) => log::warn!("no thread for client {id}: {e}"),
        }
    }
    conns
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
