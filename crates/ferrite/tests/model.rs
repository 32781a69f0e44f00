//! Every engine through the public API against a `BTreeMap`: puts,
//! deletes, range deletes, compare-and-swap and batches; iterators in both
//! directions with seeks; snapshots that must not change while writes,
//! flushes, compactions, checkpoints and zone reclamation go on; and
//! closing and reopening the store in the middle.
//!
//! Each engine runs with options small enough that its background work
//! happens every few operations (tiny memtables and levels, a small pool
//! and checkpoint interval, small zones).
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;

mod common;

use common::small_config as config;
use ferrite::{EngineKind, Iter, KvPair, Snapshot, Store, WriteBatch};
use proptest::prelude::*;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

const KEYS: u16 = 400;

/// Keys of varied length that sort by their number.
fn key(i: u16) -> Vec<u8> {
    let mut k = format!("k{i:04}").into_bytes();
    k.extend(std::iter::repeat_n(b'.', (i % 7) as usize * 3));
    k
}

/// Values of varied length, now and then past a page (overflow pages,
/// value logs).
fn value(i: u16, v: u8) -> Vec<u8> {
    let len = match v % 16 {
        0 | 1 => 3000,
        2..=5 => 200,
        _ => 1 + (v as usize % 40),
    };
    let mut out = vec![v; len];
    out[0] = (i & 0xFF) as u8;
    out
}

#[derive(Debug, Clone)]
enum Step {
    Next,
    Back,
    Seek(u16),
    SeekForPrev(u16),
}

#[derive(Debug, Clone)]
enum Op {
    Put(u16, u8),
    Delete(u16),
    /// Keys `a..a+len`.
    DeleteRange(u16, u16),
    /// Compare-and-swap expecting the key's current value (`true`) or a
    /// wrong one, to `Some` value or to absent.
    Cas(u16, bool, Option<u8>),
    /// Puts (`Some`), deletes (`None`), and range deletes of `n` keys
    /// (`Err(n)`), in order.
    Batch(Vec<(u16, Result<Option<u8>, u16>)>),
    TakeSnapshot,
    DropSnapshot(usize),
    CheckSnapshot(usize, u16, u16),
    Iterate(u16, u16, Vec<Step>),
    Flush,
    Reopen,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => Just(Step::Next),
        4 => Just(Step::Back),
        1 => (0..KEYS).prop_map(Step::Seek),
        1 => (0..KEYS).prop_map(Step::SeekForPrev),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        30 => (0..KEYS, any::<u8>()).prop_map(|(k, v)| Op::Put(k, v)),
        6 => (0..KEYS).prop_map(Op::Delete),
        3 => (0..KEYS, 1u16..120).prop_map(|(a, n)| Op::DeleteRange(a, n)),
        4 => (0..KEYS, any::<bool>(), prop::option::of(any::<u8>()))
            .prop_map(|(k, right, v)| Op::Cas(k, right, v)),
        4 => prop::collection::vec(
            (
                0..KEYS,
                prop_oneof![
                    9 => prop::option::of(any::<u8>()).prop_map(Ok),
                    1 => (1u16..60).prop_map(Err),
                ],
            ),
            1..30,
        )
        .prop_map(Op::Batch),
        2 => Just(Op::TakeSnapshot),
        1 => (0usize..4).prop_map(Op::DropSnapshot),
        2 => (0usize..4, 0..KEYS, 0..KEYS).prop_map(|(i, a, b)| Op::CheckSnapshot(i, a, b)),
        2 => (0..KEYS, 0..KEYS, prop::collection::vec(step(), 0..60))
            .prop_map(|(a, b, s)| Op::Iterate(a, b, s)),
        1 => Just(Op::Flush),
        1 => Just(Op::Reopen),
    ]
}

fn bounds(a: u16, b: u16) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    (
        Bound::Included(key(a.min(b))),
        Bound::Excluded(key(a.max(b))),
    )
}

fn model_range(m: &Model, a: u16, b: u16) -> Vec<KvPair> {
    m.range(bounds(a, b))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn collect(it: impl Iterator<Item = ferrite::Result<KvPair>>) -> Vec<KvPair> {
    it.map(|r| r.unwrap()).collect()
}

/// Walks `it` with `steps` against the sorted `pairs` of its range,
/// checking every pair it yields.
fn walk(mut it: Iter, pairs: &[KvPair], steps: &[Step]) -> Result<(), TestCaseError> {
    let (mut f, mut b) = (0usize, pairs.len());
    for s in steps {
        match s {
            Step::Next => {
                let want = (f < b).then(|| pairs[f].clone());
                if want.is_some() {
                    f += 1;
                }
                prop_assert_eq!(it.next().map(|r| r.unwrap()), want);
            }
            Step::Back => {
                let want = (f < b).then(|| pairs[b - 1].clone());
                if want.is_some() {
                    b -= 1;
                }
                prop_assert_eq!(it.next_back().map(|r| r.unwrap()), want);
            }
            Step::Seek(t) => {
                it.seek(key(*t));
                f = pairs.partition_point(|(k, _)| *k < key(*t));
            }
            Step::SeekForPrev(t) => {
                it.seek_for_prev(key(*t));
                b = pairs.partition_point(|(k, _)| *k <= key(*t));
            }
        }
    }
    Ok(())
}

fn check_snapshot(snap: &Snapshot, model: &Model, a: u16, b: u16) -> Result<(), TestCaseError> {
    let all: Vec<KvPair> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    prop_assert_eq!(collect(snap.iter()), all.clone());
    let mut rev = collect(snap.iter().rev());
    rev.reverse();
    prop_assert_eq!(rev, all);
    prop_assert_eq!(collect(snap.range(bounds(a, b))), model_range(model, a, b));
    prop_assert_eq!(snap.get(key(a))?, model.get(&key(a)).cloned());
    Ok(())
}

fn run(kind: EngineKind, ops: &[Op]) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let cfg = config(kind);
    let open = |p: &Path| cfg.open(p).unwrap();
    let mut store: Option<Store> = Some(open(&path));
    let mut model = Model::new();
    let mut snaps: Vec<(Snapshot, Model)> = Vec::new();
    for op in ops {
        let db = store.as_ref().unwrap();
        match op {
            Op::Put(k, v) => {
                db.put(key(*k), value(*k, *v))?;
                model.insert(key(*k), value(*k, *v));
            }
            Op::Delete(k) => {
                db.delete(key(*k))?;
                model.remove(&key(*k));
            }
            Op::DeleteRange(a, n) => {
                let (s, e) = (key(*a), key(a.saturating_add(*n)));
                db.delete_range(s.clone()..e.clone())?;
                model.retain(|k, _| !(*k >= s && *k < e));
            }
            Op::Cas(k, right, new) => {
                let now = model.get(&key(*k)).cloned();
                let expected = if *right {
                    now.clone()
                } else {
                    Some(b"no such value".to_vec())
                };
                let new_value = new.map(|v| value(*k, v));
                let swapped =
                    db.compare_and_swap(key(*k), expected.as_deref(), new_value.as_deref())?;
                prop_assert_eq!(swapped, *right);
                if swapped {
                    match new_value {
                        Some(v) => model.insert(key(*k), v),
                        None => model.remove(&key(*k)),
                    };
                }
            }
            Op::Batch(items) => {
                let mut b = WriteBatch::new();
                for (k, v) in items {
                    match v {
                        Ok(Some(v)) => {
                            b.put(&key(*k), &value(*k, *v))?;
                            model.insert(key(*k), value(*k, *v));
                        }
                        Ok(None) => {
                            b.delete(&key(*k))?;
                            model.remove(&key(*k));
                        }
                        Err(n) => {
                            let (s, e) = (key(*k), key(k.saturating_add(*n)));
                            b.delete_range(&s, &e)?;
                            model.retain(|k, _| !(*k >= s && *k < e));
                        }
                    }
                }
                db.write(&b)?;
            }
            Op::TakeSnapshot => {
                if snaps.len() < 4 {
                    snaps.push((db.snapshot()?, model.clone()));
                }
            }
            Op::DropSnapshot(i) => {
                if *i < snaps.len() {
                    snaps.remove(*i);
                }
            }
            Op::CheckSnapshot(i, a, b) => {
                if let Some((s, m)) = snaps.get(*i) {
                    check_snapshot(s, m, *a, *b)?;
                }
            }
            Op::Iterate(a, b, steps) => {
                let pairs = model_range(&model, *a, *b);
                walk(db.range(bounds(*a, *b)), &pairs, steps)?;
            }
            Op::Flush => db.flush()?,
            Op::Reopen => {
                // Snapshots end with their store.
                snaps.clear();
                store.take().unwrap().close()?;
                store = Some(open(&path));
            }
        }
    }
    let db = store.take().unwrap();
    for (s, m) in &snaps {
        check_snapshot(s, m, 0, KEYS)?;
    }
    snaps.clear();
    let all: Vec<KvPair> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    prop_assert_eq!(collect(db.iter()), all.clone());
    db.verify()?;
    db.close()?;
    let db = open(&path);
    prop_assert_eq!(
        collect(db.iter().rev()),
        all.into_iter().rev().collect::<Vec<_>>()
    );
    db.close()?;
    Ok(())
}

fn cases() -> ProptestConfig {
    // MODEL_CASES runs a longer search than CI's.
    let cases = std::env::var("MODEL_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(24);
    ProptestConfig {
        cases,
        max_shrink_iters: 200,
        ..ProptestConfig::default()
    }
}

macro_rules! engine_model {
    ($name:ident, $kind:expr) => {
        proptest! {
            #![proptest_config(cases())]
            #[test]
            fn $name(ops in prop::collection::vec(op(), 1..400)) {
                run($kind, &ops)?;
            }
        }
    };
}

engine_model!(btree_matches_a_map, EngineKind::Btree);
engine_model!(shortcut_matches_a_map, EngineKind::Shortcut);
engine_model!(turboindex_matches_a_map, EngineKind::TurboIndex);
engine_model!(lsm_matches_a_map, EngineKind::Lsm);
engine_model!(zkv_matches_a_map, EngineKind::Zkv);

/// A snapshot taken before a long stream of writes (enough to flush,
/// compact, checkpoint and reclaim many times over) still reads what it
/// saw, every pair, in both directions.
#[test]
fn a_snapshot_outlives_heavy_background_work() {
    for kind in ferrite::available() {
        let dir = tempfile::tempdir().unwrap();
        let db = config(kind).open(dir.path().join("db")).unwrap();
        let mut model = Model::new();
        for i in 0..KEYS {
            db.put(key(i), value(i, 7)).unwrap();
            model.insert(key(i), value(i, 7));
        }
        let snap = db.snapshot().unwrap();
        let frozen = model.clone();
        // Until the engine's background work has run several times over:
        // compactions, checkpoints, and for ZKV zone reclamation.
        let (counter, enough) = match kind {
            EngineKind::Lsm => ("compactions", 5.0),
            EngineKind::Zkv => ("gc_zones", 2.0),
            _ => ("checkpoints", 5.0),
        };
        let at_snapshot = db.stats().field(counter).unwrap_or(0.0);
        let mut rounds = 0u32;
        while db.stats().field(counter).unwrap_or(0.0) - at_snapshot < enough {
            assert!(rounds < 2000, "{kind}: {counter} stayed below {enough}");
            let r = (rounds % 251) as u8;
            for i in (0..KEYS).step_by(3) {
                db.put(key(i), vec![r; 1500]).unwrap();
            }
            let at = (rounds * 13 % KEYS as u32) as u16;
            db.delete_range(key(at)..key(at + 7)).unwrap();
            if rounds.is_multiple_of(5) {
                db.flush().unwrap();
            }
            rounds += 1;
        }
        let all: Vec<KvPair> = frozen.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        assert_eq!(collect(snap.iter()), all, "{kind}");
        assert_eq!(
            collect(snap.iter().rev()),
            all.iter().rev().cloned().collect::<Vec<_>>(),
            "{kind}"
        );
        let st = db.stats();
        assert_eq!(st.snapshots, 1, "{kind}");
        assert!(
            st.snapshot_bytes > 0,
            "{kind}: a live snapshot keeps nothing"
        );
        drop(snap);
        assert_eq!(db.stats().snapshots, 0, "{kind}");
        db.close().unwrap();
    }
}

/// A range whose start lies past its end holds nothing, in every engine
/// and both directions, on the store and on a snapshot.
#[test]
fn inverted_ranges_are_empty() {
    use ferrite::KeyRange;
    for kind in ferrite::available() {
        let dir = tempfile::tempdir().unwrap();
        let db = config(kind).open(dir.path().join("db")).unwrap();
        for i in 0..50 {
            db.put(key(i), value(i, 1)).unwrap();
        }
        let (a, b) = (key(40), key(10));
        let ranges = [
            KeyRange {
                start: Bound::Included(&a),
                end: Bound::Excluded(&b),
            },
            KeyRange {
                start: Bound::Excluded(&a),
                end: Bound::Excluded(&a),
            },
        ];
        let snap = db.snapshot().unwrap();
        for r in ranges {
            let mut seen = 0;
            let mut count = |_: &[u8], _: &[u8]| {
                seen += 1;
                std::ops::ControlFlow::Continue(())
            };
            db.scan(r, &mut count).unwrap();
            db.scan_rev(r, &mut count).unwrap();
            snap.scan(r, &mut count).unwrap();
            snap.scan_rev(r, &mut count).unwrap();
            assert_eq!(seen, 0, "{kind}");
        }
        assert_eq!(collect(db.range(key(40)..key(10))), Vec::new(), "{kind}");
        db.close().unwrap();
    }
}
