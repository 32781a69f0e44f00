//! Clients blocked on keys (`BLPOP`, `BZPOPMIN`, ...): who waits on what,
//! in the order they blocked.
//!
//! A blocked client keeps no thread busy on the command: its connection
//! waits on its mailbox. A command that gives a list or sorted set new
//! elements serves the waiters of that key, first blocked first served,
//! inside its own transaction (so the element goes to the waiter before
//! any other command can take it), and their replies reach their
//! mailboxes once that transaction is durable.
//!
//! Invariants: a client waits on at most one command; it is in the queue
//! of every key it waits on and nowhere else; taking a waiter (served,
//! timed out, unblocked, disconnected) removes it from every queue, and
//! only one of those can take it.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::mailbox::Mailbox;
use crate::request::OwnedArgs;

/// A blocked command and how to answer it.
#[derive(Clone)]
pub struct Waiter {
    pub client: u64,
    /// The database the command runs in.
    pub db: u8,
    pub args: OwnedArgs,
    pub keys: Vec<Vec<u8>>,
    pub mailbox: Arc<Mailbox>,
}

#[derive(Default)]
struct Inner {
    queues: HashMap<(u8, Vec<u8>), VecDeque<u64>>,
    waiters: HashMap<u64, Waiter>,
}

#[derive(Default)]
pub struct Blocked {
    inner: Mutex<Inner>,
}

impl Blocked {
    /// Registers `w`; `any` learns, under the registry's lock, that
    /// someone waits.
    pub fn block(&self, w: Waiter, any: &dyn Fn(bool)) {
        let mut i = self.inner.lock();
        for k in &w.keys {
            let q = i.queues.entry((w.db, k.clone())).or_default();
            if !q.contains(&w.client) {
                q.push_back(w.client);
            }
        }
        i.waiters.insert(w.client, w);
        any(true);
    }

    /// Removes `client`'s wait; `None` if it was not waiting (already
    /// served, or never blocked). `any` learns, under the registry's lock,
    /// whether anyone still waits.
    pub fn take(&self, client: u64, any: &dyn Fn(bool)) -> Option<Waiter> {
        let mut i = self.inner.lock();
        let w = i.waiters.remove(&client)?;
        any(!i.waiters.is_empty());
        for k in &w.keys {
            let q = (w.db, k.clone());
            if let Some(list) = i.queues.get_mut(&q) {
                list.retain(|&c| c != client);
                if list.is_empty() {
                    i.queues.remove(&q);
                }
            }
        }
        Some(w)
    }

    /// The longest waiter on `key` of `db`.
    pub fn first(&self, db: u8, key: &[u8]) -> Option<Waiter> {
        let i = self.inner.lock();
        let c = i.queues.get(&(db, key.to_vec()))?.front()?;
        i.waiters.get(c).cloned()
    }

    /// The keys of `db` someone waits on.
    pub fn keys_in(&self, db: u8) -> Vec<Vec<u8>> {
        let i = self.inner.lock();
        i.queues
            .keys()
            .filter(|(d, _)| *d == db)
            .map(|(_, k)| k.clone())
            .collect()
    }

    /// Clients blocked now.
    pub fn count(&self) -> usize {
        self.inner.lock().waiters.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mailbox::testing::mailbox;

    fn waiter(client: u64, keys: &[&str]) -> Waiter {
        Waiter {
            client,
            db: 0,
            args: vec![b"blpop".to_vec()],
            keys: keys.iter().map(|k| k.as_bytes().to_vec()).collect(),
            mailbox: mailbox().0,
        }
    }

    #[test]
    fn waiters_are_served_first_come_and_leave_every_queue() {
        let b = Blocked::default();
        let any = std::cell::Cell::new(false);
        let set = |v| any.set(v);
        b.block(waiter(1, &["a", "b"]), &set);
        b.block(waiter(2, &["b"]), &set);
        assert!(any.get());
        assert_eq!(b.first(0, b"b").map(|w| w.client), Some(1));
        assert!(b.take(1, &set).is_some());
        assert!(any.get());
        assert!(b.take(1, &set).is_none(), "only one party takes a waiter");
        assert_eq!(b.first(0, b"a").map(|w| w.client), None);
        assert_eq!(b.first(0, b"b").map(|w| w.client), Some(2));
        assert_eq!(b.first(1, b"b").map(|w| w.client), None);
        assert_eq!(b.count(), 1);
        assert!(b.take(2, &set).is_some());
        assert!(!any.get());
    }
}
