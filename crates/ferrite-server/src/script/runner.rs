//! The script thread: runs the scripts connections queued, a batch at a
//! time in one write transaction (one commit, and under `--sync always`
//! one sync, for every script of the batch, as the event loops group
//! plain commands), and answers each through its connection's mailbox
//! once its writes are durable.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::executor;
use crate::reply::Reply;
use crate::shared::Shared;

/// How long the thread waits for work before looking at shutdown.
const IDLE: Duration = Duration::from_millis(100);

/// Scripts one batch runs at most.
const MAX_BATCH: usize = 256;

pub fn spawn(shared: &Arc<Shared>) -> std::io::Result<JoinHandle<()>> {
    let sh = shared.clone();
    std::thread::Builder::new()
        .name("ferrite-script".into())
        .spawn(move || run(&sh))
}

fn run(shared: &Shared) {
    loop {
        let jobs = shared.scripts.take(IDLE);
        if jobs.is_empty() {
            if shared.shutting_down() {
                return;
            }
            continue;
        }
        for batch in jobs.chunks(MAX_BATCH) {
            // A panic must not end the thread: every later script would
            // wait forever. The batch's transaction was dropped
            // uncommitted; its clients are told.
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                executor::run_scripts(shared, batch)
            }));
            if ran.is_err() {
                shared.scripts.running.finish();
                log::error!(
                    "a batch of {} scripts failed; none of it was applied",
                    batch.len()
                );
                let mut bytes = Vec::new();
                for job in batch {
                    bytes.clear();
                    Reply::err("the script failed inside the server; nothing it did was applied")
                        .encode(job.mailbox.proto(), &mut bytes);
                    job.mailbox.serve(&bytes);
                }
            }
        }
    }
}
