//! The connected clients, for `CLIENT LIST`/`INFO`/`KILL`, `INFO clients`
//! and the `maxclients` bound.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use crate::mailbox::Mailbox;
use crate::session::{Activity, Session};

#[derive(Clone)]
struct Entry {
    addr: String,
    name: Vec<u8>,
    db: u8,
    proto: u8,
    flags: String,
    subscriptions: usize,
    created: Instant,
    created_ms: u64,
    mailbox: Arc<Mailbox>,
    activity: Arc<Activity>,
}

#[derive(Default)]
pub struct Clients {
    all: Mutex<BTreeMap<u64, Entry>>,
}

impl Clients {
    /// Registers a client unless `max` are connected; says whether it did.
    pub fn admit(&self, s: &Session, max: usize) -> bool {
        let mut all = self.all.lock();
        if all.len() >= max {
            return false;
        }
        all.insert(s.id, entry(s));
        true
    }

    /// Records a changed name, database, protocol or subscription count.
    pub fn update(&self, s: &Session) {
        if let Some(e) = self.all.lock().get_mut(&s.id) {
            *e = Entry {
                created: e.created,
                created_ms: e.created_ms,
                ..entry(s)
            };
        }
    }

    pub fn remove(&self, id: u64) {
        self.all.lock().remove(&id);
    }

    pub fn count(&self) -> usize {
        self.all.lock().len()
    }

    /// Clients subscribed to a channel or pattern.
    pub fn subscribed(&self) -> usize {
        self.all
            .lock()
            .values()
            .filter(|e| e.subscriptions > 0)
            .count()
    }

    /// One client's `CLIENT LIST` line; `name` names a command by its
    /// index in the command table.
    pub fn describe(&self, s: &Session, name: CommandName) -> String {
        line(s.id, &entry(s), name)
    }

    pub fn list(&self, name: CommandName) -> String {
        let all = self.all.lock();
        all.iter()
            .map(|(id, e)| line(*id, e, name) + "\n")
            .collect()
    }

    /// Closes the clients matching `id` and `addr` (either may be
    /// absent), except `skip`; answers how many.
    pub fn kill(&self, id: Option<u64>, addr: Option<&str>, skip: Option<u64>) -> usize {
        let all = self.all.lock();
        let mut n = 0;
        for (cid, e) in all.iter() {
            if Some(*cid) == skip
                || id.is_some_and(|i| i != *cid)
                || addr.is_some_and(|a| a != e.addr)
            {
                continue;
            }
            e.mailbox.close();
            n += 1;
        }
        n
    }

    /// `CLIENT KILL addr`.
    pub fn kill_addr(&self, addr: &str) -> usize {
        self.kill(None, Some(addr), None)
    }

    /// Wakes every connection (at shutdown).
    pub fn nudge_all(&self) {
        for e in self.all.lock().values() {
            e.mailbox.nudge();
        }
    }
}

fn entry(s: &Session) -> Entry {
    Entry {
        addr: s.addr.clone(),
        name: s.name.clone().unwrap_or_default(),
        db: s.db,
        proto: s.proto,
        flags: s.flags(),
        subscriptions: s.subscriptions(),
        created: s.created,
        created_ms: crate::model::now_ms(),
        mailbox: s.mailbox.clone(),
        activity: s.activity.clone(),
    }
}

/// Names a command by its index in the command table (the table sits
/// above the clients: it is handed in, not imported).
pub type CommandName = fn(usize) -> Option<&'static str>;

fn line(id: u64, e: &Entry, name: CommandName) -> String {
    format!(
        "id={id} addr={} name={} age={} idle={} flags={} db={} sub={} cmd={} resp={} user=default",
        e.addr,
        String::from_utf8_lossy(&e.name),
        e.created.elapsed().as_secs(),
        e.activity.idle_secs(e.created_ms),
        e.flags,
        e.db,
        e.subscriptions,
        e.activity.command().and_then(name).unwrap_or("NULL"),
        e.proto
    )
}
