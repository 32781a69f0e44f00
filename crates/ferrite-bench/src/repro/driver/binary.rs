//! The `ferrite` binary an experiment runs as a separate process (a
//! server it talks to over the network, or one it kills): `$FERRITE_BIN`,
//! or the one built beside the benchmark's own binary.

use std::path::PathBuf;

use crate::error::{BenchError, Result};

/// The `ferrite` binary; `what` names the experiment step that needs it,
/// for the error when there is none.
pub fn ferrite_binary(what: &str) -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("FERRITE_BIN") {
        return Ok(PathBuf::from(p));
    }
    let me = std::env::current_exe().map_err(|e| BenchError::Config(e.to_string()))?;
    let beside = me.with_file_name("ferrite");
    if beside.exists() {
        Ok(beside)
    } else {
        Err(BenchError::Unavailable(
            what.into(),
            "build the ferrite binary (cargo build --release) or set FERRITE_BIN",
        ))
    }
}
