//! What the `ferrite` binary's integration tests share: finding the
//! outside programs they drive. A missing one skips its test with a
//! message naming the script that installs it, or under CI (`CI=true`,
//! or `FERRITE_REQUIRE_TOOLS=1`) fails it, so nothing passes without
//! running.

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

/// Skips (or under CI fails) for a missing `tool`.
pub fn missing(tool: &str, script: &str) {
    assert!(
        !required(),
        "{tool} is not installed, and under CI a test never skips ({script} installs it)"
    );
    eprintln!("skipped: {tool} is not installed ({script} installs it)");
}

/// Whether outside programs are required: under CI (`CI` set to anything
/// but `false` or `0`, as CI services set it) or `FERRITE_REQUIRE_TOOLS=1`.
pub fn required() -> bool {
    let set = |name: &str, off: &[&str]| {
        std::env::var(name).is_ok_and(|v| !v.is_empty() && !off.contains(&v.as_str()))
    };
    set("CI", &["false", "0"]) || set("FERRITE_REQUIRE_TOOLS", &["0"])
}
