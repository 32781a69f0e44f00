//! The server under real clients: `redis-cli` running one script against
//! it and against a real `redis-server` side by side (the replies must be
//! the same), the Python `redis` client (pipelines, transactions, RESP3),
//! and `redis-benchmark` finishing without errors.
//!
//! `scripts/install-redis-tools.sh` installs the Debian packages; the
//! Python client comes from PyPI into a venv under the target directory.
//! A test whose tool is missing says so and passes without running,
//! unless under CI (`CI=true` or `FERRITE_REQUIRE_TOOLS=1`): then it fails.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{have, RedisServer, TestServer, ENGINES};
use ferrite::EngineKind;

fn redis_cli(port: u16, script: &Path) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .stdin(std::fs::File::open(script).unwrap())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients")
        .join(name)
}

#[test]
fn redis_cli_gets_the_same_replies_as_from_redis_server() {
    if !have("redis-cli") || !have("redis-server") {
        return;
    }
    let redis = RedisServer::start();
    let want = redis_cli(redis.port, &script("compare.redis"));
    assert!(want.lines().count() > 80, "{want}");
    for kind in ENGINES {
        let s = TestServer::start(kind);
        let got = redis_cli(s.addr.port(), &script("compare.redis"));
        for (i, (g, w)) in got.lines().zip(want.lines()).enumerate() {
            assert_eq!(g, w, "{kind}: reply {} differs", i + 1);
        }
        assert_eq!(got.lines().count(), want.lines().count(), "{kind}");
    }
}

/// A venv under the target dir named `name`, with `packages` from PyPI.
fn python_venv(name: &str, packages: &[&str], import: &str) -> Option<PathBuf> {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    ferrite_process::tool::python_venv(&venv, packages, import)
}

/// A venv with the `redis` package from PyPI.
fn python_with_redis() -> Option<PathBuf> {
    python_venv("redis-py-venv", &["redis>=5,<6"], "redis")
}

#[test]
fn the_python_client_pipelines_transacts_and_speaks_resp3() {
    let Some(python) = python_with_redis() else {
        return;
    };
    for kind in [EngineKind::Lsm, EngineKind::Btree] {
        let s = TestServer::start(kind);
        let out = Command::new(&python)
            .arg(script("redis_py.py"))
            .arg(s.addr.port().to_string())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{kind}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A venv with RQ (and the `redis` package) from PyPI. RQ 1.12 and later
/// keep job results in streams, which ferrite does not serve.
fn python_with_rq() -> Option<PathBuf> {
    python_venv(
        "rq-1.11-venv",
        &["redis>=5,<6", "rq>=1.11,<1.12"],
        "rq, redis",
    )
}

#[test]
fn an_rq_worker_runs_jobs_and_a_killed_one_leaves_its_job_failed() {
    let Some(python) = python_with_rq() else {
        return;
    };
    let s = TestServer::start(EngineKind::Lsm);
    let work = tempfile::tempdir().unwrap();
    let out = Command::new(&python)
        .arg(script("rq_jobs.py"))
        .arg(s.addr.port().to_string())
        .arg(work.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn redis_benchmark_runs_without_errors() {
    if !have("redis-benchmark") {
        return;
    }
    let s = TestServer::start(EngineKind::Btree);
    let out = Command::new("redis-benchmark")
        .args(["-p", &s.addr.port().to_string(), "-t", "set,get,incr,mset"])
        .args(["-n", "100000", "-P", "16", "-q"])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    for test in ["SET", "GET", "INCR", "MSET"] {
        assert!(
            // Progress lines end in CR; the final one per test in LF.
            text.split(['\r', '\n'])
                .any(|l| l.trim_start().starts_with(test) && l.contains("requests per second")),
            "{test} did not finish:\n{text}"
        );
    }
    assert!(!text.contains("ERR"), "{text}");
}
