//! The programs an experiment runs as separate processes: the `ferrite`
//! binary (a server it talks to over the network, or one it kills),
//! `$FERRITE_BIN` or the one built beside the benchmark's own; and the
//! outside tools it drives (redis-benchmark, fio, nbdkit), which it needs
//! installed rather than measuring nothing without them.

use std::path::PathBuf;
use std::process::{Command, Stdio};

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

/// Whether the outside program `tool` answers `--version`.
pub fn have(tool: &str) -> bool {
    version(tool).is_some()
}

/// `tool`'s first line of `--version`, or an error naming `how` (the
/// script that installs it) when it is missing.
pub fn need(tool: &str, how: &'static str) -> Result<String> {
    version(tool).ok_or_else(|| BenchError::ToolMissing {
        tool: tool.into(),
        how,
    })
}

/// The first line `tool --version` prints, if it runs.
fn version(tool: &str) -> Option<String> {
    let out = Command::new(tool)
        .arg("--version")
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    Some(text.lines().next().unwrap_or("").trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_tool_is_named_with_what_installs_it() {
        assert!(have("sh") || have("true"));
        let err = need("ferrite-no-such-tool", "scripts/nothing.sh").unwrap_err();
        assert_eq!(
            err.to_string(),
            "ferrite-no-such-tool is not installed; scripts/nothing.sh installs it"
        );
    }
}
