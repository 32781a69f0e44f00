//! `ferrite-crashtest run` end to end: a few kills pass on a sound store, and
//! a store changed behind the test's back between two runs (a pair no
//! operation of the stream ever writes) fails the next check (non-zero
//! exit, `acked_lost` 1 in the summary), so the check can fail; and the
//! same through `ferrite serve` and `ferrite volume serve`, killed
//! instead of the worker.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `ferrite` binary the crash tester serves and checks stores with:
/// beside this package's binary, where `cargo test --workspace` builds it.
fn ferrite_binary() -> PathBuf {
    let p = Path::new(env!("CARGO_BIN_EXE_ferrite-crashtest")).with_file_name("ferrite");
    assert!(
        p.exists(),
        "{} is not built (`cargo test --workspace` builds it, or `cargo build -p ferrite-cli`)",
        p.display()
    );
    p
}

fn ferrite(args: &[&str]) -> Output {
    Command::new(ferrite_binary()).args(args).output().unwrap()
}

/// `ferrite-crashtest run ARGS`, with the `ferrite` binary named.
fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferrite-crashtest"))
        .arg("run")
        .args(args)
        .arg("--ferrite")
        .arg(ferrite_binary())
        .output()
        .unwrap()
}

fn crashtest(path: &Path, json: &Path, kills: &str) -> Output {
    crashtest_with(path, json, kills, &[])
}

fn crashtest_with(path: &Path, json: &Path, kills: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "--engine",
        "btree",
        "--kills",
        kills,
        "--max-run-ms",
        "150",
        "--seed",
        "5",
        "--path",
        path.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    run(&args)
}

fn summary(json: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(json).unwrap()).unwrap()
}

#[test]
fn kills_pass_on_a_sound_store_and_a_changed_one_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let (path, json) = (dir.path().join("db"), dir.path().join("summary.json"));
    let out = crashtest(&path, &json, "3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = summary(&json);
    assert_eq!(
        (s["kills"].as_u64(), s["acked_lost"].as_u64()),
        (Some(3), Some(0))
    );
    assert!(s["acked_ops"].as_u64().unwrap() > 0, "{s}");
    // Every killed writer's background-work board was read back.
    assert_eq!(s["boards_missing"].as_u64(), Some(0), "{s}");
    assert_eq!(s["background_expected"][0].as_str(), Some("checkpoint"));
    // A key past the stream's keyspace, so no run touches it again.
    let key = "zz-never-written";
    let put = ferrite(&["kv", "put", "--path", path.to_str().unwrap(), key, "v"]);
    assert!(
        put.status.success(),
        "{}",
        String::from_utf8_lossy(&put.stderr)
    );
    let out = crashtest(&path, &json, "1");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains(key));
    assert_eq!(summary(&json)["acked_lost"].as_u64(), Some(1));
}

#[test]
fn kills_of_the_server_lose_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let (path, json) = (dir.path().join("db"), dir.path().join("summary.json"));
    let out = crashtest_with(&path, &json, "3", &["--server"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = summary(&json);
    assert_eq!(s["server"].as_bool(), Some(true));
    assert_eq!(
        (s["kills"].as_u64(), s["acked_lost"].as_u64()),
        (Some(3), Some(0))
    );
    assert!(s["acked_ops"].as_u64().unwrap() > 0, "{s}");
    // The same store cannot be taken over by a run without the server.
    let out = crashtest(&path, &json, "1");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("server:btree"));
}

#[test]
fn kills_of_the_volume_server_lose_no_flushed_block() {
    let dir = tempfile::tempdir().unwrap();
    let (path, json) = (dir.path().join("vol"), dir.path().join("summary.json"));
    let out = run(&[
        "--engine",
        "rask",
        "--volume",
        "--mode",
        "batched:20",
        "--kills",
        "3",
        "--max-run-ms",
        "150",
        "--seed",
        "5",
        "--path",
        path.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = summary(&json);
    assert_eq!(s["volume"].as_bool(), Some(true));
    assert_eq!(
        (s["kills"].as_u64(), s["acked_lost"].as_u64()),
        (Some(3), Some(0))
    );
    assert!(s["acked_ops"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(s["boards_missing"].as_u64(), Some(0), "{s}");
}
