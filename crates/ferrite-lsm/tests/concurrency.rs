//! Concurrency stress: writer threads over disjoint key ranges and reader
//! threads checking that no value ever goes back in time, while flushes and
//! compactions run underneath; then the final contents against an oracle.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ferrite_core::{KeyRange, KvStore, KvStoreExt, SyncMode, WriteBatch};
use ferrite_lsm::IndexKind;

const WRITERS: u64 = 3;
const KEYS_PER_WRITER: u64 = 400;
const ROUNDS: u64 = 12;

fn key(w: u64, k: u64) -> Vec<u8> {
    format!("w{w}-key{k:05}").into_bytes()
}

fn value(round: u64) -> Vec<u8> {
    let mut v = round.to_be_bytes().to_vec();
    v.resize(40, b'v');
    v
}

#[test]
fn readers_never_see_time_go_backwards() {
    let d = common::fresh();
    let db = Arc::new(common::open(&d, common::tiny(IndexKind::LEARNED), SyncMode::Never).unwrap());
    let done = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let db = db.clone();
            std::thread::spawn(move || {
                for round in 1..=ROUNDS {
                    for chunk in 0..KEYS_PER_WRITER / 20 {
                        let mut b = WriteBatch::new();
                        for k in chunk * 20..(chunk + 1) * 20 {
                            b.put(&key(w, k), &value(round)).unwrap();
                        }
                        db.write_batch(&b).unwrap();
                    }
                    if round % 4 == 0 {
                        db.delete(&key(w, round)).unwrap();
                    }
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..2u64)
        .map(|r| {
            let db = db.clone();
            let done = done.clone();
            std::thread::spawn(move || {
                let mut seen: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
                let mut i = r;
                let mut scans = 0;
                while !done.load(Ordering::Acquire) {
                    i = i
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let (w, k) = ((i >> 33) % WRITERS, (i >> 13) % KEYS_PER_WRITER);
                    let kb = key(w, k);
                    if let Some(v) = db.get(&kb).unwrap() {
                        let round = u64::from_be_bytes(v[..8].try_into().unwrap());
                        let prev = seen.insert(kb, round).unwrap_or(0);
                        assert!(
                            round >= prev,
                            "value went back from round {prev} to {round}"
                        );
                    }
                    if i % 64 == 0 {
                        // A scan sees one writer's keys in order, each once.
                        let lo = key(w, 0);
                        let hi = key(w + 1, 0);
                        let got = db
                            .scan_collect(KeyRange::from_bounds(&lo[..]..&hi[..]), usize::MAX)
                            .unwrap();
                        assert!(got.windows(2).all(|p| p[0].0 < p[1].0));
                        scans += 1;
                    }
                }
                scans
            })
        })
        .collect();
    for h in writers {
        h.join().unwrap();
    }
    done.store(true, Ordering::Release);
    let scans: u64 = readers.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(scans > 0);
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    db.verify().unwrap();
    let mut want = BTreeMap::new();
    for w in 0..WRITERS {
        for k in 0..KEYS_PER_WRITER {
            want.insert(key(w, k), value(ROUNDS));
        }
        // Every round rewrites all keys, so only the last round's delete
        // (of key number ROUNDS) stands.
        want.remove(&key(w, ROUNDS));
    }
    assert_eq!(common::contents(&db), want);
    let st = db.stats();
    assert!(st.field("flushes").unwrap() > 5.0 && st.field("compactions").unwrap() > 0.0);
}
