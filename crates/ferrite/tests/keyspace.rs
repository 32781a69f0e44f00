//! Named keyspaces on btree, lsm and zkv: each is its own ordered key
//! space (a model test against one `BTreeMap` per space, batches spanning
//! them included), they survive a reopen and a checkpoint, a drop is
//! final for its handles and its keys are removed in the background
//! (resumed after a close), transactions span keyspaces and conflict with
//! a drop, and stores made before keyspaces keep every key they hold.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use common::small_config;
use ferrite::{EngineKind, Error, KeyRange, KeyspaceBatch, Store, WriteBatch};
use proptest::prelude::*;

const ENGINES: [EngineKind; 3] = [EngineKind::Btree, EngineKind::Lsm, EngineKind::Zkv];

fn pairs(it: impl Iterator<Item = ferrite::Result<ferrite::KvPair>>) -> Vec<(Vec<u8>, Vec<u8>)> {
    it.map(Result::unwrap).collect()
}

/// Every pair of the engine's whole key space (catalog included).
fn raw_pairs(db: &Store) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    db.as_kv()
        .scan(KeyRange::all(), &mut |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            ControlFlow::Continue(())
        })
        .unwrap();
    out
}

#[test]
fn keyspaces_are_separate_and_survive_a_reopen() {
    for kind in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        {
            let db = small_config(kind).open(&path).unwrap();
            db.put("k", "default").unwrap();
            let a = db.keyspace("a").unwrap();
            let b = db.keyspace("b").unwrap();
            a.put("k", "in a").unwrap();
            b.put("k", "in b").unwrap();
            a.put([0xFF; 30], "high").unwrap();
            b.put("z", "last").unwrap();
            assert_eq!(db.get("k").unwrap().unwrap(), b"default");
            assert_eq!(a.get("k").unwrap().unwrap(), b"in a");
            assert_eq!(b.get("k").unwrap().unwrap(), b"in b");
            assert_eq!(pairs(db.iter()), vec![(b"k".to_vec(), b"default".to_vec())]);
            assert_eq!(
                pairs(a.iter()),
                vec![
                    (b"k".to_vec(), b"in a".to_vec()),
                    (vec![0xFF; 30], b"high".to_vec())
                ]
            );
            assert_eq!(pairs(b.iter().rev()).len(), 2);
            assert_eq!(
                pairs(b.prefix("z")),
                vec![(b"z".to_vec(), b"last".to_vec())]
            );
            assert_eq!(db.keyspaces(), vec!["a".to_string(), "b".to_string()]);
            // The same name opens the same keyspace.
            assert_eq!(
                db.keyspace("a").unwrap().get("k").unwrap().unwrap(),
                b"in a"
            );
            assert!(db.existing_keyspace("c").is_none());
            db.close().unwrap();
        }
        let db = small_config(kind).open(&path).unwrap();
        db.verify().unwrap();
        assert_eq!(db.keyspaces(), vec!["a".to_string(), "b".to_string()]);
        let a = db.existing_keyspace("a").unwrap();
        assert_eq!(a.get([0xFF; 30]).unwrap().unwrap(), b"high", "{kind}");
        assert_eq!(pairs(db.iter()).len(), 1, "{kind}");
        assert_eq!(pairs(db.keyspace("b").unwrap().iter()).len(), 2, "{kind}");
    }
}

#[test]
fn keys_and_names_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    // Default pages, which take keys up to the store's limit.
    let db = ferrite::Config::builder(EngineKind::Btree)
        .sync(ferrite::SyncMode::Never)
        .direct_io(false)
        .open(dir.path().join("db"))
        .unwrap();
    assert!(matches!(
        db.keyspace(""),
        Err(Error::InvalidKeyspaceName { .. })
    ));
    assert!(matches!(
        db.keyspace(&"n".repeat(256)),
        Err(Error::InvalidKeyspaceName { .. })
    ));
    let ks = db.keyspace("k").unwrap();
    assert_eq!(ks.max_key_len(), ferrite::MAX_KEY_LEN - 7);
    ks.put(vec![1; ks.max_key_len()], "v").unwrap();
    assert!(matches!(
        ks.put(vec![1; ks.max_key_len() + 1], "v"),
        Err(Error::KeyTooLarge { .. })
    ));
    // The default space keeps below 0xFF 0xFF once keyspaces exist.
    db.put(b"\xff\xfe\xff", "v").unwrap();
    for r in [
        db.put(b"\xff\xff", "v"),
        db.delete(b"\xff\xff\x01"),
        db.get(b"\xff\xff\x00\x00").map(|_| ()),
    ] {
        assert!(matches!(r, Err(Error::ReservedKey { .. })), "{r:?}");
    }
    let mut raw = WriteBatch::new();
    raw.put(b"\xff\xff\x00\x01x", b"\x05\x00\x00\x00").unwrap();
    assert!(matches!(db.write(&raw), Err(Error::ReservedKey { .. })));
    // A range delete of the default space stops below the keyspaces.
    db.delete_range(&b"\x00"[..]..&b"\xff\xff\xff"[..]).unwrap();
    assert!(db.get(b"\xff\xfe\xff").unwrap().is_none());
    assert_eq!(pairs(ks.iter()).len(), 1);
    let mut b = WriteBatch::new();
    b.put(b"a", b"1").unwrap();
    b.delete_range(b"\x00", b"\xff\xff\xff\xff").unwrap();
    b.put(b"b", b"2").unwrap();
    db.write(&b).unwrap();
    assert_eq!(pairs(db.iter()), vec![(b"b".to_vec(), b"2".to_vec())]);
    assert_eq!(pairs(ks.iter()).len(), 1);
}

#[test]
fn a_store_made_before_keyspaces_keeps_its_keys() {
    for kind in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let db = small_config(kind).open(dir.path().join("db")).unwrap();
        // Without keyspaces every key is the default space's, 0xFF 0xFF
        // included; a value there that looks like no marker stays a value.
        db.put(b"\xff\xff\x00\x00", b"not a marker").unwrap();
        db.put(b"\xff\xff\xff", b"v").unwrap();
        assert_eq!(pairs(db.iter()).len(), 2);
        assert!(
            matches!(db.keyspace("a"), Err(Error::ReservedKey { .. })),
            "{kind}"
        );
        assert!(db.keyspaces().is_empty());
        assert_eq!(db.get(b"\xff\xff\xff").unwrap().unwrap(), b"v");
        db.delete_range(&b"\xff\xff"[..]..&b"\xff\xff\xff\xff"[..])
            .unwrap();
        // Once the region is empty, the first keyspace can be made.
        let a = db.keyspace("a").unwrap();
        a.put("x", "y").unwrap();
        assert_eq!(pairs(db.iter()).len(), 0, "{kind}");
    }
}

#[test]
fn batches_and_snapshots_span_keyspaces() {
    for kind in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let db = small_config(kind).open(&path).unwrap();
        let users = db.keyspace("users").unwrap();
        let emails = db.keyspace("emails").unwrap();
        let mut b = WriteBatch::new();
        b.put(b"count", b"1").unwrap();
        b.put_in(&users, b"u1", b"ada").unwrap();
        b.put_in(&emails, b"ada@x", b"u1").unwrap();
        b.put_in(&emails, b"old@x", b"u0").unwrap();
        b.delete_in(&emails, b"old@x").unwrap();
        db.write(&b).unwrap();
        let snap = db.snapshot().unwrap();
        let mut b = WriteBatch::new();
        b.delete_range_in(&users, b"a", b"z").unwrap();
        b.put_in(&emails, b"grace@x", b"u2").unwrap();
        db.write(&b).unwrap();
        assert!(users.iter().next().is_none());
        assert_eq!(pairs(emails.iter()).len(), 2);
        // The snapshot shows every keyspace as it was.
        assert_eq!(pairs(snap.iter()), vec![(b"count".to_vec(), b"1".to_vec())]);
        assert_eq!(snap.keyspace(&users).get("u1").unwrap().unwrap(), b"ada");
        assert_eq!(pairs(snap.keyspace(&emails).iter()).len(), 1, "{kind}");
        drop(snap);
        // A copy carries the keyspaces.
        db.checkpoint(dir.path().join("copy")).unwrap();
        let copy = small_config(kind).open(dir.path().join("copy")).unwrap();
        assert_eq!(copy.keyspaces(), vec!["emails", "users"]);
        assert_eq!(
            copy.keyspace("emails")
                .unwrap()
                .get("grace@x")
                .unwrap()
                .unwrap(),
            b"u2"
        );
    }
}

#[test]
fn a_dropped_keyspace_is_gone_at_once_and_its_keys_are_removed() {
    for kind in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let db = small_config(kind).open(&path).unwrap();
        let keep = db.keyspace("keep").unwrap();
        keep.put("k", "v").unwrap();
        let big = db.keyspace("big").unwrap();
        let mut b = WriteBatch::new();
        for i in 0..5000u32 {
            b.put_in(&big, &i.to_be_bytes(), &[7; 40]).unwrap();
            if b.len() == 500 {
                db.write(&b).unwrap();
                b.clear();
            }
        }
        let detached = big.detach();
        let mut stale = WriteBatch::new();
        stale.put_in(&big, b"late", b"x").unwrap();
        assert!(db.drop_keyspace("big").unwrap());
        assert!(!db.drop_keyspace("big").unwrap());
        assert!(matches!(
            big.get(0u32.to_be_bytes()),
            Err(Error::KeyspaceDropped(_))
        ));
        assert!(matches!(big.put("a", "b"), Err(Error::KeyspaceDropped(_))));
        assert!(matches!(db.write(&stale), Err(Error::KeyspaceDropped(_))));
        assert!(matches!(
            db.attach(&detached),
            Err(Error::KeyspaceDropped(_))
        ));
        assert_eq!(db.keyspaces(), vec!["keep"]);
        // The name starts afresh.
        let again = db.keyspace("big").unwrap();
        assert!(again.iter().next().is_none(), "{kind}");
        again.put("new", "1").unwrap();
        db.wait_for_dropped_keyspaces();
        assert_eq!(db.dropped_keyspaces_pending(), 0);
        // Left: the marker, two names, keep's pair and again's.
        let left = raw_pairs(&db);
        assert_eq!(
            left.len(),
            5,
            "{kind}: {:?}",
            left.iter()
                .map(|p| p.0.escape_ascii().to_string())
                .collect::<Vec<_>>()
        );
        if kind != EngineKind::Lsm {
            assert_eq!(db.dropped_keys_removed(), 5000, "{kind}");
        }
        db.verify().unwrap();
    }
}

#[test]
fn a_drop_left_unfinished_resumes_at_the_next_open() {
    for kind in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        {
            let db = small_config(kind).open(&path).unwrap();
            let big = db.keyspace("big").unwrap();
            let mut b = WriteBatch::new();
            for i in 0..20_000u32 {
                b.put_in(&big, &i.to_be_bytes(), b"v").unwrap();
                if b.len() == 1000 {
                    db.write(&b).unwrap();
                    b.clear();
                }
            }
            // As a crash right after a drop's batch leaves it: the name's
            // record gone and a dropped record for its id (written
            // through the engine, so no reclaimer starts before the
            // close; docs/format/keyspaces.md gives the keys).
            let mut drop = WriteBatch::new();
            drop.delete(b"\xff\xff\x00\x01big").unwrap();
            drop.put(b"\xff\xff\x00\x02\x00\x00\x00\x01", b"").unwrap();
            db.as_kv().write_batch(&drop).unwrap();
            db.close().unwrap();
        }
        let db = small_config(kind).open(&path).unwrap();
        assert!(db.keyspaces().is_empty());
        db.wait_for_dropped_keyspaces();
        assert_eq!(db.dropped_keyspaces_pending(), 0);
        assert_eq!(raw_pairs(&db).len(), 1, "{kind}: only the marker is left");
        if kind != EngineKind::Lsm {
            assert_eq!(db.dropped_keys_removed(), 20_000, "{kind}");
        }
        db.close().unwrap();
        let db = small_config(kind).open(&path).unwrap();
        assert_eq!(db.dropped_keyspaces_pending(), 0);
    }
}

#[test]
fn transactions_span_keyspaces_and_conflict_with_a_drop() {
    for kind in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let db = small_config(kind).open(dir.path().join("db")).unwrap();
        let from = db.keyspace("from").unwrap();
        let to = db.keyspace("to").unwrap();
        from.put("x", "10").unwrap();
        let mut tx = db.transaction().unwrap();
        let v = tx.keyspace(&from).unwrap().get("x").unwrap().unwrap();
        tx.keyspace(&from).unwrap().delete("x").unwrap();
        tx.keyspace(&to).unwrap().put("x", &v).unwrap();
        tx.put("moves", "1").unwrap();
        assert_eq!(
            tx.keyspace(&to)
                .unwrap()
                .range::<&[u8], _>(..)
                .unwrap()
                .len(),
            1
        );
        assert!(tx.keyspace(&from).unwrap().get("x").unwrap().is_none());
        tx.commit().unwrap();
        assert!(from.get("x").unwrap().is_none());
        assert_eq!(to.get("x").unwrap().unwrap(), b"10");
        assert_eq!(db.get("moves").unwrap().unwrap(), b"1");

        // A drop between a transaction's use of a keyspace and its commit.
        let mut tx = db.transaction().unwrap();
        tx.keyspace(&to).unwrap().put("y", "1").unwrap();
        db.drop_keyspace("to").unwrap();
        assert!(matches!(tx.commit(), Err(Error::Conflict(_))), "{kind}");
        let mut tx = db.transaction().unwrap();
        assert!(matches!(tx.keyspace(&to), Err(Error::KeyspaceDropped(_))));
        // The default space of a transaction keeps below 0xFF 0xFF.
        assert!(matches!(
            tx.put(b"\xff\xff\x01", "v"),
            Err(Error::ReservedKey { .. })
        ));
        // A keyspace of another store is refused.
        let dir2 = tempfile::tempdir().unwrap();
        let other = small_config(kind).open(dir2.path().join("db")).unwrap();
        let theirs = other.keyspace("from").unwrap();
        assert!(matches!(
            tx.keyspace(&theirs),
            Err(Error::InvalidKeyspaceName { .. })
        ));
        db.wait_for_dropped_keyspaces();
    }
}

#[test]
fn a_first_keyspace_made_under_a_transaction_that_writes_high_keys_is_a_conflict() {
    let dir = tempfile::tempdir().unwrap();
    let db = small_config(EngineKind::Btree)
        .open(dir.path().join("db"))
        .unwrap();
    let mut tx = db.transaction().unwrap();
    tx.put(b"\xff\xff\x01\x00\x00\x00\x01k", "forged").unwrap();
    db.keyspace("a").unwrap();
    assert!(matches!(tx.commit(), Err(Error::Conflict(_))));
    assert!(db.keyspace("a").unwrap().get("k").unwrap().is_none());
}

/// One operation of the model test; `space` 0 is the default key space.
#[derive(Debug, Clone)]
enum Op {
    Put(usize, Vec<u8>, Vec<u8>),
    Delete(usize, Vec<u8>),
    DeleteRange(usize, Vec<u8>, Vec<u8>),
    Batch(Vec<(usize, Vec<u8>, Option<Vec<u8>>)>),
    Drop(usize),
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(
            prop::sample::select(vec![0u8, 1, b'a', b'b', 0xFE, 0xFF]),
            1..4
        ),
        Just(vec![0xFF; 3]),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let space = 0..3usize;
    prop_oneof![
        4 => (space.clone(), key(), prop::collection::vec(any::<u8>(), 0..20))
            .prop_map(|(s, k, v)| Op::Put(s, k, v)),
        2 => (space.clone(), key()).prop_map(|(s, k)| Op::Delete(s, k)),
        1 => (space.clone(), key(), key()).prop_map(|(s, a, b)| Op::DeleteRange(s, a, b)),
        2 => prop::collection::vec(
            (space.clone(), key(), prop::option::of(prop::collection::vec(any::<u8>(), 0..8))),
            1..6
        )
        .prop_map(Op::Batch),
        1 => (1..3usize).prop_map(Op::Drop),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn keyspaces_match_a_map_each(ops in prop::collection::vec(op(), 1..60), kind in prop::sample::select(ENGINES.to_vec())) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let names = ["", "one", "two"];
        let mut model: Vec<BTreeMap<Vec<u8>, Vec<u8>>> = vec![BTreeMap::new(); 3];
        let db = small_config(kind).open(&path).unwrap();
        // The default space keeps below 0xFF 0xFF once keyspaces exist.
        let fits = |s: usize, k: &[u8]| s != 0 || k < &b"\xff\xff"[..];
        {
            let mut ks: Vec<Option<ferrite::Keyspace<'_>>> =
                vec![None, Some(db.keyspace(names[1]).unwrap()), Some(db.keyspace(names[2]).unwrap())];
            for op in &ops {
                match op {
                    Op::Put(s, k, v) => {
                        let r = match &ks[*s] { None => db.put(k, v), Some(x) => x.put(k, v) };
                        if fits(*s, k) { r.unwrap(); model[*s].insert(k.clone(), v.clone()); }
                        else { prop_assert!(matches!(r, Err(Error::ReservedKey { .. })), "{:?}", r); }
                    }
                    Op::Delete(s, k) => {
                        let r = match &ks[*s] { None => db.delete(k), Some(x) => x.delete(k) };
                        if fits(*s, k) { r.unwrap(); model[*s].remove(k); }
                        else { prop_assert!(r.is_err()); }
                    }
                    Op::DeleteRange(s, a, b) => {
                        let r = match &ks[*s] { None => db.delete_range(a.as_slice()..b.as_slice()), Some(x) => x.delete_range(a.as_slice()..b.as_slice()) };
                        if a < b {
                            r.unwrap();
                            let gone: Vec<_> = model[*s].range(a.clone()..b.clone()).map(|(k, _)| k.clone()).collect();
                            for k in gone { model[*s].remove(&k); }
                        } else {
                            prop_assert!(matches!(r, Err(Error::EmptyRange)));
                        }
                    }
                    Op::Batch(writes) => {
                        let mut b = WriteBatch::new();
                        let mut ok = true;
                        for (s, k, v) in writes {
                            ok &= fits(*s, k);
                            match (&ks[*s], v) {
                                (None, Some(v)) => { b.put(k, v).unwrap(); }
                                (None, None) => { b.delete(k).unwrap(); }
                                (Some(x), Some(v)) => { b.put_in(x, k, v).unwrap(); }
                                (Some(x), None) => { b.delete_in(x, k).unwrap(); }
                            }
                        }
                        let r = db.write(&b);
                        if ok {
                            r.unwrap();
                            for (s, k, v) in writes {
                                match v { Some(v) => { model[*s].insert(k.clone(), v.clone()); } None => { model[*s].remove(k); } }
                            }
                        } else {
                            prop_assert!(matches!(r, Err(Error::ReservedKey { .. })), "{:?}", r);
                        }
                    }
                    Op::Drop(s) => {
                        prop_assert!(db.drop_keyspace(names[*s]).unwrap());
                        model[*s].clear();
                        ks[*s] = Some(db.keyspace(names[*s]).unwrap());
                    }
                }
            }
            for s in 0..3 {
                let got = match &ks[s] { None => pairs(db.iter()), Some(x) => pairs(x.iter()) };
                let want: Vec<_> = model[s].iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                prop_assert_eq!(&got, &want, "space {} on {}", s, kind);
                let back = match &ks[s] { None => pairs(db.iter().rev()), Some(x) => pairs(x.iter().rev()) };
                prop_assert_eq!(back.len(), want.len());
            }
        }
        db.close().unwrap();
        let db = small_config(kind).open(&path).unwrap();
        db.wait_for_dropped_keyspaces();
        db.verify().unwrap();
        for s in 1..3 {
            let got = pairs(db.existing_keyspace(names[s]).unwrap().iter());
            prop_assert_eq!(got.len(), model[s].len(), "space {} on {} after a reopen", s, kind);
        }
        prop_assert_eq!(pairs(db.iter()).len(), model[0].len());
    }
}

#[test]
fn no_write_lands_in_a_keyspace_after_its_drop() {
    for kind in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let db = small_config(kind).open(dir.path().join("db")).unwrap();
        let doomed = db.keyspace("doomed").unwrap();
        let written = std::sync::atomic::AtomicU64::new(0);
        // Which threads' batches put their key in the default space (a
        // thread the drop beats to its first write puts none).
        let in_default = [(); 2].map(|()| std::sync::atomic::AtomicBool::new(false));
        std::thread::scope(|s| {
            for t in 0..2u8 {
                let (doomed, written, in_default) = (doomed.clone(), &written, &in_default);
                s.spawn(move || {
                    for i in 0u32.. {
                        let r = if i % 3 == 0 {
                            let mut b = WriteBatch::new();
                            match b.put_in(&doomed, &[t, 1], &i.to_le_bytes()) {
                                Ok(_) => {
                                    b.put(&[t], b"x").unwrap();
                                    let r = doomed.store().write(&b);
                                    if r.is_ok() {
                                        in_default[usize::from(t)]
                                            .store(true, std::sync::atomic::Ordering::Relaxed);
                                    }
                                    r
                                }
                                Err(e) => Err(e),
                            }
                        } else {
                            doomed.put([t, 0], i.to_le_bytes())
                        };
                        match r {
                            Ok(()) => {
                                written.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                            Err(Error::KeyspaceDropped(_)) => return,
                            Err(e) => panic!("{e}"),
                        }
                    }
                });
            }
            while written.load(std::sync::atomic::Ordering::Relaxed) < 300 {
                std::thread::yield_now();
            }
            assert!(db.drop_keyspace("doomed").unwrap());
        });
        db.wait_for_dropped_keyspaces();
        // Only the marker and the default space's keys are left.
        let left: Vec<_> = raw_pairs(&db).into_iter().map(|p| p.0).collect();
        let defaults = in_default
            .iter()
            .filter(|w| w.load(std::sync::atomic::Ordering::Relaxed))
            .count();
        assert_eq!(left.len(), 1 + defaults, "{kind}: {left:?}");
    }
}
