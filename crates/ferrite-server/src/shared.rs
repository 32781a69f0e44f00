//! What every connection of a server shares: the data model, the
//! settings, counters, clients, `SCAN` cursors, pub/sub, blocked
//! clients and the shutdown flag.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Instant;

use crate::blocked::{Blocked, Waiter};
use crate::clients::Clients;
use crate::config::ServerConfig;
use crate::cursor::Cursors;
use crate::model::{Event, Keyspace};
use crate::pubsub::PubSub;
use crate::read_route::ReadRoute;
use crate::replication::Replication;
use crate::reply::Reply;
use crate::script::Scripting;
use crate::settings::Settings;
use crate::stats::ServerStats;

pub struct Shared {
    pub config: ServerConfig,
    pub settings: Settings,
    pub ks: Keyspace,
    pub stats: ServerStats,
    pub clients: Clients,
    pub cursors: Cursors,
    pub pubsub: PubSub,
    pub blocked: Blocked,
    pub scripts: Scripting,
    pub repl: Arc<Replication>,
    /// Whether key reads run on the loops or the readers.
    pub route: ReadRoute,
    pub started: Instant,
    /// This node's run id (`INFO server`), fresh at each start.
    pub run_id: String,
    /// When the last save finished, as a Unix time (`LASTSAVE`).
    last_save: AtomicU64,
    /// A `BGSAVE` waits for the background thread.
    save_requested: AtomicBool,
    /// Set by `SHUTDOWN` and by signals.
    shutdown: Arc<AtomicBool>,
    next_client: AtomicU64,
    /// The `Arc` this lives in, for commands that start threads.
    me: OnceLock<Weak<Shared>>,
}

impl Shared {
    /// Fails if the script interpreter cannot start or a stored function
    /// library does not load.
    pub fn new(config: ServerConfig, ks: Keyspace) -> Result<Self, String> {
        let scripts = Scripting::new()?;
        scripts.restore(ks.store())?;
        let repl = Arc::new(Replication::new(crate::replication::BACKLOG_BYTES));
        ks.set_feed(Some(repl.clone()));
        Ok(Self {
            repl,
            run_id: crate::replication::new_id(),
            route: ReadRoute::new(config.readers),
            settings: Settings::new(&config),
            config,
            ks,
            stats: ServerStats::default(),
            clients: Clients::default(),
            cursors: Cursors::default(),
            pubsub: PubSub::default(),
            blocked: Blocked::default(),
            scripts,
            started: Instant::now(),
            last_save: AtomicU64::new(crate::model::now_ms() / 1000),
            save_requested: AtomicBool::new(false),
            shutdown: Arc::new(AtomicBool::new(false)),
            next_client: AtomicU64::new(1),
            me: OnceLock::new(),
        })
    }

    /// Wraps it in the `Arc` the server runs it in.
    pub fn into_arc(self) -> Arc<Self> {
        let a = Arc::new(self);
        let _ = a.me.set(Arc::downgrade(&a));
        a
    }

    /// The `Arc` it lives in (for a thread a command starts).
    pub fn arc(&self) -> Option<Arc<Self>> {
        self.me.get().and_then(Weak::upgrade)
    }

    pub fn begin_shutdown(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        self.clients.nudge_all();
    }

    pub fn shutting_down(&self) -> bool {
        self.shutdown.load(Ordering::SeqCst)
    }

    /// The flag that stops the server, for signal handlers to set.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.shutdown.clone()
    }

    pub fn next_client_id(&self) -> u64 {
        self.next_client.fetch_add(1, Ordering::Relaxed)
    }

    /// Makes every write durable and checkpoints the engine (`SAVE`).
    pub fn save(&self) -> Result<(), ferrite::Error> {
        let changes = self.stats.dirty();
        self.ks.store().flush()?;
        self.ks.store().sync()?;
        self.stats.saved(changes);
        self.last_save
            .store(crate::model::now_ms() / 1000, Ordering::Release);
        Ok(())
    }

    pub fn last_save(&self) -> u64 {
        self.last_save.load(Ordering::Acquire)
    }

    /// Asks the background thread to save (`BGSAVE`).
    pub fn request_save(&self) {
        self.save_requested.store(true, Ordering::Release);
    }

    pub fn save_pending(&self) -> bool {
        self.save_requested.load(Ordering::Acquire)
    }

    /// Takes a pending save request.
    pub fn take_save_request(&self) -> bool {
        self.save_requested.swap(false, Ordering::AcqRel)
    }

    /// Registers a blocked client (the caller holds the keyspace lock).
    pub fn block(&self, w: Waiter) {
        self.blocked.block(w, &|any| self.ks.set_blocked(any));
    }

    /// Removes a client's wait, if it still waits; updates whether
    /// commits must report ready keys.
    pub fn take_waiter(&self, client: u64) -> Option<Waiter> {
        self.blocked.take(client, &|any| self.ks.set_blocked(any))
    }

    /// `CLIENT UNBLOCK`: answers a blocked client as a timeout (or with
    /// an error); says whether it was blocked.
    pub fn unblock(&self, client: u64, error: bool) -> bool {
        let Some(w) = self.take_waiter(client) else {
            return false;
        };
        let reply = if error {
            Reply::Error("UNBLOCKED client unblocked via CLIENT UNBLOCK".into())
        } else {
            Reply::NullArray
        };
        let mut bytes = Vec::new();
        reply.encode(w.mailbox.proto(), &mut bytes);
        w.mailbox.serve(&bytes);
        true
    }

    /// Publishes keyspace events (`notify-keyspace-events`).
    pub fn publish_events(&self, events: &[Event]) {
        if events.is_empty() {
            return;
        }
        let (space, event) = self.ks.event_channels();
        for e in events {
            if space {
                let mut ch = format!("__keyspace@{}__:", e.db).into_bytes();
                ch.extend_from_slice(&e.key);
                self.pubsub.publish(&ch, e.name.as_bytes());
            }
            if event {
                let ch = format!("__keyevent@{}__:{}", e.db, e.name);
                self.pubsub.publish(ch.as_bytes(), &e.key);
            }
        }
    }
}
