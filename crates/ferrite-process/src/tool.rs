//! Outside programs a test drives (redis-server, nbdinfo, qemu, ...): a
//! missing one skips its test with a message naming what installs it,
//! or, when tools are required, fails it, so nothing passes without
//! running.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Whether `tool` answers `--version`; `script` installs it. Missing, it
/// says so (see [`missing`]).
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

/// Skips the caller's test for a missing `what` (`how` provides it), or
/// fails it when tools are [`required`].
pub fn missing(what: &str, how: &str) {
    assert!(
        !required(),
        "{what} is not installed, and under CI a test never skips ({how} installs it)"
    );
    eprintln!("skipped: {what} is not installed ({how} installs it)");
}

/// Whether outside programs are required: under CI (`CI` set to anything
/// but `false` or `0`, as CI services set it) or `FERRITE_REQUIRE_TOOLS=1`.
pub fn required() -> bool {
    let set = |name: &str, off: &[&str]| {
        std::env::var(name).is_ok_and(|v| !v.is_empty() && !off.contains(&v.as_str()))
    };
    set("CI", &["false", "0"]) || set("FERRITE_REQUIRE_TOOLS", &["0"])
}

/// The `python` of a venv at `venv` holding `packages` from PyPI (pip
/// requirement strings), made there once and reused while `import`
/// succeeds in it; `None` (or, when tools are [`required`], a failed
/// test) when it cannot be made.
pub fn python_venv(venv: &Path, packages: &[&str], import: &str) -> Option<PathBuf> {
    let python = venv.join("bin/python");
    let ready = |p: &Path| {
        Command::new(p)
            .args(["-c", &format!("import {import}")])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if ready(&python) {
        return Some(python);
    }
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(venv)
        .status()
        .is_ok_and(|s| s.success())
        && Command::new(venv.join("bin/pip"))
            .args(["install", "-q"])
            .args(packages)
            .status()
            .is_ok_and(|s| s.success());
    if made && ready(&python) {
        Some(python)
    } else {
        missing(
            &format!("a Python venv with {}", packages.join(", ")),
            "python3-venv and PyPI",
        );
        None
    }
}
