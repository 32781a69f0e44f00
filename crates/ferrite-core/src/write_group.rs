//! A write group, as RocksDB's: writers that arrive while another is
//! writing queue behind it, and the first of them, once the writer ahead
//! is done, becomes the leader and writes the batches of every writer
//! queued at that moment in one go (one acquisition of the engine's write
//! lock, one log append per batch under it, one log commit or sync for
//! all). The others sleep until the leader hands them their result.
//!
//! Invariants:
//! - at most one leader runs at a time; batches are written in the order
//!   their writers queued, each writer's result is its own batch's;
//! - a queued writer's batch is read only by the leader of its group,
//!   and only while the writer waits for its result (which is why the
//!   leader may read it through a pointer): the writer cannot return,
//!   and so cannot drop or change its batch, before its result is set;
//! - a leader that unwinds (a bug) fails the rest of its group and passes
//!   the lead on, so no writer waits forever.

use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use crate::{Error, Result, WriteBatch};

/// Batches one group writes at most (bounds a leader's time under the
/// write lock, and so the wait of the readers and writers behind it).
pub const MAX_GROUP: usize = 256;

enum Turn {
    /// Queued behind a running group.
    Waiting,
    /// Chosen to lead the next group.
    Lead,
    /// Written by a leader: the result.
    Done(Result<()>),
}

struct Member {
    batch: *const WriteBatch,
    turn: Mutex<Turn>,
    woken: Condvar,
}

// SAFETY: `batch` is only read by a leader while its writer waits in
// `WriteGroup::write` for its turn to become `Done` (see the module's
// invariants); `WriteBatch` is `Sync`, so reading it from the leader's
// thread is sound.
unsafe impl Send for Member {}
// SAFETY: as above; every other field is `Sync`.
unsafe impl Sync for Member {}

#[derive(Default)]
struct Queue {
    members: Vec<Arc<Member>>,
    /// A leader is writing (or has been chosen and is about to).
    leading: bool,
}

/// Writers of one store, grouped.
#[derive(Default)]
pub struct WriteGroup {
    queue: Mutex<Queue>,
}

impl WriteGroup {
    pub fn new() -> Self {
        Self::default()
    }

    /// Writes `batch` with the batches of the writers around it: `write`,
    /// run by whichever writer leads, gets every batch of its group in
    /// order and returns one result per batch. Returns this batch's.
    pub fn write(
        &self,
        batch: &WriteBatch,
        write: &dyn Fn(&[&WriteBatch]) -> Vec<Result<()>>,
    ) -> Result<()> {
        let me = Arc::new(Member {
            batch: batch as *const WriteBatch,
            turn: Mutex::new(Turn::Waiting),
            woken: Condvar::new(),
        });
        let lead = {
            let mut q = self.queue.lock();
            q.members.push(me.clone());
            !std::mem::replace(&mut q.leading, true)
        };
        if !lead {
            let mut turn = me.turn.lock();
            loop {
                match std::mem::replace(&mut *turn, Turn::Waiting) {
                    Turn::Done(r) => return r,
                    Turn::Lead => break,
                    Turn::Waiting => me.woken.wait(&mut turn),
                }
            }
        }
        // Leading: this writer is first in the queue.
        let group: Vec<Arc<Member>> = {
            let mut q = self.queue.lock();
            let n = q.members.len().min(MAX_GROUP);
            q.members.drain(..n).collect()
        };
        let mut pass = PassOn {
            wg: self,
            group: &group,
            finished: false,
        };
        // SAFETY: every member but this one waits for its turn to be
        // `Done`, so its batch is alive and unchanged until `finish`.
        let batches: Vec<&WriteBatch> = group.iter().map(|m| unsafe { &*m.batch }).collect();
        let results = write(&batches);
        pass.finish(results)
    }

    /// Gives the lead to the first queued writer, or ends leading.
    fn pass_lead(&self) {
        let mut q = self.queue.lock();
        match q.members.first() {
            Some(next) => {
                *next.turn.lock() = Turn::Lead;
                next.woken.notify_one();
            }
            None => q.leading = false,
        }
    }
}

/// What a writer gets whose group's leader gave it no result.
fn leader_failed() -> Error {
    Error::Resource {
        what: "a write group's leader".into(),
        reason: "it failed before it wrote this batch".into(),
    }
}

/// Hands a group its results and the lead onward, even if the leader's
/// write unwinds.
struct PassOn<'a> {
    wg: &'a WriteGroup,
    group: &'a [Arc<Member>],
    finished: bool,
}

impl PassOn<'_> {
    /// Sets every member's result (the leader's own is returned) and
    /// passes the lead on.
    fn finish(&mut self, results: Vec<Result<()>>) -> Result<()> {
        let mut results = results.into_iter();
        let mine = results.next().unwrap_or_else(|| Err(leader_failed()));
        for m in &self.group[1..] {
            let r = results.next().unwrap_or_else(|| Err(leader_failed()));
            *m.turn.lock() = Turn::Done(r);
            m.woken.notify_one();
        }
        self.finished = true;
        self.wg.pass_lead();
        mine
    }
}

impl Drop for PassOn<'_> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        for m in &self.group[1..] {
            *m.turn.lock() = Turn::Done(Err(leader_failed()));
            m.woken.notify_one();
        }
        self.wg.pass_lead();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[test]
    fn concurrent_writers_are_written_once_each_in_groups() {
        // Miri checks the hand-over of batches between threads, slowly.
        let per_thread: u32 = if cfg!(miri) { 20 } else { 500 };
        let wg = Arc::new(WriteGroup::new());
        let written = Arc::new(Mutex::new(Vec::new()));
        let groups = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8u8)
            .map(|t| {
                let (wg, written, groups) = (wg.clone(), written.clone(), groups.clone());
                std::thread::spawn(move || {
                    for i in 0..per_thread {
                        let mut b = WriteBatch::new();
                        b.put(&[t], &i.to_be_bytes()).expect("put");
                        let r = wg.write(&b, &|batches| {
                            groups.fetch_add(1, Ordering::Relaxed);
                            let mut w = written.lock();
                            for b in batches {
                                w.push((*b).clone());
                            }
                            batches.iter().map(|_| Ok(())).collect()
                        });
                        assert!(r.is_ok());
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("writer");
        }
        let written = written.lock();
        assert_eq!(written.len(), 8 * per_thread as usize);
        // Each writer's batches in its own order.
        for t in 0..8u8 {
            let mine: Vec<u32> = written
                .iter()
                .filter_map(|b| match &b.ops()[0] {
                    crate::BatchOp::Put { key, value } if key[0] == t => {
                        Some(u32::from_be_bytes(value[..4].try_into().expect("4 bytes")))
                    }
                    _ => None,
                })
                .collect();
            assert_eq!(mine, (0..per_thread).collect::<Vec<_>>());
        }
        assert!(groups.load(Ordering::Relaxed) <= 8 * per_thread as usize);
    }

    #[test]
    fn each_writer_gets_its_own_result() {
        let wg = WriteGroup::new();
        let mut b = WriteBatch::new();
        b.put(b"k", b"v").expect("put");
        let r = wg.write(&b, &|batches| {
            batches
                .iter()
                .map(|_| Err(Error::InvalidOptions("refused".into())))
                .collect()
        });
        assert!(r.is_err());
        assert!(wg
            .write(&b, &|batches| batches.iter().map(|_| Ok(())).collect())
            .is_ok());
    }
}
