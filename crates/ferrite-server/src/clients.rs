//! The connected clients, for `CLIENT LIST`/`INFO`, `INFO clients` and
//! the `--max-clients` bound.

use std::collections::BTreeMap;
use std::time::Instant;

use parking_lot::Mutex;

use crate::session::Session;

#[derive(Debug, Clone)]
struct Entry {
    addr: String,
    name: Vec<u8>,
    db: u8,
    proto: u8,
    created: Instant,
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

    /// Records a changed name, database or protocol.
    pub fn update(&self, s: &Session) {
        if let Some(e) = self.all.lock().get_mut(&s.id) {
            *e = Entry {
                created: e.created,
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

    /// One client's `CLIENT LIST` line.
    pub fn describe(&self, s: &Session) -> String {
        line(s.id, &entry(s))
    }

    pub fn list(&self) -> String {
        let all = self.all.lock();
        all.iter().map(|(id, e)| line(*id, e) + "\n").collect()
    }
}

fn entry(s: &Session) -> Entry {
    Entry {
        addr: s.addr.clone(),
        name: s.name.clone().unwrap_or_default(),
        db: s.db,
        proto: s.proto,
        created: s.created,
    }
}

fn line(id: u64, e: &Entry) -> String {
    format!(
        "id={id} addr={} name={} age={} db={} resp={} flags=N user=default",
        e.addr,
        String::from_utf8_lossy(&e.name),
        e.created.elapsed().as_secs(),
        e.db,
        e.proto
    )
}
