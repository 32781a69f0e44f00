//! Lua scripting: `EVAL`/`EVALSHA` scripts and `FUNCTION` libraries,
//! run by one Lua 5.1 interpreter (the version Redis embeds, through
//! `mlua` with Lua built from source), with Redis's sandbox, its
//! conversions between replies and Lua values, and its rules for
//! scripts that run long.
//!
//! | file | what it owns |
//! |---|---|
//! | `vm.rs` | compiled scripts, loaded libraries, one run |
//! | `host.rs` | what a run reaches through `redis.call`, handed in by the command layer |
//! | `sandbox.rs` + `prelude.lua` | the interpreter, the `redis` table, frozen globals |
//! | `convert.rs` | replies ⇄ Lua values |
//! | `json.rs`, `msgpack.rs`, `bit.rs` | the `cjson`, `cmsgpack` and `bit` libraries scripts get |
//! | `running.rs` | the running script as others see it: busy, kill |
//! | `runner.rs` | the thread scripts run on |
//!
//! Invariants:
//! - a script runs inside one write transaction: nothing else reads or
//!   writes the data while it runs, and what it wrote commits together
//!   (an error part way keeps the writes before it, as in Redis);
//! - the interpreter is taken only by a holder of the keyspace lock
//!   (lock order: keyspace, then interpreter);
//! - `EVAL`/`FCALL` from a connection run on the script thread, not on an
//!   event loop: the loops keep reading while a script runs, answer
//!   `BUSY` once it has run past `busy-reply-threshold`, and hand
//!   `SCRIPT KILL`, `FUNCTION KILL` and `SHUTDOWN NOSAVE` to it without
//!   waiting for the lock it holds. Inside `MULTI` a script runs in the
//!   `EXEC`'s transaction on its loop.

mod bit;
mod convert;
mod host;
mod json;
mod msgpack;
pub mod runner;
mod running;
mod sandbox;
mod vm;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex, MutexGuard};

pub use host::{Called, Failed, Host, Stopped};
pub use running::{KillRefused, Running};
pub use vm::{Counts, RunResult, Vm};

use crate::mailbox::Mailbox;
use crate::request::OwnedArgs;

/// A script a connection asked for, waiting for the script thread.
pub struct Job {
    pub client: u64,
    pub db: u8,
    pub args: OwnedArgs,
    pub mailbox: Arc<Mailbox>,
}

pub struct Scripting {
    vm: Mutex<Vm>,
    pub running: Arc<Running>,
    pub counts: Arc<Counts>,
    jobs: Mutex<VecDeque<Job>>,
    ready: Condvar,
}

impl Scripting {
    pub fn new() -> Result<Self, String> {
        let running = Arc::new(Running::default());
        let counts = Arc::new(Counts::default());
        Ok(Self {
            vm: Mutex::new(Vm::new(running.clone(), counts.clone()).map_err(|e| e.to_string())?),
            running,
            counts,
            jobs: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
        })
    }

    /// Loads the function libraries the store holds (at start).
    pub fn restore(&self, store: &ferrite::Store) -> Result<usize, String> {
        let (start, end) = crate::model::layout::libraries();
        let mut vm = self.vm.lock();
        let mut n = 0;
        let skip = start.len();
        for rec in store.range(start..end) {
            let (key, code) = rec.map_err(|e| e.to_string())?;
            vm.load_library(&code, true).map_err(|e| {
                format!(
                    "the stored function library {} does not load: {e}",
                    String::from_utf8_lossy(key.get(skip..).unwrap_or_default())
                )
            })?;
            n += 1;
        }
        Ok(n)
    }

    /// The interpreter; the caller holds the keyspace lock.
    pub fn vm(&self) -> MutexGuard<'_, Vm> {
        self.vm.lock()
    }

    /// Queues a script for the script thread.
    pub fn submit(&self, job: Job) {
        self.jobs.lock().push_back(job);
        self.ready.notify_one();
    }

    /// Every queued script, waiting up to `wait` for one.
    pub fn take(&self, wait: Duration) -> Vec<Job> {
        let mut q = self.jobs.lock();
        if q.is_empty() {
            self.ready.wait_for(&mut q, wait);
        }
        q.drain(..).collect()
    }

    /// Whether other clients are to be answered `BUSY` now.
    pub fn busy(&self, threshold_ms: u64) -> bool {
        self.running.busy(threshold_ms)
    }
}
