//! [`Reclaimer`]: removes the keys of dropped keyspaces in the
//! background, in bounded steps, so a drop itself is one small batch
//! whatever the keyspace held.
//!
//! One thread at most per store, started when there is work (a drop, or
//! dropped keyspaces found at open) and ended when there is none. Each
//! step removes at most [`STEP`] keys as one batch (the LSM-tree, whose
//! range delete is one tombstone whatever it covers, removes a whole
//! keyspace in one step). When a keyspace's keys are gone its dropped
//! record goes; a store closed before then resumes at its next open.
//!
//! Invariants: the thread holds the engine only while it runs, and
//! stopping the reclaimer (on close and on drop of the store) joins it,
//! so the engine is never closed under a step.

use std::collections::VecDeque;
use std::ops::{Bound, ControlFlow};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use ferrite_core::engine::Instrumented;
use ferrite_core::{EngineKind, KeyRange, KvStore, Result, WriteBatch};
use parking_lot::Mutex;

use crate::catalog::{data_range, Catalog};

/// Keys removed per step (one batch) on engines that delete key by key.
pub(crate) const STEP: usize = 1024;

/// The engine a store runs, shared with its reclaimer.
pub(crate) type Engine = Arc<Box<dyn Instrumented>>;

#[derive(Default)]
struct Queue {
    ids: VecDeque<u32>,
    thread: Option<JoinHandle<()>>,
    running: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    stop: AtomicBool,
    keys_removed: AtomicU64,
}

/// The background removal of one store's dropped keyspaces.
pub(crate) struct Reclaimer {
    shared: Arc<Shared>,
}

impl Reclaimer {
    pub(crate) fn new() -> Self {
        Self {
            shared: Arc::new(Shared {
                queue: Mutex::new(Queue::default()),
                stop: AtomicBool::new(false),
                keys_removed: AtomicU64::new(0),
            }),
        }
    }

    /// Queues dropped keyspace `id` and makes sure a thread works on it.
    pub(crate) fn push(&self, engine: &Engine, catalog: &Arc<Catalog>, kind: EngineKind, id: u32) {
        let mut q = self.shared.queue.lock();
        q.ids.push_back(id);
        if q.running || self.shared.stop.load(Ordering::Acquire) {
            return;
        }
        if let Some(done) = q.thread.take() {
            let _ = done.join();
        }
        let (shared, engine, catalog) = (self.shared.clone(), engine.clone(), catalog.clone());
        let spawned = std::thread::Builder::new()
            .name("ferrite-keyspace-reclaimer".into())
            .spawn(move || run(&shared, &engine, &catalog, kind));
        match spawned {
            Ok(t) => {
                q.thread = Some(t);
                q.running = true;
            }
            // The dropped records stay: the next open tries again.
            Err(e) => log::warn!("could not start the keyspace reclaimer: {e}"),
        }
    }

    /// Dropped keyspaces whose keys are not all removed yet.
    pub(crate) fn pending(&self) -> usize {
        self.shared.queue.lock().ids.len()
    }

    /// Keys removed since the store opened.
    pub(crate) fn keys_removed(&self) -> u64 {
        self.shared.keys_removed.load(Ordering::Relaxed)
    }

    /// Waits until every queued keyspace is removed (or the thread
    /// stopped on an error, which the log names).
    pub(crate) fn wait(&self) {
        let t = self.shared.queue.lock().thread.take();
        if let Some(t) = t {
            let _ = t.join();
        }
    }
}

impl Drop for Reclaimer {
    /// Stops the thread between two steps and joins it.
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.wait();
    }
}

fn run(shared: &Shared, engine: &Engine, catalog: &Catalog, kind: EngineKind) {
    // The last key removed of the keyspace at the queue's front: each step
    // scans on from there, not over the deletes of the steps before.
    let mut after: Option<Vec<u8>> = None;
    loop {
        let id = {
            let mut q = shared.queue.lock();
            match q.ids.front() {
                Some(&id) if !shared.stop.load(Ordering::Acquire) => id,
                _ => {
                    q.running = false;
                    return;
                }
            }
        };
        match remove(shared, &***engine, catalog, kind, id, &mut after) {
            Ok(true) => {
                shared.queue.lock().ids.pop_front();
                after = None;
            }
            Ok(false) => {}
            Err(e) => {
                log::warn!("removing the keys of dropped keyspace {id} stopped: {e}");
                let mut q = shared.queue.lock();
                q.running = false;
                return;
            }
        }
    }
}

/// One step of removing keyspace `id`'s keys past `after` (no key of a
/// dropped keyspace is written again, so none appears behind it); true
/// when none are left (and its dropped record is gone).
fn remove(
    shared: &Shared,
    kv: &dyn KvStore,
    catalog: &Catalog,
    kind: EngineKind,
    id: u32,
    after: &mut Option<Vec<u8>>,
) -> Result<bool> {
    let (lo, hi) = data_range(id);
    if kind == EngineKind::Lsm {
        kv.delete_range(&lo, &hi)?;
        catalog.reclaimed(kv, id)?;
        return Ok(true);
    }
    let mut keys: Vec<Vec<u8>> = Vec::new();
    kv.scan(
        KeyRange {
            start: after
                .as_deref()
                .map_or(Bound::Included(lo.as_slice()), Bound::Excluded),
            end: Bound::Excluded(&hi),
        },
        &mut |k, _| {
            keys.push(k.to_vec());
            if keys.len() >= STEP {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        },
    )?;
    let (Some(first), Some(last)) = (keys.first(), keys.last()) else {
        catalog.reclaimed(kv, id)?;
        return Ok(true);
    };
    let mut batch = WriteBatch::new();
    if first < last {
        batch.delete_range(first, last)?;
    }
    batch.delete(last)?;
    kv.write_batch(&batch)?;
    shared
        .keys_removed
        .fetch_add(keys.len() as u64, Ordering::Relaxed);
    *after = Some(last.clone());
    Ok(false)
}
