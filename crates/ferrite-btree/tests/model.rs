//! The B+tree against a BTreeMap, with tiny pages and a tiny pool so every
//! path runs: splits at every level, overflow values, checkpoints in the
//! middle of batches, eviction, and reopening from disk.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use ferrite_btree::{BTreeOptions, BTreeStore};
use ferrite_core::{KeyRange, KvStore, KvStoreExt, WriteBatch};
use ferrite_io::MemDevice;
use proptest::prelude::*;

type Devs = [Arc<MemDevice>; 6];

fn devices_for(page_size: usize) -> Devs {
    common::mem_devices(page_size)
}

fn devices() -> Devs {
    devices_for(4096)
}

fn open_with(
    d: &Devs,
    page_size: usize,
    cache_bytes: u64,
) -> Result<BTreeStore, ferrite_core::Error> {
    let bt = BTreeOptions::default()
        .page_size(page_size)
        .checkpoint_wal_bytes(256 << 10);
    common::open_unsynced(d, cache_bytes, bt)
}

fn open(d: &Devs, page_size: usize) -> BTreeStore {
    // About sixty frames: far fewer than the pages the tests write.
    open_with(d, page_size, (80 * page_size) as u64).unwrap()
}

#[derive(Debug, Clone)]
enum Op {
    Put(Vec<u8>, usize),
    Delete(Vec<u8>),
    Batch(Vec<(Vec<u8>, usize)>),
    Reopen,
}

/// Keys sharing a long prefix: their separators, and so the fence keys,
/// are nearly as long as the keys (close to the 1 KiB pages' limit).
fn long_prefixed(i: u16) -> Vec<u8> {
    let mut k = vec![b'p'; 290];
    k.extend_from_slice(format!("{i:05}").as_bytes());
    k
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 1..6),
        (0u16..400).prop_map(|i| format!("k{i:05}").into_bytes()),
        proptest::collection::vec(any::<u8>(), 100..300),
        (0u16..400).prop_map(long_prefixed),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let vlen = prop_oneof![0usize..40, 200usize..400, 2000usize..5000];
    prop_oneof![
        6 => (key(), vlen.clone()).prop_map(|(k, n)| Op::Put(k, n)),
        2 => key().prop_map(Op::Delete),
        1 => proptest::collection::vec((key(), vlen), 1..40).prop_map(Op::Batch),
        1 => Just(Op::Reopen),
    ]
}

fn value_of(k: &[u8], n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| k.first().copied().unwrap_or(0).wrapping_add(i as u8))
        .collect()
}

fn check(db: &BTreeStore, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    db.verify().unwrap();
    for (k, v) in model {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v), "key {k:?}");
    }
    let all = db.scan_collect(KeyRange::all(), usize::MAX).unwrap();
    let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(all.len(), want.len());
    assert!(all == want, "full scan differs from the model");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn behaves_like_a_map(ops in proptest::collection::vec(op(), 1..250), small in any::<bool>()) {
        let page_size = if small { 1024 } else { 4096 };
        let d = devices_for(page_size);
        let mut db = open(&d, page_size);
        let mut model = BTreeMap::new();
        let max = ferrite_btree::max_key_len(page_size);
        for op in ops {
            match op {
                Op::Put(k, n) => {
                    let v = value_of(&k, n);
                    let r = db.put(&k, &v);
                    if k.len() > max {
                        prop_assert!(r.is_err());
                    } else {
                        r.unwrap();
                        model.insert(k, v);
                    }
                }
                Op::Delete(k) => {
                    if k.len() <= max {
                        db.delete(&k).unwrap();
                        model.remove(&k);
                    }
                }
                Op::Batch(items) => {
                    let mut b = WriteBatch::new();
                    let mut staged = Vec::new();
                    for (k, n) in items.into_iter().filter(|(k, _)| k.len() <= max) {
                        let v = value_of(&k, n);
                        b.put(&k, &v).unwrap();
                        staged.push((k, v));
                    }
                    db.write_batch(&b).unwrap();
                    model.extend(staged);
                }
                Op::Reopen => {
                    drop(db);
                    db = open(&d, page_size);
                }
            }
        }
        check(&db, &model);
        drop(db);
        let db = open(&d, page_size);
        check(&db, &model);
    }
}

#[test]
fn range_scans_respect_bounds() {
    let d = devices();
    let db = open(&d, 4096);
    for i in 0..3000u32 {
        db.put(&i.to_be_bytes(), &i.to_le_bytes()).unwrap();
    }
    let from = 1000u32.to_be_bytes();
    let to = 1010u32.to_be_bytes();
    let got = db
        .scan_collect(KeyRange::from_bounds(&from[..]..&to[..]), 100)
        .unwrap();
    assert_eq!(got.len(), 10);
    assert_eq!(got[0].0, from.to_vec());
    let got = db
        .scan_collect(KeyRange::from_bounds(&from[..]..=&to[..]), 100)
        .unwrap();
    assert_eq!(got.len(), 11);
    assert!(db.stats().field("height").unwrap() >= 2.0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    /// Bulk loads at any fill, of keys whose fences may not fit beside a
    /// full page, then splits of the loaded pages: the tree verifies
    /// (fences equal to the parents' separators) and holds every pair.
    #[test]
    fn bulk_loads_of_any_keys_verify(
        keys in proptest::collection::btree_set(key(), 1..600),
        fill in 0.5f64..=1.0,
        small in any::<bool>(),
        later in proptest::collection::vec(key(), 0..200),
    ) {
        let page_size = if small { 1024 } else { 4096 };
        let d = devices_for(page_size);
        let db = open(&d, page_size);
        let max = ferrite_btree::max_key_len(page_size);
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = keys
            .into_iter()
            .filter(|k| k.len() <= max)
            .map(|k| {
                let v = value_of(&k, k.len() % 50);
                (k, v)
            })
            .collect();
        let mut it = model.clone().into_iter();
        prop_assert_eq!(db.bulk_load_with_fill(&mut it, fill).unwrap(), model.len() as u64);
        check(&db, &model);
        for k in later.into_iter().filter(|k| k.len() <= max) {
            let v = value_of(&k, 7);
            db.put(&k, &v).unwrap();
            model.insert(k, v);
        }
        check(&db, &model);
    }
}

#[test]
fn bulk_load_builds_a_valid_tree() {
    let d = devices();
    let db = open(&d, 4096);
    let mut it = (0..50_000u64).map(|i| (i.to_be_bytes().to_vec(), (i * 3).to_le_bytes().to_vec()));
    assert_eq!(db.bulk_load_with_fill(&mut it, 0.9).unwrap(), 50_000);
    db.verify().unwrap();
    // The walk reports how full it found the pages: the loader's 90%, plus
    // fence keys, less the last page's remainder.
    let fill = db.stats().field("fill_level_0").unwrap();
    assert!((0.85..0.95).contains(&fill), "leaf fill {fill}");
    assert!(db.stats().field("min_fill_level_1").unwrap() > 0.0);
    for i in (0..50_000u64).step_by(997) {
        assert_eq!(
            db.get(&i.to_be_bytes()).unwrap(),
            Some((i * 3).to_le_bytes().to_vec())
        );
    }
    db.put(&7u64.to_be_bytes(), b"new").unwrap();
    drop(db);
    let db = open(&d, 4096);
    assert_eq!(db.get(&7u64.to_be_bytes()).unwrap(), Some(b"new".to_vec()));
    assert_eq!(
        db.get(&49_999u64.to_be_bytes()).unwrap(),
        Some((49_999u64 * 3).to_le_bytes().to_vec())
    );
    db.verify().unwrap();
    // Unsorted input and non-empty stores are refused.
    let mut bad = vec![(b"b".to_vec(), vec![]), (b"a".to_vec(), vec![])].into_iter();
    assert!(db.bulk_load_with_fill(&mut bad, 0.9).is_err());
}

#[test]
fn oversized_keys_are_typed_errors() {
    let d = devices();
    let db = open(&d, 4096);
    assert!(matches!(
        db.put(&[1; 2000], b"v"),
        Err(ferrite_core::Error::KeyTooLarge { .. })
    ));
    assert!(matches!(
        db.put(b"", b"v"),
        Err(ferrite_core::Error::EmptyKey)
    ));
    db.put(&[1; 1024], &vec![2; 100_000]).unwrap();
    assert_eq!(db.get(&[1; 1024]).unwrap().map(|v| v.len()), Some(100_000));
}

/// `n` puts to keys below 8000 in an order `seed` picks (a linear
/// congruential generator), values of 0 to 39 bytes: each with its index
/// and the generator's state, for probes drawn from it.
fn scattered_puts(seed: u64, n: u32) -> impl Iterator<Item = (u32, u64, Vec<u8>, Vec<u8>)> {
    let mut x = seed;
    (0..n).map(move |i| {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let k = ((x >> 33) % 8_000) as u32;
        let v = value_of(&k.to_be_bytes(), (i % 40) as usize);
        (i, x, k.to_be_bytes().to_vec(), v)
    })
}

#[test]
fn dirty_pages_spill_and_come_back_between_checkpoints() {
    // 1 KiB pages, a 64-frame pool and data many times its size: most
    // writes evict a dirty page to the spill file and many reads bring one
    // back from there, with checkpoints only when the spill file fills.
    let d = devices_for(1024);
    let db = open(&d, 1024);
    let mut model = BTreeMap::new();
    for (i, x, k, v) in scattered_puts(3, 30_000) {
        db.put(&k, &v).unwrap();
        model.insert(k, v);
        if i % 1000 == 0 {
            let probe = ((x >> 13) % 8_000) as u32;
            assert_eq!(
                db.get(&probe.to_be_bytes()).unwrap().as_ref(),
                model.get(&probe.to_be_bytes()[..])
            );
        }
    }
    let s = db.stats();
    assert!(
        s.field("spills").unwrap() > 1000.0,
        "{:?}",
        s.field("spills")
    );
    assert!(s.field("checkpoints").unwrap() > 1.0);
    check(&db, &model);
    drop(db);
    let db = open(&d, 1024);
    check(&db, &model);
}

/// A pool far smaller than the WAL bound spills as many pages as that
/// bound covers before it checkpoints, not four per frame: under random
/// writes each checkpoint then rewrites a page once for many changes.
#[test]
fn a_small_pool_spills_up_to_the_wal_bound_before_it_checkpoints() {
    let d = devices_for(1024);
    let bt = BTreeOptions::default()
        .page_size(1024)
        .checkpoint_wal_bytes(4 << 20)
        .insert_buffer(None)
        .shortcut(None);
    // The smallest cache a store takes: 56 frames of 1 KiB pages, about a
    // tenth of the data.
    let open = || common::open_unsynced(&d, 64 << 10, bt).unwrap();
    let db = open();
    let created = db.stats().field("checkpoints");
    let mut model = BTreeMap::new();
    for (_, _, k, v) in scattered_puts(5, 20_000) {
        db.put(&k, &v).unwrap();
        model.insert(k, v);
    }
    let s = db.stats();
    let frames = s.field("pool_frames").unwrap();
    let spilled = s.field("spilled_pages").unwrap();
    assert!(
        spilled > 4.0 * frames,
        "{spilled} pages spilled by {frames} frames"
    );
    assert_eq!(
        s.field("checkpoints"),
        created,
        "no checkpoint since creation"
    );
    check(&db, &model);
    drop(db);
    // Recovery replays the log over the untouched checkpoint; the spill
    // file is scratch it never reads.
    let db = open();
    check(&db, &model);
}

/// Large values rewritten across checkpoints and reopens take the pages of
/// the values they replaced: the free list survives a restart, and
/// overflow chains reuse the ids the durable checkpoint no longer needs, so
/// the file stops growing instead of gaining every rewritten value's pages.
#[test]
fn rewritten_large_values_reuse_freed_pages_across_reopens() {
    let d = devices();
    let pages = |db: &BTreeStore| {
        db.stats()
            .engine::<ferrite_btree::BTreeStats>()
            .unwrap()
            .pages
    };
    let value = |round: u8, k: u8| vec![round.wrapping_mul(31).wrapping_add(k); 20_000];
    let mut db = open(&d, 4096);
    let mut sizes = Vec::new();
    for round in 0..6u8 {
        for k in 0..16u8 {
            db.put(&[k], &value(round, k)).unwrap();
        }
        db.flush().unwrap();
        drop(db);
        db = open(&d, 4096);
        db.verify().unwrap();
        for k in 0..16u8 {
            assert_eq!(db.get(&[k]).unwrap(), Some(value(round, k)));
        }
        sizes.push(pages(&db));
    }
    // Each round rewrites 16 values of 5 overflow pages each (80 pages).
    for w in sizes[2..].windows(2) {
        assert!(w[1] <= w[0] + 2, "the file keeps growing: {sizes:?}");
    }
}

/// The engine's memory (pool frames and metadata, the WAL's and
/// checkpoints' buffers) stays within the budget at every size, small ones
/// included, and a budget too small for a working pool is refused.
#[test]
fn memory_stays_within_the_budget_and_too_small_a_budget_is_refused() {
    for (ps, cache) in [
        (1024, 64 << 10),
        (4096, 128 << 10),
        (4096, 300 << 10),
        (4096, 600 << 10),
        (16384, 2 << 20),
        (4096, 16 << 20),
    ] {
        let d = devices_for(ps);
        let db = open_with(&d, ps, cache).unwrap();
        for i in 0..3000u32 {
            db.put(&i.to_be_bytes(), &[7; 40]).unwrap();
        }
        db.flush().unwrap();
        let used = db.stats().memory_bytes;
        assert!(used <= cache, "{ps} B pages, budget {cache}: {used} B used");
        assert_eq!(db.get(&77u32.to_be_bytes()).unwrap(), Some(vec![7; 40]));
    }
    // 16 KiB pages in 128 KiB: fewer frames than a split and a few
    // lookups pin at once.
    let d = devices_for(16384);
    assert!(matches!(
        open_with(&d, 16384, 128 << 10),
        Err(ferrite_core::Error::InvalidOptions(m)) if m.contains("frames")
    ));
}
