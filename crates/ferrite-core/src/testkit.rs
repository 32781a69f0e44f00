//! Oracles the engines' tests share (cargo feature `testkit`): what a
//! store may answer once bytes on its device have gone bad
//! ([`flip_bit`] makes them so).
//!
//! The rule every check enforces: an answer is the model's, or an error
//! that says the store met bad bytes ([`Error::is_corruption`]). Never a
//! wrong value, never another kind of error, never a panic in the store.
//! The checks panic with `what` and the key on a broken rule, since tests
//! are their only users; they hold no state. [`full_disk`] holds a store
//! to the same standard when its devices run out of space, and
//! [`interrupted_recovery`] cuts the power while a store recovers.
//! [`Effect`] is what a batch does to a model, range deletes included.

use std::collections::BTreeMap;
use std::sync::Arc;

use ferrite_io::{AlignedBuf, BlockDevice, CrashMode, FaultKind, FaultOp, FaultRule, FaultyDevice};
use rand::Rng;

use crate::batch::WriteBatch;
use crate::error::{Error, Result};
use crate::range::KeyRange;
use crate::store::{KvStore, KvStoreExt};

/// What a store should hold: key to value.
pub type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// A write that failed; it may or may not have taken effect.
pub type Failed = (Vec<u8>, Vec<u8>);

/// What a batch does to a model map, in order: `(key, Some(value))` puts,
/// `(key, None)` deletes.
pub type Effect = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// Applies `effect` to `model`.
pub fn apply_effect(model: &mut BTreeMap<Vec<u8>, Vec<u8>>, effect: &Effect) {
    for (k, v) in effect {
        match v {
            Some(v) => model.insert(k.clone(), v.clone()),
            None => model.remove(k),
        };
    }
}

/// `model` with `effect` applied, if there is one: what a store may also
/// hold after a crash when the batch of `effect` failed.
pub fn with_effect(model: &Model, effect: Option<&Effect>) -> Model {
    let mut m = model.clone();
    if let Some(e) = effect {
        apply_effect(&mut m, e);
    }
    m
}

/// A random batch of `ops` operations over keys `key0000` to the key
/// below `keys` (four digits), with what it would do to `acked`: 3% range
/// deletes of up to 80 keys, 20% of the rest deletes, else puts of
/// `value_len` bytes of `fill`.
pub fn random_batch<R: Rng>(
    rng: &mut R,
    acked: &Model,
    ops: usize,
    keys: u32,
    fill: u8,
    value_len: &mut dyn FnMut(&mut R) -> usize,
) -> (WriteBatch, Effect) {
    let mut b = WriteBatch::new();
    let mut effect = Vec::new();
    for _ in 0..ops {
        let at = rng.gen_range(0..keys);
        let k = format!("key{at:04}").into_bytes();
        if rng.gen_bool(0.03) {
            let end = format!("key{:04}", at + rng.gen_range(1..80)).into_bytes();
            b.delete_range(&k, &end)
                .expect("a range of short keys is a valid batch entry");
            let removed = range_delete_effect(acked, &effect, &k, &end);
            effect.extend(removed);
        } else if rng.gen_bool(0.2) {
            b.delete(&k).expect("a short key is a valid batch entry");
            effect.push((k, None));
        } else {
            let v = vec![fill; value_len(rng)];
            b.put(&k, &v).expect("a short pair is a valid batch entry");
            effect.push((k, Some(v)));
        }
    }
    (b, effect)
}

/// Arms a fault on one of `devices`, picked at random, at one of its
/// first three writes or syncs from now: an I/O error, or on a write half
/// the time a torn block.
pub fn random_fault<D: BlockDevice>(rng: &mut impl Rng, devices: &[Arc<FaultyDevice<D>>]) {
    let dev = &devices[rng.gen_range(0..devices.len())];
    let op = if rng.gen_bool(0.5) {
        FaultOp::Write
    } else {
        FaultOp::Sync
    };
    let kind = match (op, rng.gen_bool(0.5)) {
        (FaultOp::Write, true) => FaultKind::Torn { blocks: 1 },
        _ => FaultKind::Eio,
    };
    dev.inject(FaultRule::nth(op, rng.gen_range(1..4), kind));
}

/// A power cut `rng` picks: every unsynced block lost, or half of them
/// kept (chosen by `seed`).
pub fn random_crash(rng: &mut impl Rng, seed: u64) -> CrashMode {
    if rng.gen_bool(0.5) {
        CrashMode::DropAll
    } else {
        CrashMode::KeepRandom { seed, keep: 0.5 }
    }
}

/// Cuts the power to `devices` under the open `store`, drops the store
/// and starts the devices again.
pub fn power_cut<S, D: BlockDevice>(store: S, devices: &[Arc<FaultyDevice<D>>], mode: CrashMode) {
    for dev in devices {
        dev.crash(mode).expect("a power cut of a fault device");
    }
    drop(store);
    for dev in devices {
        dev.restart();
    }
}

/// The deletes a range delete `start..end` adds to a batch's `effect`: one
/// per key of the range that `before` holds once the batch's earlier
/// operations are applied.
pub fn range_delete_effect(
    before: &BTreeMap<Vec<u8>, Vec<u8>>,
    effect: &Effect,
    start: &[u8],
    end: &[u8],
) -> Effect {
    let mut view = before.clone();
    apply_effect(&mut view, effect);
    view.range::<[u8], _>((
        std::ops::Bound::Included(start),
        std::ops::Bound::Excluded(end),
    ))
    .map(|(k, _)| (k.clone(), None))
    .collect()
}

/// Key `i` of the key space the checks use (`key00042`).
pub fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

/// Keys `0..n`.
pub fn keys(n: u32) -> Vec<Vec<u8>> {
    (0..n).map(key).collect()
}

/// A write to a random key of `0..n`: a delete 15% of the time, else a
/// value of up to 120 bytes filled with `fill`, or with `long` 2% of the
/// time one of 9000 bytes (past a page, so overflow chains and value logs
/// see writes too).
pub fn random_write(
    rng: &mut impl Rng,
    n: u32,
    long: bool,
    fill: u8,
) -> (Vec<u8>, Option<Vec<u8>>) {
    let k = key(rng.gen_range(0..n));
    if rng.gen_bool(0.15) {
        return (k, None);
    }
    let len = if long && rng.gen_bool(0.02) {
        9000
    } else {
        rng.gen_range(0..120)
    };
    (k, Some(vec![fill; len]))
}

/// `count` puts of 1 to 99 bytes to random keys of `0..n`.
pub fn random_puts(rng: &mut impl Rng, n: u32, count: u32) -> Vec<(Vec<u8>, Vec<u8>)> {
    (0..count)
        .map(|i| {
            (
                key(rng.gen_range(0..n)),
                vec![(i % 13) as u8; rng.gen_range(1..100)],
            )
        })
        .collect()
}

/// Applies a write to `db` (it must succeed) and to `model`.
pub fn apply(db: &dyn KvStore, model: &mut Model, (k, v): (Vec<u8>, Option<Vec<u8>>)) {
    match v {
        Some(v) => {
            db.put(&k, &v).expect("a write before any damage");
            model.insert(k, v);
        }
        None => {
            db.delete(&k).expect("a delete before any damage");
            model.remove(&k);
        }
    }
}

/// Flips bit `bit` of byte `byte` of `dev`, rewriting the block that holds
/// it: damage as a device returns it, under every checksum.
pub fn flip_bit(dev: &dyn BlockDevice, byte: u64, bit: u32) {
    let bs = dev.block_size() as u64;
    let block = byte / bs * bs;
    let mut buf = AlignedBuf::zeroed(bs as usize);
    dev.read_at(&mut buf, block)
        .expect("reading the block to damage");
    if let Some(b) = buf.get_mut((byte - block) as usize) {
        *b ^= 1 << bit;
    }
    dev.write_at(&buf, block)
        .expect("writing the damaged block");
}

/// Panics unless `e` reports bad bytes.
pub fn assert_corruption(e: &Error, what: &str) {
    assert!(e.is_corruption(), "{what}: {e}");
}

/// One lookup per key of `keys`, against `model`: the model's answer or
/// corruption. The key of a `failed` write may also answer with its
/// value. Returns how many lookups reported corruption.
pub fn check_lookups(
    db: &dyn KvStore,
    keys: &[Vec<u8>],
    model: &Model,
    failed: Option<&Failed>,
    what: &str,
) -> usize {
    let mut damaged = 0;
    for k in keys {
        match db.get(k) {
            Ok(got) => {
                let maybe = failed.filter(|(fk, _)| fk == k).map(|(_, v)| v);
                assert!(
                    got.as_ref() == model.get(k) || (maybe.is_some() && got.as_ref() == maybe),
                    "{what}: key {:?}: {got:?} against {:?}",
                    String::from_utf8_lossy(k),
                    model.get(k)
                );
            }
            Err(e) => {
                assert_corruption(&e, what);
                damaged += 1;
            }
        }
    }
    damaged
}

/// Everything a store opened over damage is asked: a lookup of every key
/// of `keys`, a full scan and `verify` (which must fail if a lookup met
/// corruption); then `writes`, each going through or failing with
/// corruption (the first failure ends them), a flush, and the lookups
/// again against the model with the writes. Returns `verify`'s result.
pub fn exercise(
    db: &dyn KvStore,
    keys: &[Vec<u8>],
    model: &Model,
    writes: impl IntoIterator<Item = (Vec<u8>, Vec<u8>)>,
    what: &str,
) -> Result<()> {
    let damaged = check_lookups(db, keys, model, None, what);
    match db.scan_collect(KeyRange::all(), usize::MAX) {
        Ok(got) => assert!(
            got.into_iter().collect::<Model>() == *model,
            "{what}: the scan differs from the model"
        ),
        Err(e) => assert_corruption(&e, what),
    }
    let verified = db.verify();
    if let Err(e) = &verified {
        assert_corruption(e, what);
    }
    assert!(
        damaged == 0 || verified.is_err(),
        "{what}: verify passed after {damaged} lookups met corruption"
    );
    let mut after = model.clone();
    let mut failed = None;
    for (k, v) in writes {
        match db.put(&k, &v) {
            Ok(()) => {
                after.insert(k, v);
            }
            Err(e) => {
                assert_corruption(&e, what);
                failed = Some((k, v));
                break;
            }
        }
    }
    if let Err(e) = db.flush() {
        assert_corruption(&e, what);
    }
    check_lookups(db, keys, &after, failed.as_ref(), what);
    verified
}

/// A recovery cut short, for crash tests to run between a crash and the
/// reopen they check: the store is opened on the restarted `devices` with
/// a fault `rng` picks waiting in one of them (an I/O error or torn write
/// on one of its first writes, a failed sync, or an I/O error on one of
/// its first reads), so it meets recovery's own writes, or cuts recovery
/// short after it has changed state in memory; then the power is cut
/// (every unsynced block lost, or half of them kept) under the store, if
/// it opened, and the devices are restarted without faults. Recovery must
/// not have made the store lose what the first crash left recoverable
/// (an open that fails must leave nothing behind that a later one
/// trusts), so the caller's reopen and checks after it are the same as
/// after any crash. Returns whether the faulted open failed.
pub fn interrupted_recovery<S, E, D: BlockDevice>(
    rng: &mut impl Rng,
    devices: &[Arc<FaultyDevice<D>>],
    open: impl FnOnce() -> std::result::Result<S, E>,
) -> bool {
    let dev = &devices[rng.gen_range(0..devices.len())];
    let (op, kind, within) = match rng.gen_range(0..4) {
        0 => (FaultOp::Write, FaultKind::Eio, 8),
        1 => (FaultOp::Write, FaultKind::Torn { blocks: 1 }, 8),
        2 => (FaultOp::Sync, FaultKind::Eio, 8),
        // Recovery reads far more than it writes: reach past its first
        // reads (the snapshot, the log's head) into the replay.
        _ => (FaultOp::Read, FaultKind::Eio, 64),
    };
    dev.inject(FaultRule::nth(op, rng.gen_range(1..within), kind));
    let opened = open();
    let failed = opened.is_err();
    let crash = if rng.gen_bool(0.5) {
        CrashMode::DropAll
    } else {
        CrashMode::KeepRandom {
            seed: rng.gen(),
            keep: 0.5,
        }
    };
    for d in devices {
        d.clear_faults();
        d.crash(crash).expect("cutting the power");
    }
    // Dropped after the power cut, so closing it writes nothing.
    drop(opened);
    for d in devices {
        d.restart();
    }
    failed
}

/// How [`full_disk`] writes: puts to 4-byte keys below `keys` with values
/// of 1 to `max_value - 1` bytes, `warm` of them before the devices fill,
/// each device then left with less than `max_headroom` free bytes (whole
/// KiB).
#[derive(Debug, Clone, Copy)]
pub struct FullDisk {
    pub keys: u32,
    pub max_value: usize,
    pub warm: u64,
    pub max_headroom: u64,
}

/// A full disk, met at a point `rng` picks (inside the store's own
/// background writes too): the put that meets it and every later call
/// report it (`is_no_space`); a reopen on the still-full disk fails the
/// same way or works; once space returns the store opens, verifies, holds
/// every acknowledged write (the failed put all or nothing) and takes
/// writes again. `open` opens the store over `devices`.
pub fn full_disk<S: KvStore, D: BlockDevice>(
    rng: &mut impl Rng,
    devices: &[Arc<FaultyDevice<D>>],
    shape: FullDisk,
    open: impl Fn() -> Result<S>,
    what: &str,
) {
    let db = open().expect("opening on empty devices");
    let mut acked = Model::new();
    let headroom = rng.gen_range(0..(shape.max_headroom >> 10).max(1)) << 10;
    let mut write = || {
        let k = rng.gen_range(0..shape.keys).to_be_bytes().to_vec();
        (k, vec![rng.gen(); rng.gen_range(1..shape.max_value)])
    };
    for _ in 0..shape.warm {
        let (k, v) = write();
        db.put(&k, &v).expect("a put before the disk fills");
        acked.insert(k, v);
    }
    for dev in devices {
        dev.fill_up(headroom);
    }
    let (failed, first) = loop {
        let (k, v) = write();
        match db.put(&k, &v) {
            Ok(()) => acked.insert(k, v),
            Err(e) => break ((k, v), e),
        };
        assert!(acked.len() < 100_000, "{what}: the disk never filled");
    };
    assert!(first.is_no_space(), "{what}: {first}");
    let later = db.get(b"k").expect_err("a call after the disk filled");
    assert!(later.is_no_space(), "{what}: {later}");
    drop(db);
    if let Err(e) = open() {
        assert!(e.is_no_space(), "{what}: reopen on a full disk: {e}");
    }
    for dev in devices {
        dev.clear_faults();
    }
    let db = open().expect("reopening once space returned");
    db.verify().expect("verifying once space returned");
    let mut with_failed = acked.clone();
    with_failed.insert(failed.0, failed.1);
    let got: Model = db
        .scan_collect(KeyRange::all(), usize::MAX)
        .expect("scanning once space returned")
        .into_iter()
        .collect();
    assert!(
        got == acked || got == with_failed,
        "{what}: {} keys recovered, {} acknowledged",
        got.len(),
        acked.len()
    );
    db.put(b"after", b"space returned")
        .expect("a put once space returned");
}
