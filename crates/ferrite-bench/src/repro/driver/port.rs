//! Loopback ports for the servers an experiment starts (a free one to
//! give a server, and waiting until it listens there), as
//! `ferrite_process` has them, in the harness's errors.

use std::process::Child;
use std::time::Duration;

use crate::error::{BenchError, Result};

/// A port on 127.0.0.1 nothing listens on now.
pub fn free_port() -> Result<u16> {
    ferrite_process::free_port().map_err(|e| BenchError::Config(e.to_string()))
}

/// Waits (up to a minute) until `child` (named `what` in errors) accepts
/// connections on `port`; an error if it exits first.
pub fn wait_for_port(port: u16, child: &mut Child, what: &str) -> Result<()> {
    ferrite_process::wait_for_port(port, child, what, Duration::from_secs(60))
        .map_err(|e| BenchError::Config(e.to_string()))
}
