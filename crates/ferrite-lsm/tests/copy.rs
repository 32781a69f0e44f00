//! Copying a live store from its files (`KvStore::copy_files`): the copy
//! holds exactly what the store held, tables, memtables, flush buffers,
//! deletes and range deletes alike, opens, verifies and takes writes; one
//! taken while a writer runs holds a prefix of its batches, each whole.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ferrite_core::{KeyRange, KvStore, KvStoreExt, Options, SyncMode, WriteBatch};
use ferrite_lsm::{IndexKind, LsmOptions, LsmStore};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn options() -> Options {
    Options::default()
        .cache_bytes(64 << 10)
        .sync(SyncMode::Never)
        .direct_io(false)
}

fn lsm(partitions: usize) -> LsmOptions {
    common::tiny(IndexKind::LEARNED).partitions(partitions)
}

/// Keys spread over partitions (which route by the first 8 bytes).
fn key(i: u64) -> Vec<u8> {
    let mut k = i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes().to_vec();
    k.extend_from_slice(&i.to_be_bytes());
    k
}

/// A never-written store in `dir`, as `copy_files` wants it.
fn blank(dir: &Path, lsm: &LsmOptions) {
    LsmStore::open(dir, &options(), lsm.clone())
        .unwrap()
        .close()
        .unwrap();
}

fn everything(db: &dyn KvStore) -> Vec<(Vec<u8>, Vec<u8>)> {
    db.scan_collect(KeyRange::all(), usize::MAX).unwrap()
}

fn copies_hold_what_the_store_held(partitions: usize) {
    let dir = tempfile::tempdir().unwrap();
    let lsm = lsm(partitions);
    let db = LsmStore::open(&dir.path().join("db"), &options(), lsm.clone()).unwrap();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut rng = SmallRng::seed_from_u64(partitions as u64);
    let mut copies = 0;
    for op in 1..=3000u32 {
        let k = key(rng.gen_range(0..400));
        match rng.gen_range(0..10) {
            0..=6 => {
                let v = vec![rng.gen::<u8>(); rng.gen_range(0..200)];
                db.put(&k, &v).unwrap();
                model.insert(k, v);
            }
            7 | 8 => {
                db.delete(&k).unwrap();
                model.remove(&k);
            }
            _ => {
                let mut end = k.clone();
                end[2] = end[2].saturating_add(8);
                if end == k {
                    end.push(0xff);
                }
                db.delete_range(&k, &end).unwrap();
                model.retain(|x, _| !(k <= *x && *x < end));
            }
        }
        if ![400, 1500, 3000].contains(&op) {
            continue;
        }
        copies += 1;
        let at = dir.path().join(format!("copy{copies}"));
        blank(&at, &lsm);
        let moved = db.copy_files(&at).unwrap().unwrap();
        if op > 400 {
            assert!(
                moved.shared_bytes + moved.copied_bytes > 0,
                "op {op}: the tables' extents are copied"
            );
        }
        let copy = LsmStore::open(&at, &options(), lsm.clone()).unwrap();
        copy.verify().unwrap();
        let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        assert_eq!(everything(&copy), want, "op {op}, {partitions} partitions");
        // The copy is a store of its own: it takes writes and keeps them.
        copy.put(b"written-in-the-copy", b"yes").unwrap();
        copy.close().unwrap();
        let copy = LsmStore::open(&at, &options(), lsm.clone()).unwrap();
        assert_eq!(copy.get(b"written-in-the-copy").unwrap().unwrap(), b"yes");
        assert_eq!(
            copy.scan_collect(KeyRange::all(), usize::MAX)
                .unwrap()
                .len(),
            want.len() + 1
        );
        copy.close().unwrap();
    }
    // The store itself is untouched by being copied.
    let want: Vec<_> = model.into_iter().collect();
    assert_eq!(everything(&db), want);
    db.close().unwrap();
}

#[test]
fn a_copy_holds_what_the_store_held() {
    copies_hold_what_the_store_held(1);
}

#[test]
fn a_copy_of_a_partitioned_store_holds_its_flush_buffers() {
    copies_hold_what_the_store_held(4);
}

#[test]
fn a_copy_taken_while_writing_holds_a_prefix_of_whole_batches() {
    let dir = tempfile::tempdir().unwrap();
    let lsm = lsm(4);
    let db = Arc::new(LsmStore::open(&dir.path().join("db"), &options(), lsm.clone()).unwrap());
    let stop = AtomicBool::new(false);
    let seq_of = |v: &[u8]| u64::from_le_bytes(v.try_into().unwrap());
    let written = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let mut b = WriteBatch::new();
                b.put(&key(1_000_000 + n), &n.to_le_bytes()).unwrap();
                b.put(b"seq", &n.to_le_bytes()).unwrap();
                db.write_batch(&b).unwrap();
            }
            n
        });
        while db.get(b"seq").unwrap().is_none_or(|v| seq_of(&v) < 300) {
            std::thread::yield_now();
        }
        for c in 0..3 {
            let at = dir.path().join(format!("copy{c}"));
            blank(&at, &lsm);
            db.copy_files(&at).unwrap().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap()
    });
    let mut last = 0;
    for c in 0..3 {
        let copy = LsmStore::open(
            &dir.path().join(format!("copy{c}")),
            &options(),
            lsm.clone(),
        )
        .unwrap();
        copy.verify().unwrap();
        let seq = seq_of(&copy.get(b"seq").unwrap().unwrap());
        assert!(
            (300..=written).contains(&seq) && seq >= last,
            "copy {c}: {seq}"
        );
        let mut held: Vec<u64> = everything(&copy)
            .into_iter()
            .filter(|(k, _)| k.as_slice() != b"seq")
            .map(|(_, v)| seq_of(&v))
            .collect();
        held.sort_unstable();
        assert_eq!(held, (1..=seq).collect::<Vec<_>>(), "copy {c}");
        last = seq;
        copy.close().unwrap();
    }
    Arc::try_unwrap(db).ok().unwrap().close().unwrap();
}

#[test]
fn a_copy_refuses_a_store_that_holds_data() {
    let dir = tempfile::tempdir().unwrap();
    let lsm = lsm(1);
    let db = LsmStore::open(&dir.path().join("db"), &options(), lsm.clone()).unwrap();
    db.put(b"k", b"v").unwrap();
    let other = LsmStore::open(&dir.path().join("other"), &options(), lsm.clone()).unwrap();
    other.put(b"mine", b"kept").unwrap();
    other.flush().unwrap();
    other.close().unwrap();
    assert!(db.copy_files(&dir.path().join("other")).is_err());
    let other = LsmStore::open(&dir.path().join("other"), &options(), lsm).unwrap();
    assert_eq!(other.get(b"mine").unwrap().unwrap(), b"kept");
    assert_eq!(other.get(b"k").unwrap(), None);
}

#[test]
fn a_range_delete_in_a_memtable_hides_older_entries_in_the_copy() {
    let dir = tempfile::tempdir().unwrap();
    let lsm = lsm(1).memtable_bytes(1 << 20);
    let db = LsmStore::open(&dir.path().join("db"), &options(), lsm.clone()).unwrap();
    // In tables: keys below, inside and above the range.
    for k in [&b"a"[..], b"m", b"ma", b"z"] {
        db.put(k, b"old").unwrap();
    }
    db.flush().unwrap();
    // In the memtable: an entry the range delete then covers, and newer
    // writes on both sides of it, so the table the memtable becomes is
    // newer than the delete.
    db.put(b"mb", b"covered").unwrap();
    db.delete_range(b"m", b"n").unwrap();
    db.put(b"a", b"new").unwrap();
    db.put(b"mc", b"after the delete").unwrap();
    let at = dir.path().join("copy");
    blank(&at, &lsm);
    db.copy_files(&at).unwrap().unwrap();
    let copy = LsmStore::open(&at, &options(), lsm).unwrap();
    let got: Vec<(Vec<u8>, Vec<u8>)> = everything(&copy);
    let want: Vec<(Vec<u8>, Vec<u8>)> = [
        (&b"a"[..], &b"new"[..]),
        (b"mc", b"after the delete"),
        (b"z", b"old"),
    ]
    .iter()
    .map(|(k, v)| (k.to_vec(), v.to_vec()))
    .collect();
    assert_eq!(got, want);
    assert_eq!(everything(&db), want);
}
