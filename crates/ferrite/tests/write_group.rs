//! Writers grouped behind a leader under `SyncMode::Always`: eight
//! threads write batches at once on the B+tree, the LSM and ZKV; every
//! batch is readable as soon as its write returns, each is all or nothing
//! to readers running beside them, and all of them are there after a
//! reopen.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ferrite::{Config, EngineKind, SyncMode, WriteBatch};

const THREADS: u32 = 8;
const BATCHES: u32 = 150;

fn key(t: u32, i: u32, j: u32) -> Vec<u8> {
    format!("t{t}-b{i:04}-{j}").into_bytes()
}

fn grouped_writers_keep_every_batch(engine: EngineKind) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let open = || {
        Config::builder(engine)
            .sync(SyncMode::Always)
            .direct_io(false)
            .open(&path)
            .unwrap()
    };
    let store = Arc::new(open());
    let done = Arc::new(AtomicBool::new(false));
    // A reader checks that a batch's three keys appear together.
    let reader = {
        let (store, done) = (store.clone(), done.clone());
        std::thread::spawn(move || {
            let mut checked = 0u64;
            while !done.load(Ordering::Acquire) {
                for t in 0..THREADS {
                    let snap = store.snapshot().unwrap();
                    let got: Vec<bool> = (0..3)
                        .map(|j| snap.get(key(t, BATCHES / 2, j)).unwrap().is_some())
                        .collect();
                    assert!(
                        got.iter().all(|&g| g) || got.iter().all(|&g| !g),
                        "half a batch: {got:?}"
                    );
                    checked += 1;
                }
            }
            checked
        })
    };
    let writers: Vec<_> = (0..THREADS)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                for i in 0..BATCHES {
                    let mut b = WriteBatch::new();
                    for j in 0..3 {
                        b.put(&key(t, i, j), &i.to_le_bytes()).unwrap();
                    }
                    store.write(&b).unwrap();
                    // Its own write is visible once acknowledged.
                    assert_eq!(
                        store.get(key(t, i, 2)).unwrap(),
                        Some(i.to_le_bytes().to_vec())
                    );
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    done.store(true, Ordering::Release);
    assert!(reader.join().unwrap() > 0);
    Arc::try_unwrap(store).ok().unwrap().close().unwrap();
    let store = open();
    assert_eq!(store.iter().count() as u32, THREADS * BATCHES * 3);
    for t in 0..THREADS {
        for i in 0..BATCHES {
            assert_eq!(
                store.get(key(t, i, 0)).unwrap(),
                Some(i.to_le_bytes().to_vec())
            );
        }
    }
    store.verify().unwrap();
    store.close().unwrap();
}

#[test]
fn btree_grouped_writers_keep_every_batch() {
    grouped_writers_keep_every_batch(EngineKind::Btree);
}

#[test]
fn lsm_grouped_writers_keep_every_batch() {
    grouped_writers_keep_every_batch(EngineKind::Lsm);
}

#[test]
fn zkv_grouped_writers_keep_every_batch() {
    grouped_writers_keep_every_batch(EngineKind::Zkv);
}
