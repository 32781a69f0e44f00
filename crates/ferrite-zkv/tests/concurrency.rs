//! Several writers and readers at once against per-writer oracles.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ferrite_core::{KeyRange, KvStore, KvStoreExt, SyncMode};
use ferrite_zkv::{Variant, ZkvStore};

fn key(w: u64, i: u64) -> Vec<u8> {
    format!("w{w}-{:06}", (i * 7919) % 4000).into_bytes()
}

fn stress(variant: Variant) {
    let dev = common::mem_device(24);
    let db = Arc::new(
        ZkvStore::open_on(
            dev,
            &common::options(SyncMode::Never),
            common::small_opts(variant),
        )
        .unwrap(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..3u64)
        .map(|w| {
            let db = db.clone();
            std::thread::spawn(move || {
                for round in 0..3u64 {
                    for i in 0..4000u64 {
                        let v = format!("{w}:{i}:{round}");
                        db.put(&key(w, i), v.as_bytes()).unwrap();
                    }
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..2u64)
        .map(|r| {
            let db = db.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let w = n % 3;
                    let i = (n * 31 + r) % 4000;
                    if let Some(v) = db.get(&key(w, i)).unwrap() {
                        let s = String::from_utf8(v).unwrap();
                        let parts: Vec<&str> = s.split(':').collect();
                        assert_eq!(
                            parts[0],
                            w.to_string(),
                            "a value under another writer's key"
                        );
                        assert_eq!(parts[1], i.to_string(), "a value under another key");
                    }
                    if n.is_multiple_of(500) {
                        let got = db.scan_collect(KeyRange::all(), 200).unwrap();
                        assert!(got.windows(2).all(|p| p[0].0 < p[1].0), "scan out of order");
                    }
                    n += 1;
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    db.verify().unwrap();
    for w in 0..3u64 {
        for i in 0..4000u64 {
            let want = format!("{w}:{i}:2");
            assert_eq!(db.get(&key(w, i)).unwrap(), Some(want.into_bytes()));
        }
    }
}

#[test]
fn zkv_readers_and_writers() {
    stress(Variant::Zkv);
}

#[test]
fn bdtree_readers_and_writers() {
    stress(Variant::BdTree);
}
