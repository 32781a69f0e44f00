//! One client's state: protocol, database, name, its `MULTI` queue and
//! `WATCH`ed keys, its subscriptions, whether it is blocked, and its
//! mailbox. The event loop that holds its connection (`event_loop`,
//! `conn`) reads and answers it; what runs its commands is `executor`'s.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::mailbox::Mailbox;
use crate::reply::Reply;
use crate::request::OwnedArgs;

/// `CLIENT REPLY`: whether replies are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyMode {
    On,
    Off,
    /// Skip the reply to the next command only.
    Skip,
    /// The command after a `SKIP`: its reply is dropped, then `On`.
    Skipping,
}

/// What a connection ran last and when, read by `CLIENT LIST` from
/// other connections.
#[derive(Default)]
pub struct Activity {
    /// The table index of the last command, plus one (0: none yet).
    command: AtomicUsize,
    /// When it ran, ms since the Unix epoch.
    at_ms: AtomicU64,
}

impl Activity {
    pub fn ran(&self, index: usize) {
        self.command.store(index + 1, Ordering::Relaxed);
        self.at_ms.store(crate::model::now_ms(), Ordering::Relaxed);
    }

    /// The command table's index of the last command, if any.
    pub fn command(&self) -> Option<usize> {
        self.command.load(Ordering::Relaxed).checked_sub(1)
    }

    /// Seconds since the last command (or since `since_ms`).
    pub fn idle_secs(&self, since_ms: u64) -> u64 {
        let at = self.at_ms.load(Ordering::Relaxed).max(since_ms);
        crate::model::now_ms().saturating_sub(at) / 1000
    }
}

/// A command waiting for a key.
#[derive(Debug, Clone)]
pub struct Block {
    /// When it gives up (`None`: never).
    pub deadline: Option<Instant>,
    /// What it answers then.
    pub timeout_reply: Reply,
    /// A `WAIT` (answered by the replicas' acknowledgements, and at its
    /// deadline with how many acknowledged).
    pub wait: bool,
}

/// A connection's state.
pub struct Session {
    pub id: u64,
    pub addr: String,
    pub name: Option<Vec<u8>>,
    /// The `SELECT`ed database.
    pub db: u8,
    /// RESP version: 2, or 3 after `HELLO 3`.
    pub proto: u8,
    pub authenticated: bool,
    /// Close once the current reply is written (`QUIT`, `SHUTDOWN`).
    pub close_after_reply: bool,
    /// Send no reply to the current command (`SHUTDOWN`).
    pub silent: bool,
    pub created: Instant,
    pub last_command: Instant,
    pub reply_mode: ReplyMode,
    /// Queued commands and whether queueing failed, inside `MULTI`.
    transaction: Option<(Vec<OwnedArgs>, bool)>,
    /// Keys watched, as (db, key).
    pub watched: Vec<(u8, Vec<u8>)>,
    /// Set by a change to a watched key.
    pub dirty: Arc<AtomicBool>,
    pub channels: BTreeSet<Vec<u8>>,
    pub patterns: BTreeSet<Vec<u8>>,
    pub mailbox: Arc<Mailbox>,
    pub activity: Arc<Activity>,
    /// The command it is blocked in, if any.
    pub blocked: Option<Block>,
    /// A script's session (`redis.call`): replies that would depend on
    /// an order nothing defines are made deterministic.
    pub scripted: bool,
    /// A replica's `REPLCONF listening-port`, and whether it speaks
    /// ferrite's stream (`REPLCONF capa ferrite`).
    pub repl_port: u16,
    pub repl_capa: bool,
    /// Set by `PSYNC`: the connection leaves the loop for a replica
    /// link (what the link needs waits in the replication state, under
    /// the client's id).
    pub handoff: bool,
}

impl Session {
    pub fn new(id: u64, addr: String, authenticated: bool, mailbox: Arc<Mailbox>) -> Self {
        let now = Instant::now();
        Self {
            id,
            addr,
            name: None,
            db: 0,
            proto: 2,
            authenticated,
            close_after_reply: false,
            silent: false,
            created: now,
            last_command: now,
            reply_mode: ReplyMode::On,
            transaction: None,
            watched: Vec::new(),
            dirty: Arc::new(AtomicBool::new(false)),
            channels: BTreeSet::new(),
            patterns: BTreeSet::new(),
            mailbox,
            activity: Arc::new(Activity::default()),
            blocked: None,
            scripted: false,
            repl_port: 0,
            repl_capa: false,
            handoff: false,
        }
    }

    /// What key reads see of this session, for running them on another
    /// thread while this one stays with its connection: the client, its
    /// database, protocol and authentication; no transaction, watches,
    /// subscriptions or wait (a command that needs those does not leave
    /// its loop).
    pub fn view(&self) -> Self {
        let mut v = Self::new(
            self.id,
            self.addr.clone(),
            self.authenticated,
            self.mailbox.clone(),
        );
        v.name = self.name.clone();
        v.db = self.db;
        v.proto = self.proto;
        v.activity = self.activity.clone();
        v
    }

    pub fn in_transaction(&self) -> bool {
        self.transaction.is_some()
    }

    pub fn begin_transaction(&mut self) {
        self.transaction = Some((Vec::new(), false));
    }

    pub fn queue(&mut self, args: OwnedArgs) {
        if let Some((q, _)) = &mut self.transaction {
            q.push(args);
        }
    }

    /// Marks the open transaction (if any) as failed: `EXEC` will abort.
    pub fn flag_transaction_error(&mut self) {
        if let Some((_, failed)) = &mut self.transaction {
            *failed = true;
        }
    }

    /// Ends the transaction, returning its queue and whether it failed.
    pub fn take_transaction(&mut self) -> Option<(Vec<OwnedArgs>, bool)> {
        self.transaction.take()
    }

    /// Subscriptions (channels and patterns), as `SUBSCRIBE` replies count
    /// them.
    pub fn subscriptions(&self) -> usize {
        self.channels.len() + self.patterns.len()
    }

    /// Whether a `WATCH`ed key changed since it was watched.
    pub fn watch_spoiled(&self) -> bool {
        self.dirty.load(Ordering::Acquire)
    }

    pub fn set_proto(&mut self, proto: u8) {
        self.proto = proto;
        self.mailbox.set_proto(proto);
    }

    /// The `CLIENT LIST` flags.
    pub fn flags(&self) -> String {
        let mut f = String::new();
        if self.in_transaction() {
            f.push('x');
        }
        if self.blocked.is_some() {
            f.push('b');
        }
        if self.subscriptions() > 0 {
            f.push('P');
        }
        if f.is_empty() {
            f.push('N');
        }
        f
    }
}
