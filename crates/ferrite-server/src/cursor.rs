//! `SCAN`, `HSCAN`, `SSCAN` and `ZSCAN` cursors. Redis's cursors encode
//! a hash-table position; ours name a key or member, which clients must
//! not have to carry (they parse cursors as integers), so the server
//! keeps a table from cursor numbers to where each resumes, and what it
//! iterates (its scope: a database, or a key of one).
//!
//! Invariants: cursor numbers are issued once, counting up from 1 (0
//! means "start" and "done"); the table keeps the newest cursors within a
//! byte budget, so a cursor stays valid until enough newer ones push it
//! out, and an expired one is refused rather than restarted.

use std::collections::{HashMap, VecDeque};

use parking_lot::Mutex;

/// Bytes of resume keys the table keeps.
const BUDGET: usize = 16 << 20;

#[derive(Default)]
struct Table {
    next: u64,
    entries: HashMap<u64, (Vec<u8>, Vec<u8>)>,
    order: VecDeque<u64>,
    bytes: usize,
}

/// The live cursors of a server.
#[derive(Default)]
pub struct Cursors {
    table: Mutex<Table>,
}

impl Cursors {
    /// A new cursor resuming at `from` of `scope`.
    pub fn issue(&self, scope: Vec<u8>, from: Vec<u8>) -> u64 {
        let mut t = self.table.lock();
        t.next += 1;
        let id = t.next;
        t.bytes += from.len() + scope.len() + 32;
        t.entries.insert(id, (scope, from));
        t.order.push_back(id);
        while t.bytes > BUDGET {
            let Some(old) = t.order.pop_front() else {
                break;
            };
            if let Some((s, k)) = t.entries.remove(&old) {
                t.bytes -= k.len() + s.len() + 32;
            }
        }
        id
    }

    /// Where cursor `id` resumes, if it was issued for `scope` and is
    /// still kept.
    pub fn resume(&self, id: u64, scope: &[u8]) -> Option<Vec<u8>> {
        let t = self.table.lock();
        t.entries
            .get(&id)
            .filter(|(s, _)| s.as_slice() == scope)
            .map(|(_, k)| k.clone())
    }

    pub fn len(&self) -> usize {
        self.table.lock().entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_resume_in_their_database_and_expire_oldest_first() {
        let c = Cursors::default();
        let a = c.issue(vec![0], b"abc".to_vec());
        assert!(a >= 1);
        assert_eq!(c.resume(a, &[0]), Some(b"abc".to_vec()));
        assert_eq!(c.resume(a, &[1]), None);
        assert_eq!(c.resume(a + 1, &[0]), None);
        let big = vec![7u8; 1000];
        for _ in 0..(BUDGET / 1000 + 10) {
            c.issue(vec![0], big.clone());
        }
        assert_eq!(c.resume(a, &[0]), None, "the oldest cursor went first");
        assert!(c.len() * 1000 <= BUDGET);
    }
}
