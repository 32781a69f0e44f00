//! `ferrite bench`, `ferrite repro` and `ferrite io-probe`, forwarded,
//! arguments unchanged, to the `ferrite-bench` binary beside this one;
//! `ferrite crashtest` to `ferrite-crashtest run`.
//!
//! The measuring and crash-testing tools live in their own binaries so
//! that this one carries no harness (no counting allocator, no peers, no
//! killed workers, no Redis client). When `ferrite` runs under `cargo
//! run`, the harness is built first with the same profile, so it is
//! never older than the sources; an installed `ferrite` expects the
//! harness installed beside it (`cargo install --path
//! crates/ferrite-bench`, `crates/ferrite-crashtest`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// A harness binary and the package that builds it.
struct Harness {
    binary: &'static str,
    package: &'static str,
    /// Whether it has the `rocksdb` feature (the RocksDB peer).
    rocksdb: bool,
}

const BENCH: Harness = Harness {
    binary: "ferrite-bench",
    package: "ferrite-bench",
    rocksdb: true,
};

const CRASHTEST: Harness = Harness {
    binary: "ferrite-crashtest",
    package: "ferrite-crashtest",
    rocksdb: false,
};

/// Runs `ferrite-bench <sub> <args...>` and returns its exit code.
pub fn bench(sub: &str, args: &[OsString]) -> Result<i32> {
    forward(&BENCH, sub, args)
}

/// Runs `ferrite-crashtest run <args...>` and returns its exit code.
pub fn crashtest(args: &[OsString]) -> Result<i32> {
    forward(&CRASHTEST, "run", args)
}

fn forward(h: &Harness, sub: &str, args: &[OsString]) -> Result<i32> {
    let exe = std::env::current_exe().context("locating the ferrite binary")?;
    let dir = exe
        .parent()
        .context("the ferrite binary has no parent directory")?;
    if let Some(cargo) = std::env::var_os("CARGO") {
        build_under_cargo(h, &cargo, dir)?;
    }
    let harness = dir.join(h.binary);
    if !harness.exists() {
        bail!(
            "`ferrite {sub}` runs {}, which is not built; build it with \
             `cargo build --release -p {}` (or install it beside ferrite)",
            harness.display(),
            h.package
        );
    }
    let mut cmd = Command::new(&harness);
    // Experiments and crash tests that run `ferrite serve` run this very
    // binary.
    cmd.env("FERRITE_BIN", &exe);
    let status = cmd
        .arg(sub)
        .args(args)
        .status()
        .with_context(|| format!("running {}", harness.display()))?;
    Ok(status.code().unwrap_or(1))
}

/// Builds the harness with the profile this binary was built with (the
/// name of the directory it is in), and with the RocksDB peer if this
/// binary was built with its `rocksdb` feature.
fn build_under_cargo(h: &Harness, cargo: &std::ffi::OsStr, dir: &Path) -> Result<()> {
    let profile = match dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev".to_string(),
        Some(p) => p.to_string(),
        None => bail!("cannot tell the build profile from {}", dir.display()),
    };
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--quiet", "--profile", &profile, "-p", h.package])
        .args(["--bin", h.binary]);
    if h.rocksdb && cfg!(feature = "rocksdb") {
        cmd.args(["--features", "rocksdb"]);
    }
    if let Some(manifest) = workspace_manifest() {
        cmd.arg("--manifest-path").arg(manifest);
    }
    let status = cmd
        .status()
        .with_context(|| format!("building {} with cargo", h.package))?;
    if !status.success() {
        bail!("building {} failed ({status})", h.package);
    }
    Ok(())
}

/// The workspace's manifest, found from the CLI crate's own directory.
fn workspace_manifest() -> Option<PathBuf> {
    let crate_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?);
    let root = crate_dir.parent()?.parent()?.join("Cargo.toml");
    root.exists().then_some(root)
}
