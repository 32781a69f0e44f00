//! The server's background work: the active expiry cycle and the
//! sweeper of dead collections, each on a thread of its own, each in
//! passes of bounded work so the keyspace lock is never held long.
//!
//! Pacing: with work left over, a thread rests as long as its last pass
//! took (at most half of the time goes to background work under a
//! backlog); without, it looks again after a tenth of a second, as
//! Redis's active expiry runs ten times a second.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::model::{expiry, sweeper};
use crate::shared::Shared;

/// Keys one expiry pass removes at most.
const EXPIRE_BUDGET: usize = 1000;
/// Elements one sweeper pass removes at most.
const SWEEP_BUDGET: u64 = 20_000;
/// The rest between passes when nothing is left to do.
const IDLE: Duration = Duration::from_millis(100);

/// Starts both threads; they stop when the server shuts down.
pub fn spawn(shared: &Arc<Shared>) -> std::io::Result<Vec<JoinHandle<()>>> {
    let sh = shared.clone();
    let expire = std::thread::Builder::new()
        .name("ferrite-expire".into())
        .spawn(move || run(&sh, expire_pass))?;
    let sh = shared.clone();
    let sweep = std::thread::Builder::new()
        .name("ferrite-sweep".into())
        .spawn(move || run(&sh, sweep_pass))?;
    Ok(vec![expire, sweep])
}

/// Runs `pass` until shutdown; `pass` says whether work is left.
fn run(shared: &Shared, pass: fn(&Shared) -> Result<bool, String>) {
    while !shared.shutting_down() {
        let t0 = Instant::now();
        let rest = match pass(shared) {
            Ok(true) => t0.elapsed().max(Duration::from_millis(1)),
            Ok(false) => IDLE,
            Err(e) => {
                log::warn!("background work failed: {e}");
                Duration::from_secs(1)
            }
        };
        sleep_unless_stopping(shared, rest);
    }
}

fn sleep_unless_stopping(shared: &Shared, d: Duration) {
    let end = Instant::now() + d;
    while !shared.shutting_down() {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(IDLE));
    }
}

fn expire_pass(shared: &Shared) -> Result<bool, String> {
    if shared.take_save_request() {
        shared.save().map_err(|e| format!("BGSAVE: {e}"))?;
    }
    // A replica's keys expire by its master's deletes.
    if shared.ks.is_replica() || shared.ks.is_loading() {
        return Ok(false);
    }
    let p = expiry::pass(&shared.ks, EXPIRE_BUDGET).map_err(|e| e.to_string())?;
    shared.publish_events(&p.committed.events);
    Ok(p.more)
}

fn sweep_pass(shared: &Shared) -> Result<bool, String> {
    let p = sweeper::pass(&shared.ks, SWEEP_BUDGET).map_err(|e| e.to_string())?;
    Ok(p.backlog > 0)
}
