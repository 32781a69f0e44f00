//! The `ferrite` binary as a user drives it: key-value access that
//! survives between invocations, the engine recorded at creation, typed
//! refusals with a non-zero exit, `inspect`, the RASK map, and output into
//! a pipe that closes early.
#![allow(clippy::unwrap_used, reason = "tests fail loudly by design")]

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn ferrite(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap()
}

/// Runs the tool with `input` on its standard input.
fn ferrite_fed(args: &[&str], input: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn ok(args: &[&str]) -> String {
    let out = ferrite(args);
    assert!(
        out.status.success(),
        "ferrite {args:?} failed: {}",
        stderr(&out)
    );
    stdout(&out)
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn every_engine_keeps_writes_between_invocations() {
    let dir = tempfile::tempdir().unwrap();
    for engine in ["btree", "lsm", "zkv"] {
        let p = dir.path().join(engine);
        let p = path(&p);
        ok(&["kv", "put", "--engine", engine, "--path", p, "b", "2"]);
        ok(&["kv", "put", "--engine", engine, "--path", p, "a", "1"]);
        ok(&["kv", "put", "--engine", engine, "--path", p, "c", "3"]);
        // Later invocations find the engine in the store's identity.
        ok(&["kv", "del", "--path", p, "c"]);
        assert_eq!(ok(&["kv", "get", "--path", p, "a"]), "1\n", "{engine}");
        assert_eq!(ok(&["kv", "scan", "--path", p]), "a\t1\nb\t2\n", "{engine}");
        let missing = ferrite(&["kv", "get", "--path", p, "c"]);
        assert_eq!(missing.status.code(), Some(1), "{engine}");
        assert!(stderr(&missing).contains("not found"), "{engine}");
    }
}

#[test]
fn a_backup_restores_into_an_equal_store() {
    let dir = tempfile::tempdir().unwrap();
    for engine in ["btree", "lsm", "zkv"] {
        let src = dir.path().join(format!("{engine}-src"));
        let (bak, back) = (
            dir.path().join(format!("{engine}-bak")),
            dir.path().join(format!("{engine}-back")),
        );
        for (k, v) in [("b", "2"), ("a", "1"), ("c", "3")] {
            ok(&["kv", "put", "--engine", engine, "--path", path(&src), k, v]);
        }
        let said = ok(&["backup", "--path", path(&src), "--to", path(&bak)]);
        // The LSM copies its files and counts no pairs.
        let told = if engine == "lsm" {
            "files copied: "
        } else {
            "3 pairs"
        };
        assert!(said.contains(told), "{engine}: {said}");
        // The source goes on changing; the backup does not.
        ok(&["kv", "del", "--path", path(&src), "a"]);
        let said = ok(&["restore", "--from", path(&bak), "--path", path(&back)]);
        assert!(said.contains("3 pairs"), "{engine}: {said}");
        assert_eq!(
            ok(&["kv", "scan", "--path", path(&back)]),
            "a\t1\nb\t2\nc\t3\n"
        );
        // Neither overwrites a directory.
        let again = ferrite(&["backup", "--path", path(&src), "--to", path(&bak)]);
        assert_ne!(again.status.code(), Some(0), "{engine}");
        assert!(
            stderr(&again).contains("already holds"),
            "{engine}: {}",
            stderr(&again)
        );
    }
}

#[test]
fn scans_honour_bounds_limits_and_hex() {
    let dir = tempfile::tempdir().unwrap();
    let p = path(dir.path());
    for (k, v) in [("k1", "v1"), ("k2", "v2"), ("k3", "v3"), ("k4", "v4")] {
        ok(&["kv", "put", "--engine", "btree", "--path", p, k, v]);
    }
    let scan = ok(&["kv", "scan", "--path", p, "--from", "k2", "--to", "k4"]);
    assert_eq!(scan, "k2\tv2\nk3\tv3\n");
    assert_eq!(ok(&["kv", "scan", "--path", p, "--limit", "1"]), "k1\tv1\n");
    ok(&["kv", "put", "--path", p, "--hex", "00ff", "0a"]);
    assert_eq!(ok(&["kv", "get", "--path", p, "--hex", "00ff"]), "\\n\n");
    let odd = ferrite(&["kv", "get", "--path", p, "--hex", "0"]);
    assert!(!odd.status.success());
    assert!(stderr(&odd).contains("odd number of digits"));
}

/// `--keyspace` puts, reads, scans and loads in a named keyspace, which
/// `inspect` lists with its pairs, and `drop-keyspace` drops it.
#[test]
fn keyspaces_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = path(dir.path());
    ok(&["kv", "put", "--engine", "zkv", "--path", p, "k", "default"]);
    ok(&["kv", "put", "--path", p, "--keyspace", "users", "k", "ada"]);
    let loaded = ferrite_fed(
        &["kv", "load", "--path", p, "--keyspace", "users"],
        b"m\tgrace\n",
    );
    assert!(loaded.status.success(), "{}", stderr(&loaded));
    assert_eq!(ok(&["kv", "get", "--path", p, "k"]), "default\n");
    assert_eq!(
        ok(&["kv", "get", "--path", p, "--keyspace", "users", "k"]),
        "ada\n"
    );
    assert_eq!(
        ok(&["kv", "scan", "--path", p, "--keyspace", "users"]),
        "k\tada\nm\tgrace\n"
    );
    assert_eq!(ok(&["kv", "scan", "--path", p]), "k\tdefault\n");
    let inspected = ok(&["inspect", "--path", p]);
    assert!(inspected.contains("keyspaces  1 named"), "{inspected}");
    assert!(
        inspected
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["users", "2", "pairs", "10", "bytes"]),
        "{inspected}"
    );
    let missing = ferrite(&["kv", "get", "--path", p, "--keyspace", "nope", "k"]);
    assert!(
        stderr(&missing).contains("no keyspace \"nope\""),
        "{}",
        stderr(&missing)
    );
    ok(&["kv", "drop-keyspace", "--path", p, "users"]);
    let gone = ferrite(&["kv", "scan", "--path", p, "--keyspace", "users"]);
    assert!(!gone.status.success());
    assert!(!ok(&["inspect", "--path", p]).contains("users"));
}

/// `scan --all` of one store, fed to `load` of another, copies it across
/// engines: every byte value survives the escaped text form, tabs and
/// newlines included.
#[test]
fn a_dump_loads_into_a_store_of_another_engine() {
    let dir = tempfile::tempdir().unwrap();
    let from = dir.path().join("from");
    let to = dir.path().join("to");
    let (from, to) = (path(&from), path(&to));
    ok(&[
        "kv",
        "put",
        "--engine",
        "btree",
        "--path",
        from,
        "--hex",
        "00090a5c27225c78",
        "ff0d0a09",
    ]);
    let mut hex = String::new();
    for i in 0..300u32 {
        let v = format!("{:02x}", i % 256).repeat(i as usize % 7);
        hex += &format!("{:08x}\t{v}\n", i.wrapping_mul(2_654_435_761));
    }
    let seeded = ferrite_fed(&["kv", "load", "--path", from, "--hex"], hex.as_bytes());
    assert!(seeded.status.success(), "{}", stderr(&seeded));
    let pairs = 301;
    let dump = ok(&["kv", "scan", "--path", from, "--all"]);
    assert_eq!(dump.lines().count(), pairs);
    let awkward = "\\x00\\t\\n\\\\\\'\\\"\\\\x\t\\xff\\r\\n\\t";
    assert!(dump.lines().any(|l| l == awkward), "{dump}");
    let loaded = ferrite_fed(
        &[
            "kv", "load", "--engine", "lsm", "--path", to, "--batch", "64",
        ],
        dump.as_bytes(),
    );
    assert!(loaded.status.success(), "{}", stderr(&loaded));
    assert!(stderr(&loaded).contains(&format!("loaded {pairs} pairs")));
    assert_eq!(ok(&["kv", "scan", "--path", to, "--all"]), dump);
    let report = ok(&["inspect", "--path", to]);
    assert!(report.contains("engine     lsm"), "{report}");
}

/// A line that is not a pair stops a load and is named; every pair
/// before it is stored, none after it.
#[test]
fn a_bad_line_stops_a_load_after_the_pairs_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let p = path(dir.path());
    ok(&["kv", "put", "--engine", "zkv", "--path", p, "seed", "0"]);
    let input = b"a\t1\nb\t2\n\nc\\q\t3\nd\t4\n";
    let out = ferrite_fed(&["kv", "load", "--path", p, "--batch", "1"], input);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("line 4: unknown escape \\q"), "{err}");
    assert!(err.contains("the 2 pairs before it are stored"), "{err}");
    assert_eq!(ok(&["kv", "scan", "--path", p]), "a\t1\nb\t2\nseed\t0\n");
    let hex = ferrite_fed(&["kv", "load", "--path", p, "--hex"], b"0a\t0b\nzz\t00\n");
    assert!(stderr(&hex).contains("line 2"), "{}", stderr(&hex));
    assert_eq!(ok(&["kv", "get", "--path", p, "--hex", "0a"]), "\\x0b\n");
}

#[test]
fn refusals_exit_non_zero_and_say_why() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let p = path(&store);
    ok(&["kv", "put", "--engine", "btree", "--path", p, "k", "v"]);

    let wrong = ferrite(&["kv", "get", "--engine", "lsm", "--path", p, "k"]);
    assert!(!wrong.status.success());
    assert!(
        stderr(&wrong).contains("holds a btree store"),
        "{}",
        stderr(&wrong)
    );

    let absent = dir.path().join("absent");
    let none = ferrite(&["kv", "put", "--path", path(&absent), "k", "v"]);
    assert!(!none.status.success());
    assert!(stderr(&none).contains("give --engine"), "{}", stderr(&none));
    assert!(!absent.exists(), "a refused open creates nothing");

    let key = "k".repeat(70_000);
    let long = ferrite(&["kv", "put", "--path", p, &key, "v"]);
    assert!(!long.status.success());
    assert!(
        stderr(&long).contains("exceeds the maximum"),
        "{}",
        stderr(&long)
    );
    // The refused write changed nothing.
    assert_eq!(ok(&["kv", "scan", "--path", p]), "k\tv\n");
}

#[test]
fn inspect_names_the_engine_and_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let p = path(dir.path());
    ok(&["kv", "put", "--engine", "lsm", "--path", p, "k", "v"]);
    let report = ok(&["inspect", "--path", p]);
    assert!(report.contains("engine     lsm"), "{report}");
    assert!(report.contains("verify     ok"), "{report}");
    // The footprint's parts, and their sum beside the directory's size.
    let part = |kind: &str| -> u64 {
        report
            .lines()
            .find_map(|l| l.trim().strip_prefix(kind))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {kind} line: {report}"))
    };
    assert!(part("data") > 0, "{report}");
    assert!(part("log") > 0, "{report}");
    assert!(part("accounted") >= part("data") + part("log"), "{report}");
    let absent = ferrite(&["inspect", "--path", path(&dir.path().join("absent"))]);
    assert!(!absent.status.success());
}

#[test]
fn the_block_map_answers_piece_by_piece() {
    let dir = tempfile::tempdir().unwrap();
    let p = path(dir.path());
    ok(&["rask", "put", "--path", p, "100-199", "0:5000"]);
    ok(&["rask", "put", "--path", p, "150+10", "1:7"]);
    ok(&["rask", "del", "--path", p, "190-199"]);
    let pieces = ok(&["rask", "get", "--path", p, "90-209"]);
    assert_eq!(
        pieces,
        "90-99\t-\n100-149\t0:5000\n150-159\t1:7\n160-189\t0:5060\n190-209\t-\n"
    );
    ok(&["rask", "snapshot", "--path", p]);
    assert_eq!(
        ok(&["rask", "get", "--path", p, "150-151"]),
        "150-151\t1:7\n"
    );
    let inverted = ferrite(&["rask", "get", "--path", p, "9-3"]);
    assert!(!inverted.status.success());
}

#[test]
fn a_pipe_closed_early_ends_the_output_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let p = path(dir.path());
    // More output than a pipe buffers (64 KiB), so the scan is still
    // writing when its reader goes away.
    let big = "x".repeat(100_000);
    ok(&["kv", "put", "--engine", "btree", "--path", p, "a", &big]);
    ok(&["kv", "put", "--path", p, "b", &big]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(["kv", "scan", "--path", p])
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = child.stdout.take().unwrap();
    let mut first = [0u8; 8];
    reader.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"a\txxxxxx");
    drop(reader);
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert!(!err.contains("panicked"), "{err}");
    assert!(!err.contains("Broken pipe"), "{err}");
}

/// A store whose WAL is damaged where later records vouch for it is
/// refused with the reason and left as it is; `--salvage-wal` opens it
/// with the writes logged before the damage.
#[test]
fn a_damaged_wal_is_refused_and_salvaged_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("lsm");
    let p = path(&p);
    ok(&["kv", "put", "--path", p, "--engine", "lsm", "k0000", "v"]);
    // A loader killed while it waits for more input: its batches are in
    // the WAL (each synced), not yet in tables.
    let mut loader = Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args([
            "kv", "load", "--path", p, "--sync", "always", "--batch", "50",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines: String = (1..2000).map(|i| format!("k{i:04}\tvalue-{i}\n")).collect();
    let mut input = loader.stdin.take().unwrap();
    input.write_all(lines.as_bytes()).unwrap();
    input.flush().unwrap();
    // The live WAL is the largest; wait until it logs the last full batch.
    let live_wal = || {
        std::fs::read_dir(p)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|f| f.file_name().unwrap().to_str().unwrap().starts_with("wal-"))
            .max_by_key(|f| std::fs::metadata(f).unwrap().len())
            .unwrap()
    };
    let started = std::time::Instant::now();
    while !std::fs::read(live_wal())
        .unwrap()
        .windows(5)
        .any(|w| w == b"k1950")
    {
        assert!(
            started.elapsed().as_secs() < 60,
            "the loader logged nothing"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    loader.kill().unwrap();
    loader.wait().unwrap();
    drop(input);
    let wal = live_wal();
    let mut bytes = std::fs::read(&wal).unwrap();
    let mid = bytes.iter().rposition(|&b| b != 0).unwrap() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&wal, &bytes).unwrap();
    let refused = ferrite(&["kv", "get", "--path", p, "k0001"]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("corruption"),
        "{}",
        stderr(&refused)
    );
    assert!(
        !stderr(&refused).contains("give --engine"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(
        std::fs::read(&wal).unwrap(),
        bytes,
        "the refused open changed the WAL"
    );
    let all = ok(&["kv", "scan", "--path", p, "--all", "--salvage-wal"]);
    let keys: Vec<&str> = all.lines().map(|l| l.split('\t').next().unwrap()).collect();
    assert!(
        keys.len() > 1 && keys.len() < 2000,
        "{} pairs salvaged",
        keys.len()
    );
    let want: Vec<String> = (0..keys.len()).map(|i| format!("k{i:04}")).collect();
    assert_eq!(keys, want, "the salvaged pairs are the ones loaded first");
    // Salvaged once, the store opens as it is.
    assert_eq!(ok(&["kv", "get", "--path", p, "k0000"]).trim(), "v");
}
