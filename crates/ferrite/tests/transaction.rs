//! Transactions on btree, lsm and zkv through the public API:
//! - a transaction's reads (points and scans both ways) see its own
//!   writes over its snapshot, and its commit leaves the store as the
//!   same writes on a `BTreeMap` do (proptest);
//! - each anomaly optimistic validation must stop is stopped: lost update,
//!   write skew, a phantom in a scanned range, a conflicting plain write;
//!   and what must not conflict does not (blind writes, a scan's unread
//!   tail, a rewrite of the same value, read-only transactions);
//! - concurrent threads' committed histories are serializable: their
//!   dependency graph (write-read, write-write and read-write edges, from
//!   the version each read saw) has no cycle. The checker is tested on
//!   histories that are not serializable.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::collections::{BTreeMap, HashMap};
use std::ops::{Bound, ControlFlow};
use std::sync::Arc;

use common::small_config;
use ferrite::{EngineKind, Error, KeyRange, Store};
use proptest::prelude::*;

fn open(kind: EngineKind, dir: &tempfile::TempDir) -> Store {
    small_config(kind).open(dir.path().join("db")).unwrap()
}

fn is_conflict<T: std::fmt::Debug>(r: ferrite::Result<T>) -> bool {
    matches!(r, Err(Error::Conflict(_)))
}

// --- own writes against a model -------------------------------------

#[derive(Debug, Clone)]
enum Op {
    Put(u8, u8),
    Delete(u8),
    DeleteRange(u8, u8),
    Get(u8),
    /// From `a` up (or down, `rev`), at most `limit` pairs.
    Scan(u8, bool, u8),
}

fn key(i: u8) -> Vec<u8> {
    format!("key{i:03}").into_bytes()
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..60, any::<u8>()).prop_map(|(k, v)| Op::Put(k, v)),
        2 => (0u8..60).prop_map(Op::Delete),
        1 => (0u8..60, 1u8..12).prop_map(|(a, n)| Op::DeleteRange(a, a.saturating_add(n))),
        3 => (0u8..60).prop_map(Op::Get),
        2 => (0u8..60, any::<bool>(), 1u8..20).prop_map(|(a, r, n)| Op::Scan(a, r, n)),
    ]
}

fn value(k: u8, v: u8) -> Vec<u8> {
    vec![v; 1 + (k as usize * 7 + v as usize) % 90]
}

fn own_writes(kind: EngineKind, initial: Vec<(u8, u8)>, ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let db = open(kind, &dir);
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for (k, v) in initial {
        db.put(key(k), value(k, v)).unwrap();
        model.insert(key(k), value(k, v));
    }
    let mut tx = db.transaction().unwrap();
    // Plain writes after the transaction began: its snapshot does not
    // show them (and its commit is a conflict only where it read them).
    db.put(key(200), b"late").unwrap();
    for op in ops {
        match op {
            Op::Put(k, v) => {
                tx.put(key(k), value(k, v)).unwrap();
                model.insert(key(k), value(k, v));
            }
            Op::Delete(k) => {
                tx.delete(key(k)).unwrap();
                model.remove(&key(k));
            }
            Op::DeleteRange(a, b) => {
                tx.delete_range(key(a)..key(b)).unwrap();
                let doomed: Vec<_> = model
                    .range(key(a)..key(b))
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in doomed {
                    model.remove(&k);
                }
            }
            Op::Get(k) => assert_eq!(tx.get(key(k)).unwrap(), model.get(&key(k)).cloned()),
            Op::Scan(a, rev, limit) => {
                let mut got = Vec::new();
                let mut visit = |k: &[u8], v: &[u8]| {
                    got.push((k.to_vec(), v.to_vec()));
                    if got.len() == limit as usize {
                        ControlFlow::Break(())
                    } else {
                        ControlFlow::Continue(())
                    }
                };
                let k = key(a);
                let want: Vec<(Vec<u8>, Vec<u8>)> = if rev {
                    let r = KeyRange {
                        start: Bound::Unbounded,
                        end: Bound::Included(&k),
                    };
                    tx.scan_rev(r, &mut visit).unwrap();
                    model
                        .range(..=k.clone())
                        .rev()
                        .take(limit as usize)
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                } else {
                    let r = KeyRange {
                        start: Bound::Included(&k),
                        end: Bound::Excluded(b"key100"),
                    };
                    tx.scan(r, &mut visit).unwrap();
                    model
                        .range(k.clone()..b"key100".to_vec())
                        .take(limit as usize)
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                };
                assert_eq!(got, want, "scan from {a} rev {rev} limit {limit}");
            }
        }
    }
    // Up to the plain write's key only: reading that would be a conflict.
    assert_eq!(
        tx.range(..b"key100".to_vec()).unwrap(),
        model
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<Vec<_>>()
    );
    tx.commit().unwrap();
    model.insert(key(200), b"late".to_vec());
    let stored: Vec<(Vec<u8>, Vec<u8>)> = db.iter().map(|p| p.unwrap()).collect();
    assert_eq!(stored, model.into_iter().collect::<Vec<_>>());
    db.verify().unwrap();
    db.close().unwrap();
}

// --- anomalies -------------------------------------------------------

fn lost_update_is_a_conflict(kind: EngineKind) {
    let dir = tempfile::tempdir().unwrap();
    let db = open(kind, &dir);
    db.put("x", "1").unwrap();
    let mut t1 = db.transaction().unwrap();
    let mut t2 = db.transaction().unwrap();
    assert_eq!(t1.get("x").unwrap().unwrap(), b"1");
    assert_eq!(t2.get("x").unwrap().unwrap(), b"1");
    t2.put("x", "2").unwrap();
    t2.commit().unwrap();
    t1.put("x", "11").unwrap();
    t1.put("y", "written by t1").unwrap();
    assert!(is_conflict(t1.commit()));
    // Nothing of the failed transaction is there.
    assert_eq!(db.get("x").unwrap().unwrap(), b"2");
    assert_eq!(db.get("y").unwrap(), None);
}

fn write_skew_is_a_conflict(kind: EngineKind) {
    let dir = tempfile::tempdir().unwrap();
    let db = open(kind, &dir);
    db.put("on-call:alice", "yes").unwrap();
    db.put("on-call:bob", "yes").unwrap();
    // Each doctor leaves if the other stays: under snapshot isolation
    // both would, and nobody would be on call.
    let mut t1 = db.transaction().unwrap();
    let mut t2 = db.transaction().unwrap();
    for t in [&mut t1, &mut t2] {
        assert_eq!(t.prefix("on-call:").unwrap().len(), 2);
    }
    t1.put("on-call:alice", "no").unwrap();
    t2.put("on-call:bob", "no").unwrap();
    t1.commit().unwrap();
    assert!(is_conflict(t2.commit()));
    assert_eq!(db.get("on-call:bob").unwrap().unwrap(), b"yes");
}

fn a_phantom_in_a_scanned_range_is_a_conflict(kind: EngineKind) {
    let dir = tempfile::tempdir().unwrap();
    let db = open(kind, &dir);
    db.put("order:1", "10").unwrap();
    db.put("order:3", "30").unwrap();
    let mut t = db.transaction().unwrap();
    let orders = t.prefix("order:").unwrap();
    let total: u32 = orders
        .iter()
        .map(|(_, v)| std::str::from_utf8(v).unwrap().parse::<u32>().unwrap())
        .sum();
    t.put("total", total.to_string()).unwrap();
    // A plain write, not a transaction, inserts into the range.
    db.put("order:2", "20").unwrap();
    assert!(is_conflict(t.commit()));
    assert_eq!(db.get("total").unwrap(), None);
    // Deleting from the range is a change too.
    let mut t = db.transaction().unwrap();
    assert_eq!(t.prefix("order:").unwrap().len(), 3);
    t.put("total", "60").unwrap();
    db.delete("order:3").unwrap();
    assert!(is_conflict(t.commit()));
}

fn what_was_not_read_is_no_conflict(kind: EngineKind) {
    let dir = tempfile::tempdir().unwrap();
    let db = open(kind, &dir);
    for k in ["a", "b", "c", "d"] {
        db.put(k, "0").unwrap();
    }
    // A scan that stopped at "b" read nothing past it.
    let mut t = db.transaction().unwrap();
    let mut seen = 0;
    t.scan(KeyRange::all(), &mut |_, _| {
        seen += 1;
        if seen == 2 {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })
    .unwrap();
    t.put("a", "1").unwrap();
    db.put("c", "changed").unwrap();
    db.put("bb", "inserted past the stop").unwrap();
    t.commit().unwrap();
    assert_eq!(db.get("a").unwrap().unwrap(), b"1");
    // The same at the other end, descending.
    let mut t = db.transaction().unwrap();
    let mut first = None;
    t.scan_rev(KeyRange::all(), &mut |k, _| {
        first = Some(k.to_vec());
        ControlFlow::Break(())
    })
    .unwrap();
    assert_eq!(first.as_deref(), Some(&b"d"[..]));
    t.put("z", "1").unwrap();
    db.put("a", "changed below the stop").unwrap();
    t.commit().unwrap();
    // Blind writes: a key written but never read.
    let mut t = db.transaction().unwrap();
    t.put("b", "blind").unwrap();
    db.put("b", "plain").unwrap();
    t.commit().unwrap();
    assert_eq!(db.get("b").unwrap().unwrap(), b"blind");
    // A key rewritten with the value the transaction read.
    let mut t = db.transaction().unwrap();
    assert_eq!(t.get("d").unwrap().unwrap(), b"0");
    db.put("d", "0").unwrap();
    t.put("e", "1").unwrap();
    t.commit().unwrap();
    // A read-only transaction commits whatever changed: it read one
    // instant of the store.
    let mut t = db.transaction().unwrap();
    assert_eq!(t.get("e").unwrap().unwrap(), b"1");
    db.put("e", "2").unwrap();
    assert!(t.is_read_only());
    t.commit().unwrap();
    // A key read from the transaction's own write is not a read of the
    // store.
    let mut t = db.transaction().unwrap();
    t.put("f", "mine").unwrap();
    assert_eq!(t.get("f").unwrap().unwrap(), b"mine");
    db.put("f", "theirs").unwrap();
    t.commit().unwrap();
    assert_eq!(db.get("f").unwrap().unwrap(), b"mine");
}

/// Two threads add to one counter through `transact`: no increment is
/// lost, however many commits conflicted and ran again.
fn transact_loses_no_increment(kind: EngineKind) {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(open(kind, &dir));
    let per_thread = 150u64;
    std::thread::scope(|s| {
        for _ in 0..2 {
            let db = db.clone();
            s.spawn(move || {
                for _ in 0..per_thread {
                    db.transact(|tx| {
                        let n = tx
                            .get("counter")?
                            .map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap()));
                        tx.put("counter", (n + 1).to_le_bytes())
                    })
                    .unwrap();
                }
            });
        }
    });
    let n = u64::from_le_bytes(db.get("counter").unwrap().unwrap().try_into().unwrap());
    assert_eq!(n, 2 * per_thread);
}

// --- serializability of concurrent histories --------------------------

/// A committed transaction as its thread saw it: for each key it read,
/// the id of the transaction whose write it found (0: the initial
/// value), and the keys it wrote (each one it had read).
#[derive(Debug, Clone)]
struct Committed {
    id: u64,
    reads: BTreeMap<u8, u64>,
    writes: Vec<u8>,
}

/// Checks a history of transactions that write only keys they read:
/// each version of a key has at most one successor (no lost update), and
/// the graph of write-read, write-write and read-write dependencies has
/// no cycle. Returns the last writer of each key, or why the history is
/// not serializable.
fn serializable(history: &[Committed]) -> Result<BTreeMap<u8, u64>, String> {
    // The successor of each version: (key, writer) -> next writer.
    let mut next: HashMap<(u8, u64), u64> = HashMap::new();
    for t in history {
        for &k in &t.writes {
            let prev = *t
                .reads
                .get(&k)
                .ok_or(format!("{} wrote {k} unread", t.id))?;
            if let Some(other) = next.insert((k, prev), t.id) {
                return Err(format!(
                    "lost update: {} and {other} both replaced {prev}'s version of key {k}",
                    t.id
                ));
            }
        }
    }
    let mut edges: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut edge = |a: u64, b: u64| {
        if a != b {
            edges.entry(a).or_default().push(b);
        }
    };
    for t in history {
        for (&k, &w) in &t.reads {
            edge(w, t.id); // write-read (and write-write for its writes)
            if let Some(&n) = next.get(&(k, w)) {
                edge(t.id, n); // read-write: t read what n overwrote
            }
        }
    }
    // Kahn's algorithm over every transaction and the initial state.
    let mut indegree: HashMap<u64, usize> = HashMap::new();
    indegree.insert(0, 0);
    for t in history {
        indegree.entry(t.id).or_insert(0);
    }
    for targets in edges.values() {
        for b in targets {
            *indegree.entry(*b).or_insert(0) += 1;
        }
    }
    let mut ready: Vec<u64> = indegree
        .iter()
        .filter(|(_, &d)| d == 0)
        .map(|(&n, _)| n)
        .collect();
    let mut done = 0;
    while let Some(n) = ready.pop() {
        done += 1;
        for b in edges.get(&n).into_iter().flatten() {
            let d = indegree.get_mut(b).unwrap();
            *d -= 1;
            if *d == 0 {
                ready.push(*b);
            }
        }
    }
    if done != indegree.len() {
        return Err(format!(
            "a dependency cycle among {} transactions",
            indegree.len() - done
        ));
    }
    let mut last = BTreeMap::new();
    for k in history.iter().flat_map(|t| t.writes.iter().copied()) {
        let mut v = 0;
        while let Some(&n) = next.get(&(k, v)) {
            v = n;
        }
        last.insert(k, v);
    }
    Ok(last)
}

#[test]
fn the_checker_refuses_histories_that_are_not_serializable() {
    let t = |id, reads: &[(u8, u64)], writes: &[u8]| Committed {
        id,
        reads: reads.iter().copied().collect(),
        writes: writes.to_vec(),
    };
    // Write skew: both read both initial versions, each wrote one.
    let skew = [t(1, &[(0, 0), (1, 0)], &[0]), t(2, &[(0, 0), (1, 0)], &[1])];
    assert!(serializable(&skew).unwrap_err().contains("cycle"));
    // Lost update.
    let lost = [t(1, &[(0, 0)], &[0]), t(2, &[(0, 0)], &[0])];
    assert!(serializable(&lost).unwrap_err().contains("lost update"));
    // A read of a version older than one its reader depends on.
    let stale = [
        t(1, &[(0, 0)], &[0]),
        t(2, &[(0, 1), (1, 0)], &[1]),
        t(3, &[(0, 0), (1, 2)], &[]),
    ];
    assert!(serializable(&stale).unwrap_err().contains("cycle"));
    // And a serial history passes.
    let serial = [t(1, &[(0, 0), (1, 0)], &[0]), t(2, &[(0, 1), (1, 0)], &[1])];
    assert_eq!(
        serializable(&serial).unwrap(),
        BTreeMap::from([(0, 1), (1, 2)])
    );
}

const ACCOUNTS: u8 = 6;

fn account(k: u8) -> String {
    format!("acct{k}")
}

/// A value names the transaction that wrote it.
fn writer_of(v: &[u8]) -> u64 {
    u64::from_le_bytes(v[..8].try_into().unwrap())
}

fn concurrent_histories_are_serializable(kind: EngineKind) {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(open(kind, &dir));
    for k in 0..ACCOUNTS {
        db.put(account(k), 0u64.to_le_bytes()).unwrap();
    }
    let threads = 3u64;
    let per_thread = 300u64;
    let histories: Vec<(Vec<Committed>, u64)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let db = db.clone();
                s.spawn(move || {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(t);
                    let mut out = Vec::new();
                    let mut conflicts = 0;
                    for n in 0..per_thread {
                        let id = (t + 1) * 1_000_000 + n + 1;
                        let mut tx = db.transaction().unwrap();
                        let mut reads = BTreeMap::new();
                        if rng.gen_bool(0.25) {
                            // Every account by one scan.
                            for (k, v) in tx.prefix("acct").unwrap() {
                                let k = k[4..].iter().fold(0u8, |a, d| a * 10 + (d - b'0'));
                                reads.insert(k, writer_of(&v));
                            }
                        } else {
                            for _ in 0..rng.gen_range(2..=3) {
                                let k = rng.gen_range(0..ACCOUNTS);
                                let v = tx.get(account(k)).unwrap().unwrap();
                                reads.insert(k, writer_of(&v));
                            }
                        }
                        let candidates: Vec<u8> = reads.keys().copied().collect();
                        let writes: Vec<u8> = candidates
                            .iter()
                            .copied()
                            .filter(|_| rng.gen_bool(0.4))
                            .collect();
                        for &k in &writes {
                            let mut v = id.to_le_bytes().to_vec();
                            v.extend(std::iter::repeat_n(k, (id % 50) as usize));
                            tx.put(account(k), v).unwrap();
                        }
                        match tx.commit() {
                            Ok(()) => out.push(Committed { id, reads, writes }),
                            Err(Error::Conflict(_)) => conflicts += 1,
                            Err(e) => panic!("{e}"),
                        }
                    }
                    (out, conflicts)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let conflicts: u64 = histories.iter().map(|(_, c)| c).sum();
    let history: Vec<Committed> = histories.into_iter().flat_map(|(h, _)| h).collect();
    let last = serializable(&history).unwrap_or_else(|why| panic!("{kind}: {why}"));
    for k in 0..ACCOUNTS {
        let v = db.get(account(k)).unwrap().unwrap();
        assert_eq!(
            writer_of(&v),
            last.get(&k).copied().unwrap_or(0),
            "account {k}"
        );
    }
    eprintln!("{kind}: {} committed, {conflicts} conflicts", history.len());
    assert_eq!(history.len() as u64 + conflicts, threads * per_thread);
}

use rand::{Rng, SeedableRng};

macro_rules! engine_tests {
    ($($name:ident: $kind:expr;)*) => {$(
        mod $name {
            use super::*;

            proptest! {
                #![proptest_config(ProptestConfig::with_cases(24))]
                #[test]
                fn reads_see_own_writes_and_commit_matches_a_map(
                    initial in prop::collection::vec((0u8..60, any::<u8>()), 0..40),
                    ops in prop::collection::vec(op(), 1..60),
                ) {
                    own_writes($kind, initial, ops);
                }
            }

            #[test]
            fn lost_update() {
                lost_update_is_a_conflict($kind);
            }

            #[test]
            fn write_skew() {
                write_skew_is_a_conflict($kind);
            }

            #[test]
            fn phantom() {
                a_phantom_in_a_scanned_range_is_a_conflict($kind);
            }

            #[test]
            fn no_false_conflicts() {
                what_was_not_read_is_no_conflict($kind);
            }

            #[test]
            fn transact_counter() {
                transact_loses_no_increment($kind);
            }

            #[test]
            fn serializable_histories() {
                concurrent_histories_are_serializable($kind);
            }
        }
    )*};
}

engine_tests! {
    btree: EngineKind::Btree;
    lsm: EngineKind::Lsm;
    zkv: EngineKind::Zkv;
}
