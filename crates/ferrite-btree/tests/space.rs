//! A store at rest holds one copy of its pages: the double-write file is
//! emptied once a checkpoint's meta page is in both slots, and the spill
//! file once a checkpoint has installed the pages spilled to it; a
//! checkpoint copies to the double-write file only what is not spilled
//! already. The store reopens with everything it held.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::collections::BTreeMap;

use common::Mode;
use ferrite_core::background::{BoardImage, Work};
use ferrite_core::KvStore;
use ferrite_io::BlockDevice;

#[test]
fn the_double_write_and_spill_files_are_empty_after_each_checkpoint() {
    for mode in [Mode::Plain, Mode::Turbo, Mode::Shortcut] {
        let d = common::fresh();
        let db = common::open_as(&d, mode).unwrap();
        let mut model = BTreeMap::new();
        let field = |st: &ferrite_core::Stats, f: &str| st.field(f).unwrap();
        // Far more than the pool holds, so dirty pages are spilled. The
        // background checkpoints (every 64 KiB of log) install what was
        // spilled, and one running when the snapshot is taken has taken
        // dirty pages the snapshot no longer counts; SHORTCUT's worker
        // may move pages (a re-layout dirties them, checkpoints, and a
        // full pool spills them) between the snapshot and the flush. So
        // writing goes on until a snapshot holds spilled pages and its
        // flush's checkpoint ran with no other background work in the
        // process around them.
        let board = || {
            let b = BoardImage::current();
            let idle = b.running_kinds().next().is_none();
            (idle, Work::ALL.map(|w| b.started(w)))
        };
        let mut i = 0u32;
        let (before, after, files) = loop {
            let k = format!("key{:08}", i.wrapping_mul(2_654_435_761) % 100_000).into_bytes();
            let v = vec![(i % 251) as u8; 150];
            db.put(&k, &v).unwrap();
            model.insert(k, v);
            i += 1;
            if i >= 6000 {
                let (idle, started) = board();
                let st = db.stats();
                if idle && board() == (true, started) && field(&st, "spilled_pages") > 0.0 {
                    db.flush().unwrap();
                    let files = (d[1].len(), d[3].len());
                    let after = db.stats();
                    // The flush's own checkpoint is on the board: one start.
                    let (idle, now) = board();
                    let only_ours = Work::ALL
                        .iter()
                        .enumerate()
                        .all(|(j, &w)| now[j] == started[j] + u64::from(w == Work::Checkpoint));
                    if idle && only_ours {
                        break (st, after, files);
                    }
                }
                assert!(i < 200_000, "{mode:?}: no quiet moment with pages spilled");
            }
        };
        // The checkpoint copied only the dirty frames (and the free
        // list's few pages) to the double-write file; the spilled pages
        // were named where they lie in the spill file.
        let delta = |f: &str| field(&after, f) - field(&before, f);
        let copied = delta("double_written_pages");
        let named = delta("checkpoint_pages") - copied;
        assert!(named > 0.0, "{mode:?}: no spilled page was named");
        assert!(
            copied <= field(&before, "dirty_pages") + 16.0,
            "{mode:?}: {copied} pages copied with {} dirty",
            field(&before, "dirty_pages")
        );
        assert_eq!(
            files,
            (0, 0),
            "{mode:?}: double-write and spill bytes after a checkpoint"
        );
        drop(db);
        assert_eq!((d[1].len(), d[3].len()), (0, 0), "{mode:?}: at rest");

        let db = common::open_as(&d, mode).unwrap();
        assert_eq!(common::contents(&db), model, "{mode:?}");
        db.verify().unwrap();
    }
}

/// Pages of `dev` (of `ps` bytes) holding any byte other than zero.
fn written_pages(dev: &common::Dev, ps: usize) -> usize {
    let mut n = 0;
    let mut b = ferrite_io::AlignedBuf::zeroed(ps);
    for id in 0..dev.len() / ps as u64 {
        dev.read_at(&mut b, id * ps as u64).unwrap();
        n += usize::from(b.iter().any(|&x| x != 0));
    }
    n
}

/// Waits until `db` has compacted `n` times, or fails.
fn await_compactions(db: &ferrite_btree::BTreeStore, n: f64, what: &str) {
    let start = std::time::Instant::now();
    while db.stats().field("compactions").unwrap() < n {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "{what}: no compaction after 30 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A tree that lost most of its pairs keeps every leaf while it is
/// written; once quiet, it is rebuilt from its live pairs (with the
/// insert buffer on, after its records are applied) and the old pages
/// become holes: the page file's written pages fall to a few,
/// everything left is read back (values in overflow chains included),
/// and the store reopens with it.
#[test]
fn an_idle_tree_that_lost_most_of_its_pairs_gives_its_pages_back() {
    for mode in [Mode::Plain, Mode::Shortcut, Mode::Turbo] {
        let d = common::fresh();
        let db = common::open_with(&d, mode, ferrite_core::SyncMode::Never).unwrap();
        let mut model = BTreeMap::new();
        for i in 0..20_000u32 {
            let k = format!("key{:08}", i.wrapping_mul(2_654_435_761) % 100_000_000).into_bytes();
            // Every 1000th value is long enough for an overflow chain.
            let v = vec![(i % 251) as u8; if i % 1000 == 0 { 9000 } else { 100 }];
            db.put(&k, &v).unwrap();
            model.insert(k, v);
        }
        db.flush().unwrap();
        let page_size = if mode == Mode::Plain { 4096 } else { 1024 };
        let full = written_pages(&d[0], page_size);
        // All but every 50th key goes.
        let doomed: Vec<Vec<u8>> = model.keys().cloned().collect();
        for (i, k) in doomed.iter().enumerate() {
            if i % 50 != 0 {
                db.delete(k).unwrap();
                model.remove(k);
            }
        }
        db.flush().unwrap();
        assert_eq!(
            db.stats().field("compactions"),
            Some(0.0),
            "{mode:?}: compacted while written"
        );
        if mode == Mode::Turbo {
            // The deletes of leaves not in the pool were buffered: the
            // compaction has records to apply first.
            let buffered = db.stats().field("ib_buffered_writes").unwrap_or(0.0);
            assert!(buffered > 1000.0, "only {buffered} writes were buffered");
        }
        await_compactions(&db, 1.0, &format!("{mode:?}"));
        assert_eq!(common::contents(&db), model, "{mode:?}: after compaction");
        db.verify().unwrap();
        let left = written_pages(&d[0], page_size);
        assert!(
            left * 10 < full,
            "{mode:?}: {left} of {full} pages still written after compaction"
        );
        // Writes go on over the rebuilt tree, into the freed ids.
        for i in 0..500u32 {
            let k = format!("new{i:05}").into_bytes();
            db.put(&k, b"v").unwrap();
            model.insert(k, b"v".to_vec());
        }
        drop(db);
        let db = common::open_with(&d, mode, ferrite_core::SyncMode::Never).unwrap();
        assert_eq!(common::contents(&db), model, "{mode:?}: after reopening");
        db.verify().unwrap();
    }
}

/// Emptied to the last pair, the tree is rebuilt as one empty leaf.
#[test]
fn an_emptied_tree_compacts_to_one_leaf() {
    let d = common::fresh();
    let db = common::open_with(&d, Mode::Plain, ferrite_core::SyncMode::Never).unwrap();
    for i in 0..10_000u32 {
        db.put(format!("k{i:06}").as_bytes(), &[7u8; 200]).unwrap();
    }
    for i in 0..10_000u32 {
        db.delete(format!("k{i:06}").as_bytes()).unwrap();
    }
    await_compactions(&db, 1.0, "emptied");
    assert!(common::contents(&db).is_empty());
    assert_eq!(db.stats().field("pages_level_0"), Some(1.0));
    db.put(b"again", b"v").unwrap();
    drop(db);
    let db = common::open(&d).unwrap();
    assert_eq!(db.get(b"again").unwrap().as_deref(), Some(&b"v"[..]));
    db.verify().unwrap();
}

/// What is left is read a chunk per hold of the lock: a remainder of a
/// few chunks comes back whole and in order.
#[test]
fn a_remainder_of_several_chunks_is_rebuilt_whole() {
    let d = common::fresh();
    let db = common::open_with(&d, Mode::Plain, ferrite_core::SyncMode::Never).unwrap();
    let mut model = BTreeMap::new();
    for chunk in 0..240u32 {
        let mut b = ferrite_core::WriteBatch::new();
        for i in chunk * 1000..(chunk + 1) * 1000 {
            let k = format!("key{:08}", i.wrapping_mul(2_654_435_761) % 100_000_000).into_bytes();
            let v = vec![(i % 251) as u8; 100];
            b.put(&k, &v).unwrap();
            model.insert(k, v);
        }
        db.write_batch(&b).unwrap();
    }
    let keys: Vec<Vec<u8>> = model.keys().cloned().collect();
    for (n, part) in keys.chunks(1000).enumerate() {
        let mut b = ferrite_core::WriteBatch::new();
        for (i, k) in part.iter().enumerate() {
            if (n * 1000 + i) % 10 != 0 {
                b.delete(k).unwrap();
                model.remove(k);
            }
        }
        db.write_batch(&b).unwrap();
    }
    let live: usize = model.iter().map(|(k, v)| k.len() + v.len()).sum();
    assert!(live > 2 << 20, "only {live} bytes left: not several chunks");
    await_compactions(&db, 1.0, "several chunks");
    assert!(common::contents(&db) == model, "contents after compaction");
    db.verify().unwrap();
}

#[test]
fn ascending_inserts_leave_the_leaves_nearly_full() {
    for (mode, page_size) in [
        (Mode::Plain, 4096.0),
        (Mode::Turbo, 1024.0),
        (Mode::Shortcut, 1024.0),
    ] {
        let d = common::fresh();
        let db = common::open_with(&d, mode, ferrite_core::SyncMode::Never).unwrap();
        let mut model = BTreeMap::new();
        let mut bytes = 0usize;
        for i in 0..4000u32 {
            let (k, v) = (format!("key{i:08}").into_bytes(), vec![(i % 251) as u8; 60]);
            bytes += k.len() + v.len();
            db.put(&k, &v).unwrap();
            model.insert(k, v);
        }
        db.flush().unwrap();
        let leaves = db.stats().field("pages_level_0").unwrap();
        let fill = bytes as f64 / (leaves * page_size);
        // Keys and values only, so below the cells' fill; an even split of
        // the rightmost leaf at each append leaves about half of this.
        assert!(fill > 0.75, "{mode:?}: {leaves} leaves, {fill:.2} full");
        assert_eq!(common::contents(&db), model, "{mode:?}");
        db.verify().unwrap();
    }
}

/// Random inserts into a tree whose overflowing leaves share with a
/// sibling: every pair is where it was put, the tree verifies (fences,
/// order, separators), and the leaves are fewer and fuller than with
/// splits alone. 1 KiB pages, so the tree is three levels deep and
/// siblings under other parents are met.
#[test]
fn overflowing_leaves_share_with_a_sibling_so_random_inserts_fill_pages() {
    let mut leaves = Vec::new();
    for share in [false, true] {
        let d = common::fresh();
        let bt = ferrite_btree::BTreeOptions::default()
            .page_size(1024)
            .share_leaves(share);
        let db = common::open_unsynced(&d, 4 << 20, bt).unwrap();
        let mut model = BTreeMap::new();
        for i in 0..20_000u64 {
            let k = format!("k{:016x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).into_bytes();
            let v = vec![(i % 251) as u8; (i % 40) as usize + 8];
            db.put(&k, &v).unwrap();
            model.insert(k, v);
            if i % 3000 == 0 {
                // Updates that grow values overflow full leaves too.
                let (k, v) = model
                    .iter()
                    .next()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .unwrap();
                let longer = [v.as_slice(), &[7u8; 30]].concat();
                db.put(&k, &longer).unwrap();
                model.insert(k, longer);
            }
        }
        db.verify().unwrap();
        assert_eq!(common::contents(&db), model, "share {share}");
        let st = db.stats();
        let b = st.engine::<ferrite_btree::BTreeStats>().unwrap();
        leaves.push(b.pages_per_level[0]);
        db.close().unwrap();
        let db = common::open_unsynced(
            &d,
            4 << 20,
            ferrite_btree::BTreeOptions::default().page_size(1024),
        )
        .unwrap();
        assert_eq!(common::contents(&db), model, "share {share}, reopened");
    }
    // Splits alone leave leaves about 0.69 full; sharing, about 0.81
    // (1,436 leaves against 1,693 here).
    assert!(
        leaves[1] * 100 < leaves[0] * 90,
        "leaves with sharing {} against {} without",
        leaves[1],
        leaves[0]
    );
}
