//! What the `ferrite` binary's integration tests share: finding the
//! outside programs they drive. A missing one skips its test with a
//! message naming the script that installs it, or under
//! `FERRITE_REQUIRE_TOOLS=1` (as CI runs) fails it, so nothing passes
//! without running.

use std::process::{Command, Stdio};

/// Whether `tool` answers `--version`; `script` installs it.
pub fn have(tool: &str, script: &str) -> bool {
    let found = Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !found {
        missing(tool, script);
    }
    found
}

/// Skips (or under `FERRITE_REQUIRE_TOOLS=1` fails) for a missing `tool`.
pub fn missing(tool: &str, script: &str) {
    assert!(
        std::env::var("FERRITE_REQUIRE_TOOLS").map_or(true, |v| v != "1"),
        "{tool} is not installed and FERRITE_REQUIRE_TOOLS=1 ({script} installs it)"
    );
    eprintln!("skipped: {tool} is not installed ({script} installs it)");
}
