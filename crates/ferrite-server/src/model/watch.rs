//! The `WATCH` registry: which clients watch which keys, and whose
//! transactions a change has spoiled.
//!
//! Invariants: a client's flag turns dirty when a committed change
//! touches a key it watches, and stays dirty until it unwatches; a key
//! that was already expired when watched (stale) spoils nothing when it
//! is merely removed, as in Redis (logically nothing changed), but any
//! other change spoils as usual.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

struct Watcher {
    client: u64,
    dirty: Arc<AtomicBool>,
    /// The key was expired (present, not live) when watched.
    stale: bool,
}

/// A watched key: (db, key).
type WatchedKey = (u8, Vec<u8>);

/// Watched keys and their watchers.
#[derive(Default)]
pub struct Watches {
    watchers: AtomicUsize,
    map: Mutex<HashMap<WatchedKey, Vec<Watcher>>>,
}

impl Watches {
    /// Whether any key is watched (commits skip touching otherwise).
    pub fn any(&self) -> bool {
        self.watchers.load(Ordering::Acquire) > 0
    }

    /// `client` watches `key` of `db`; `stale` if it is expired now.
    pub fn watch(&self, client: u64, dirty: &Arc<AtomicBool>, db: u8, key: Vec<u8>, stale: bool) {
        let mut map = self.map.lock();
        let list = map.entry((db, key)).or_default();
        if list.iter().any(|w| w.client == client) {
            return;
        }
        list.push(Watcher {
            client,
            dirty: dirty.clone(),
            stale,
        });
        self.watchers.fetch_add(1, Ordering::AcqRel);
    }

    /// `client` stops watching `keys`.
    pub fn unwatch(&self, client: u64, keys: &[(u8, Vec<u8>)]) {
        let mut map = self.map.lock();
        for k in keys {
            if let Some(list) = map.get_mut(k) {
                let before = list.len();
                list.retain(|w| w.client != client);
                self.watchers
                    .fetch_sub(before - list.len(), Ordering::AcqRel);
                if list.is_empty() {
                    map.remove(k);
                }
            }
        }
    }

    /// Whether `client`'s watch of `key` was of a stale key (and nothing
    /// has touched it since).
    pub fn stale(&self, client: u64, db: u8, key: &[u8]) -> bool {
        let map = self.map.lock();
        map.get(&(db, key.to_vec()))
            .and_then(|l| l.iter().find(|w| w.client == client))
            .is_some_and(|w| w.stale)
    }

    /// Applies committed changes, as (db, key, exists after).
    pub fn touch(&self, touched: &[(u8, Vec<u8>, bool)]) {
        if touched.is_empty() || !self.any() {
            return;
        }
        let mut map = self.map.lock();
        for (db, key, exists) in touched {
            let Some(list) = map.get_mut(&(*db, key.clone())) else {
                continue;
            };
            for w in list.iter_mut() {
                if w.stale && !exists {
                    // A stale key removed: logically nothing changed.
                    w.stale = false;
                    continue;
                }
                w.dirty.store(true, Ordering::Release);
            }
        }
    }

    /// The keys of `db` somebody watches.
    pub fn watched_in(&self, db: u8) -> Vec<Vec<u8>> {
        if !self.any() {
            return Vec::new();
        }
        let map = self.map.lock();
        map.keys()
            .filter(|(d, _)| *d == db)
            .map(|(_, k)| k.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touching_a_watched_key_spoils_only_its_watchers() {
        let w = Watches::default();
        let (a, b) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        w.watch(1, &a, 0, b"x".to_vec(), false);
        w.watch(2, &b, 1, b"x".to_vec(), false);
        assert!(w.any());
        w.touch(&[(0, b"x".to_vec(), true)]);
        assert!(a.load(Ordering::Acquire) && !b.load(Ordering::Acquire));
        w.unwatch(1, &[(0, b"x".to_vec())]);
        w.unwatch(2, &[(1, b"x".to_vec())]);
        assert!(!w.any());
    }

    #[test]
    fn removing_a_stale_key_spoils_nothing_but_rewriting_it_does() {
        let w = Watches::default();
        let a = Arc::new(AtomicBool::new(false));
        w.watch(1, &a, 0, b"x".to_vec(), true);
        assert!(w.stale(1, 0, b"x"));
        w.touch(&[(0, b"x".to_vec(), false)]);
        assert!(!a.load(Ordering::Acquire));
        assert!(!w.stale(1, 0, b"x"));
        w.touch(&[(0, b"x".to_vec(), true)]);
        assert!(a.load(Ordering::Acquire));
    }
}
