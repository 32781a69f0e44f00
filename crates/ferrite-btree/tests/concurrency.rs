//! Readers and writers at once: writers own disjoint key ranges and record
//! what they acknowledged; readers check every value they see is one a
//! writer wrote; at the end the store equals the union of the writers'
//! final states and passes `verify`.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ferrite_btree::{BTreeOptions, BTreeStore};
use ferrite_core::{KeyRange, KvStore, KvStoreExt};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn value(writer: u8, key: u32, version: u32) -> Vec<u8> {
    let mut v = vec![writer, 0xAB];
    v.extend_from_slice(&key.to_le_bytes());
    v.extend_from_slice(&version.to_le_bytes());
    v.resize(16 + (version % 50) as usize, writer);
    v
}

fn plausible(k: &[u8], v: &[u8]) -> bool {
    let key = u32::from_be_bytes(
        k.get(1..5)
            .and_then(|s| s.try_into().ok())
            .unwrap_or_default(),
    );
    v.len() >= 10 && v[0] == k[0] && v[1] == 0xAB && v[2..6] == key.to_le_bytes()
}

/// A store on memory devices (1 KiB blocks for pages), no syncs.
fn mem_store(cache_bytes: u64, bt: BTreeOptions) -> Arc<BTreeStore> {
    Arc::new(common::open_unsynced(&common::mem_devices(1024), cache_bytes, bt).unwrap())
}

/// Which engine configuration the stress test runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Plain,
    Turbo,
    Shortcut,
}

#[test]
fn readers_and_writers_against_an_oracle() {
    stress(Mode::Plain);
}

/// The same with SHORTCUT on, a small pool and a low rebuild threshold:
/// lookups take the one-shot path while companions are rebuilt in the
/// background between writers' splits.
#[test]
fn readers_and_writers_against_an_oracle_during_shortcut_rebuilds() {
    stress(Mode::Shortcut);
}

/// The same with the insert buffer on and a pool far smaller than the
/// data: readers see buffered records, scans merge them, writers buffer,
/// load and spill pages underneath them.
#[test]
fn readers_and_writers_against_an_oracle_with_records_buffered() {
    stress(Mode::Turbo);
}

fn stress(mode: Mode) {
    let turbo = mode == Mode::Turbo;
    let cache_bytes = match mode {
        Mode::Plain => 256 << 10,
        Mode::Turbo => 100 << 10,
        Mode::Shortcut => 96 << 10,
    };
    let bt = if mode == Mode::Shortcut {
        common::restless_shortcut()
    } else if turbo {
        BTreeOptions::default().page_size(1024).insert_buffer(Some(
            ferrite_btree::InsertBufferOptions::default()
                .share(0.3)
                // Buffered writes throughout, whatever share of the
                // operations the readers get on a loaded machine.
                .adaptive(false),
        ))
    } else {
        BTreeOptions::default()
    };
    let db = mem_store(cache_bytes, bt);
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..3u8)
        .map(|w| {
            let db = db.clone();
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(u64::from(w));
                let mut mine = BTreeMap::new();
                for version in 0..4000u32 {
                    let key = rng.gen_range(0..1500u32);
                    let mut k = vec![w];
                    k.extend_from_slice(&key.to_be_bytes());
                    if rng.gen_bool(0.15) {
                        db.delete(&k).unwrap();
                        mine.remove(&k);
                    } else {
                        let v = value(w, key, version);
                        db.put(&k, &v).unwrap();
                        mine.insert(k, v);
                    }
                }
                mine
            })
        })
        .collect();
    let readers: Vec<_> = (0..2u64)
        .map(|r| {
            let (db, stop) = (db.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(100 + r);
                let mut checked = 0u64;
                // A reader starved by a loaded host keeps going after the
                // writers until it has checked something.
                let mut rounds = 0u32;
                while !stop.load(Ordering::Acquire) || (checked == 0 && rounds < 100_000) {
                    rounds += 1;
                    let mut k = vec![rng.gen_range(0..3u8)];
                    k.extend_from_slice(&rng.gen_range(0..1500u32).to_be_bytes());
                    if let Some(v) = db.get(&k).unwrap() {
                        assert!(plausible(&k, &v), "torn or foreign value for {k:?}");
                        checked += 1;
                    }
                    let mut prev: Option<Vec<u8>> = None;
                    db.scan(KeyRange::from_bounds(&k[..]..), &mut |k, v| {
                        assert!(plausible(k, v));
                        assert!(
                            prev.as_deref().is_none_or(|p| p < k),
                            "scan out of order: {prev:?} then {k:?}"
                        );
                        prev = Some(k.to_vec());
                        if prev.as_ref().is_some_and(|p| p[0] != k[0]) {
                            ControlFlow::Break(())
                        } else {
                            ControlFlow::Continue(())
                        }
                    })
                    .unwrap();
                }
                checked
            })
        })
        .collect();
    let mut expected = BTreeMap::new();
    for w in writers {
        expected.extend(w.join().unwrap());
    }
    stop.store(true, Ordering::Release);
    let seen: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    assert!(seen > 0, "readers ran");
    db.verify().unwrap();
    let all: BTreeMap<_, _> = db
        .scan_collect(KeyRange::all(), usize::MAX)
        .unwrap()
        .into_iter()
        .collect();
    assert!(
        all == expected,
        "final state differs from the writers' acknowledged writes"
    );
    // Every key looked up once more. With SHORTCUT, first the rebuilder's
    // re-layout (a tree grown by splits alone is fragmented: it moves the
    // levels back into key order while readers and writers run), then a
    // companion for the final shape, so this pass takes the one-shot path
    // with nothing moving underneath it.
    let mut used_before = 0.0;
    if mode == Mode::Shortcut {
        let t = std::time::Instant::now();
        while db.stats().field("sc_relocated").unwrap() == 0.0 && t.elapsed().as_secs() < 30 {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(db.stats().field("sc_relocated").unwrap() > 0.0);
        // Moved pages reach the page file (only pages there are
        // prefetched: a dirty or spilled image is newer) at a checkpoint.
        db.flush().unwrap();
        db.rebuild_shortcut().unwrap();
        used_before = db.stats().field("sc_prefetch_used").unwrap();
    }
    for (k, v) in &expected {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
    }
    if turbo {
        let s = db.stats();
        assert!(s.field("ib_buffered_writes").unwrap() > 500.0);
    }
    if mode == Mode::Shortcut {
        let s = db.stats();
        db.verify().unwrap();
        let rebuilds = s.field("sc_rebuilds").unwrap();
        assert!(rebuilds >= 3.0, "only {rebuilds} rebuilds");
        assert!(s.field("sc_predictions").unwrap() > 1000.0);
        assert!(
            s.field("sc_prefetch_used").unwrap() > used_before,
            "the last pass used no prefetched page"
        );
    }
}

/// Runs `write` on one thread and `read` on two others (each with its own
/// seeded generator and counts) until the writer is done; a reader starved
/// by a loaded host keeps going after that until `seen` holds for its
/// counts, or for 100,000 rounds. Returns each reader's counts.
fn race<C: Default + Send + 'static>(
    db: &Arc<BTreeStore>,
    write: impl FnOnce(&BTreeStore) + Send + 'static,
    read: impl Fn(&BTreeStore, &mut SmallRng, &mut C) + Send + Sync + 'static,
    seen: fn(&C) -> bool,
) -> Vec<C> {
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let db = db.clone();
        std::thread::spawn(move || write(&db))
    };
    let read = Arc::new(read);
    let readers: Vec<_> = (0..2u64)
        .map(|r| {
            let (db, stop, read) = (db.clone(), stop.clone(), read.clone());
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(r);
                let mut counts = C::default();
                let mut rounds = 0u32;
                while !stop.load(Ordering::Acquire) || (!seen(&counts) && rounds < 100_000) {
                    rounds += 1;
                    read(&db, &mut rng, &mut counts);
                }
                counts
            })
        })
        .collect();
    writer.join().unwrap();
    stop.store(true, Ordering::Release);
    readers.into_iter().map(|r| r.join().unwrap()).collect()
}

/// Lookups take no lock in the plain tree (`structure_version`): while a
/// writer splits pages, applies two-key batches and rewrites values long
/// enough for overflow chains (whose freed pages later chains reuse once a
/// checkpoint has passed), readers must see every batch whole and every
/// long value untorn.
#[test]
fn lock_free_lookups_see_batches_whole_and_long_values_untorn() {
    let db = mem_store(
        96 << 10,
        BTreeOptions::default()
            .page_size(1024)
            .checkpoint_wal_bytes(64 << 10),
    );
    // A long value: its version in the first 4 bytes, then bytes that
    // depend on the version and the position.
    fn long(version: u32, len: usize) -> Vec<u8> {
        let mut v = version.to_le_bytes().to_vec();
        v.extend((4..len).map(|i| (version as usize * 7 + i) as u8));
        v
    }
    fn untorn(v: &[u8]) -> bool {
        let version = u32::from_le_bytes(v[..4].try_into().unwrap());
        *v == long(version, v.len())
    }
    let write = |db: &BTreeStore| {
        let mut rng = SmallRng::seed_from_u64(7);
        for version in 1..=20_000u32 {
            let mut batch = ferrite_core::WriteBatch::new();
            batch.put(b"pair-a", &version.to_le_bytes()).unwrap();
            batch.put(b"pair-b", &version.to_le_bytes()).unwrap();
            let filler = rng.gen_range(0..4000u32).to_be_bytes();
            batch.put(&filler, &[version as u8; 24]).unwrap();
            db.write_batch(&batch).unwrap();
            if version % 3 == 0 {
                let k = format!("long-{}", rng.gen_range(0..8u32));
                db.put(k.as_bytes(), &long(version, rng.gen_range(300..2500)))
                    .unwrap();
            }
        }
    };
    // Counts of pairs and of long values seen.
    let read = |db: &BTreeStore, rng: &mut SmallRng, (pairs, longs): &mut (u64, u64)| {
        let version =
            |v: Option<Vec<u8>>| v.map_or(0, |v| u32::from_le_bytes(v[..4].try_into().unwrap()));
        let a = version(db.get(b"pair-a").unwrap());
        let b = version(db.get(b"pair-b").unwrap());
        assert!(b >= a, "pair-b at {b} after pair-a at {a}: a torn batch");
        *pairs += u64::from(a > 0);
        let k = format!("long-{}", rng.gen_range(0..8u32));
        if let Some(v) = db.get(k.as_bytes()).unwrap() {
            assert!(untorn(&v), "{k}: a torn long value");
            *longs += 1;
        }
    };
    for (pairs, longs) in race(&db, write, read, |&(p, l)| p > 0 && l > 0) {
        assert!(
            pairs > 0 && longs > 0,
            "readers ran: {pairs} pairs, {longs} long values"
        );
    }
    db.verify().unwrap();
    let s = db.stats();
    assert!(
        s.field("checkpoints").unwrap() > 2.0,
        "freed pages were reused"
    );
}

/// Scans in the plain tree read with no lock while they are short, and a
/// long one finishes under the lock only if nothing changed since its
/// lock-free start: either way a scan sees every batch whole. The writer
/// sets a key at each end of the key space to the same version in one
/// batch (with fillers between that split pages); a reader scanning the
/// whole tree (longer than one lock-free chunk) or one end must see the
/// two ends agree.
#[test]
fn scans_see_batches_whole() {
    let db = mem_store(4 << 20, BTreeOptions::default().page_size(1024));
    // 3000 fillers of 40 bytes: a full scan passes the 64 KiB chunk.
    for i in 0..3000u32 {
        db.put(format!("m{i:06}").as_bytes(), &[1; 32]).unwrap();
    }
    db.put(b"a", &0u32.to_le_bytes()).unwrap();
    db.put(b"z", &0u32.to_le_bytes()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // The writer starts once both readers run, so their scans overlap its
    // batches however the threads are scheduled.
    let start = Arc::new(std::sync::Barrier::new(3));
    let writer = {
        let (db, start) = (db.clone(), start.clone());
        std::thread::spawn(move || {
            start.wait();
            let mut rng = SmallRng::seed_from_u64(3);
            for version in 1..=4000u32 {
                let mut batch = ferrite_core::WriteBatch::new();
                batch.put(b"a", &version.to_le_bytes()).unwrap();
                let filler = format!("m{:06}x", rng.gen_range(0..3000u32));
                batch.put(filler.as_bytes(), &[2; 32]).unwrap();
                batch.put(b"z", &version.to_le_bytes()).unwrap();
                db.write_batch(&batch).unwrap();
            }
        })
    };
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (db, stop, start) = (db.clone(), stop.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                let mut scans = 0u64;
                while scans == 0 || !stop.load(Ordering::Acquire) {
                    let (mut a, mut z, mut n) = (None, None, 0usize);
                    let range = if r == 0 {
                        KeyRange::all()
                    } else {
                        KeyRange::from_bounds(&b"m002990"[..]..)
                    };
                    db.scan(range, &mut |k, v| {
                        n += 1;
                        match k {
                            b"a" => a = Some(v.to_vec()),
                            b"z" => z = Some(v.to_vec()),
                            _ => {}
                        }
                        ControlFlow::Continue(())
                    })
                    .unwrap();
                    if r == 0 {
                        assert!(n >= 3002, "a full scan saw {n} pairs");
                        assert_eq!(a, z, "the ends of one batch disagree");
                    } else {
                        assert!(z.is_some(), "the short scan missed z");
                    }
                    scans += 1;
                }
                scans
            })
        })
        .collect();
    writer.join().unwrap();
    stop.store(true, Ordering::Release);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
}

/// Long values across many pages, in a pool much smaller than they are:
/// lookups and scans load whole chains in batches, which claim frames
/// while a writer overwrites and deletes values (reusing the freed chains'
/// pages once a checkpoint has passed), spills dirty pages and
/// checkpoints. Every value a reader sees must be one the writer wrote,
/// whole.
#[test]
fn batched_chain_reads_beside_a_writer_see_long_values_whole() {
    let db = mem_store(
        256 << 10,
        BTreeOptions::default()
            .page_size(1024)
            .checkpoint_wal_bytes(256 << 10),
    );
    // A value names its key and version and is filled from both.
    fn long(key: u32, version: u32, len: usize) -> Vec<u8> {
        let mut v = key.to_le_bytes().to_vec();
        v.extend_from_slice(&version.to_le_bytes());
        v.extend((8..len).map(|i| (key as usize * 13 + version as usize * 7 + i) as u8));
        v
    }
    fn whole(k: &[u8], v: &[u8]) -> bool {
        let key = u32::from_be_bytes(k.try_into().unwrap());
        v.len() >= 8
            && v[..4] == key.to_le_bytes()
            && *v
                == long(
                    key,
                    u32::from_le_bytes(v[4..8].try_into().unwrap()),
                    v.len(),
                )
    }
    let write = |db: &BTreeStore| {
        let mut rng = SmallRng::seed_from_u64(11);
        for version in 1..=10_000u32 {
            let key = rng.gen_range(0..64u32);
            if version % 7 == 0 {
                db.delete(&key.to_be_bytes()).unwrap();
            } else {
                let len = rng.gen_range(2000..24_000);
                db.put(&key.to_be_bytes(), &long(key, version, len))
                    .unwrap();
            }
        }
    };
    let read = |db: &BTreeStore, rng: &mut SmallRng, seen: &mut u64| {
        if rng.gen_bool(0.8) {
            let k = rng.gen_range(0..64u32).to_be_bytes();
            if let Some(v) = db.get(&k).unwrap() {
                assert!(whole(&k, &v), "a torn value under {k:?}");
                *seen += 1;
            }
        } else {
            let from = rng.gen_range(0..64u32).to_be_bytes();
            let mut n = 0;
            db.scan(KeyRange::from_bounds(&from[..]..), &mut |k, v| {
                assert!(whole(k, v), "a torn value in a scan under {k:?}");
                n += 1;
                if n < 8 {
                    ControlFlow::Continue(())
                } else {
                    ControlFlow::Break(())
                }
            })
            .unwrap();
            *seen += n;
        }
    };
    for seen in race(&db, write, read, |&n| n > 0) {
        assert!(seen > 0, "the reader saw values");
    }
    db.verify().unwrap();
    let s = db.stats();
    assert!(
        s.field("checkpoints").unwrap() > 2.0,
        "freed pages were reused"
    );
}

/// A pool far smaller than the data under a writer and lock-free readers
/// at once: readers' misses claim frames while the writer holds pins and
/// changes pages, and dirty victims go to the spill file in batches with
/// the cold dirty frames beside them. Every value a reader sees must be
/// one the writer wrote, and the final state must be the writer's.
#[test]
fn batched_spills_beside_lock_free_readers_lose_nothing() {
    let bt = BTreeOptions::default().page_size(1024);
    let db = mem_store(64 << 10, bt);
    let expected = Arc::new(parking_lot::Mutex::new(BTreeMap::new()));
    let counts = race(
        &db,
        {
            let expected = expected.clone();
            move |db| {
                let mut rng = SmallRng::seed_from_u64(7);
                let mut mine = BTreeMap::new();
                for version in 0..12_000u32 {
                    let key = rng.gen_range(0..3000u32);
                    let mut k = vec![0u8];
                    k.extend_from_slice(&key.to_be_bytes());
                    let mut v = value(0, key, version);
                    v.resize(60 + (version % 80) as usize, 0);
                    db.put(&k, &v).unwrap();
                    mine.insert(k, v);
                }
                *expected.lock() = mine;
            }
        },
        |db, rng, seen: &mut u64| {
            let mut k = vec![0u8];
            k.extend_from_slice(&rng.gen_range(0..3000u32).to_be_bytes());
            if let Some(v) = db.get(&k).unwrap() {
                assert!(plausible(&k, &v), "torn or foreign value for {k:?}");
                *seen += 1;
            }
        },
        // Readers the scheduler starved while the writer ran (both cores
        // busy with other tests) make up their lookups after it, so the
        // misses below are there however the threads were scheduled.
        |seen| *seen > 1000,
    );
    assert!(counts.iter().sum::<u64>() > 0, "readers ran");
    let s = db.stats();
    assert!(
        s.field("read_misses").unwrap() > 1000.0,
        "readers claimed frames: {:?}",
        s.field("read_misses")
    );
    assert!(
        s.field("spill_batches").unwrap() > 10.0,
        "dirty victims were spilled in batches: {:?}",
        s.field("spill_batches")
    );
    db.verify().unwrap();
    assert!(
        common::contents(&db) == *expected.lock(),
        "final state differs from the writer's acknowledged writes"
    );
}
