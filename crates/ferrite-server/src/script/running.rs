//! The script running now, as other connections see it: since when it
//! runs, whether it wrote, whether someone asked it to stop. Read
//! without the keyspace lock (the script holds it), by connections that
//! answer `BUSY` and by `SCRIPT KILL` / `FUNCTION KILL`.
//!
//! Invariants: a kill request reaches only the script running when it
//! was made (starting a script clears it); a script that wrote is never
//! killed by request, only by `SHUTDOWN NOSAVE`, which drops its writes
//! with the server.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

use crate::model::now_ms;

/// Why a running script is to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// `SCRIPT KILL` / `FUNCTION KILL`.
    Killed,
    /// `SHUTDOWN NOSAVE` while a script was busy.
    Shutdown,
}

/// What `SCRIPT KILL` / `FUNCTION KILL` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillRefused {
    /// No script runs.
    NotBusy,
    /// The script wrote: stopping it half way would break its atomicity.
    Unkillable,
    /// A script of the other kind runs (`SCRIPT KILL` of a function).
    OtherKind,
}

#[derive(Default)]
pub struct Running {
    /// When the running script started, ms since the epoch (0: none).
    since_ms: AtomicU64,
    /// 1 for `EVAL`, 2 for `FCALL`.
    kind: AtomicU8,
    wrote: AtomicBool,
    /// 0 none, 1 killed, 2 shutdown.
    stop: AtomicU8,
}

impl Running {
    /// A script starts; `function`: called by `FCALL`.
    pub fn start(&self, function: bool) {
        self.wrote.store(false, Ordering::Release);
        self.stop.store(0, Ordering::Release);
        self.kind
            .store(if function { 2 } else { 1 }, Ordering::Release);
        self.since_ms.store(now_ms().max(1), Ordering::Release);
    }

    pub fn finish(&self) {
        self.since_ms.store(0, Ordering::Release);
        self.kind.store(0, Ordering::Release);
    }

    pub fn note_write(&self) {
        self.wrote.store(true, Ordering::Release);
    }

    /// Whether a script has run longer than `threshold_ms`: other clients
    /// are then answered `BUSY`.
    pub fn busy(&self, threshold_ms: u64) -> bool {
        let since = self.since_ms.load(Ordering::Acquire);
        since != 0 && now_ms().saturating_sub(since) >= threshold_ms
    }

    /// How long the running script has run (0 if none).
    pub fn elapsed_ms(&self) -> u64 {
        match self.since_ms.load(Ordering::Acquire) {
            0 => 0,
            since => now_ms().saturating_sub(since),
        }
    }

    /// Whether the busy script is a function (for the `BUSY` text).
    pub fn is_function(&self) -> bool {
        self.kind.load(Ordering::Acquire) == 2
    }

    /// `SCRIPT KILL` (`function` false) or `FUNCTION KILL`.
    pub fn kill(&self, function: bool) -> Result<(), KillRefused> {
        if self.since_ms.load(Ordering::Acquire) == 0 {
            return Err(KillRefused::NotBusy);
        }
        if self.is_function() != function {
            return Err(KillRefused::OtherKind);
        }
        if self.wrote.load(Ordering::Acquire) {
            return Err(KillRefused::Unkillable);
        }
        let _ = self
            .stop
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire);
        Ok(())
    }

    /// `SHUTDOWN NOSAVE`: stops whatever runs, writes or not.
    pub fn abort(&self) {
        self.stop.store(2, Ordering::Release);
    }

    /// Whether the running script is to stop, and why.
    pub fn stop(&self) -> Option<Stop> {
        match self.stop.load(Ordering::Acquire) {
            1 => Some(Stop::Killed),
            2 => Some(Stop::Shutdown),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kill_reaches_only_a_running_script_that_did_not_write() {
        let r = Running::default();
        assert_eq!(r.kill(false), Err(KillRefused::NotBusy));
        r.start(false);
        assert!(!r.busy(60_000));
        assert!(r.busy(0));
        assert_eq!(r.kill(true), Err(KillRefused::OtherKind));
        assert_eq!(r.kill(false), Ok(()));
        assert_eq!(r.stop(), Some(Stop::Killed));
        r.finish();
        r.start(false);
        assert_eq!(r.stop(), None, "a new script starts unkilled");
        r.note_write();
        assert_eq!(r.kill(false), Err(KillRefused::Unkillable));
        r.abort();
        assert_eq!(r.stop(), Some(Stop::Shutdown));
        r.finish();
        assert!(!r.busy(0));
    }
}
