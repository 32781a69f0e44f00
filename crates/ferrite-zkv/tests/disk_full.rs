//! A full device: once reclamation cannot keep its reserve of zones free,
//! writes that add data are refused with `Error::StoreFull` before they
//! change anything. The store is not poisoned: reads go on, deletes go
//! through and free space, later puts succeed again, and a reopen on the
//! full device works. Checked against a `BTreeMap` model over rounds of
//! filling and deleting, with reopens between rounds.
//!
//! With values stored in the leaves, deleting a share of the keys lets the
//! next round put about as many back. A value-log zone returns its space
//! once reclamation can move its live records out at a profit, so with
//! long values the rounds take less, but not much less.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use ferrite_core::{Error, KeyRange, KvStore, KvStoreExt, SyncMode};
use ferrite_io::{EmulatedZonedDevice, MemDevice, ZonedDevice};
use ferrite_zkv::{Variant, ZkvOptions, ZkvStore};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn open(dev: &Arc<dyn ZonedDevice>, zo: &ZkvOptions) -> ZkvStore {
    open_with(dev, zo, SyncMode::Never)
}

/// Under `SyncMode::Always` concurrent writers form write groups: one
/// leader admits, logs and applies the batches of the others.
fn open_with(dev: &Arc<dyn ZonedDevice>, zo: &ZkvOptions, sync: SyncMode) -> ZkvStore {
    let db = ZkvStore::open_on(dev.clone(), &common::options(sync), zo.clone()).unwrap();
    db.verify().unwrap();
    db
}

fn assert_matches(db: &ZkvStore, model: &Model, what: &str) {
    let got: Model = db
        .scan_collect(KeyRange::all(), usize::MAX)
        .unwrap()
        .into_iter()
        .collect();
    assert!(
        got == *model,
        "{what}: store holds {} keys, model {}",
        got.len(),
        model.len()
    );
}

/// Inline value lengths, and the share of values that go to the value
/// log instead (the inline limit is 64 bytes).
#[derive(Debug, Clone, Copy)]
struct Values {
    logged: f64,
}

fn value(rng: &mut SmallRng, values: Values, round: u64) -> Vec<u8> {
    let len = if rng.gen_bool(values.logged) {
        rng.gen_range(65..300)
    } else {
        rng.gen_range(1..60)
    };
    let mut v = vec![round as u8; len];
    rng.fill(&mut v[..]);
    v
}

/// Puts fresh random keys until the store refuses one; returns how many
/// it took.
fn fill(db: &ZkvStore, model: &mut Model, rng: &mut SmallRng, values: Values, round: u64) -> usize {
    let mut taken = 0;
    loop {
        let k = format!("key{:012}", rng.gen_range(0..u64::MAX / 2)).into_bytes();
        let v = value(rng, values, round);
        match db.put(&k, &v) {
            Ok(()) => {
                model.insert(k, v);
                taken += 1;
            }
            Err(e) => {
                assert!(matches!(e, Error::StoreFull { .. }), "round {round}: {e}");
                assert!(e.is_no_space());
                // Refused before anything changed.
                assert_eq!(db.get(&k).unwrap().as_ref(), model.get(&k));
                return taken;
            }
        }
        assert!(taken < 2_000_000, "the store never filled");
    }
}

fn run(variant: Variant, values: Values, seed: u64) {
    let r = rounds(&common::small_opts(variant), values, seed);
    if let Some((round, e)) = &r.refused_delete {
        panic!("{variant:?} {values:?}: round {round}: delete refused: {e}");
    }
    let Rounds {
        taken, relocated, ..
    } = r;
    // Each round deletes about two thirds of the keys. Without logged
    // values the next round puts back at least half as many as the first
    // took; with a tenth logged, at least a third: value-log zones return
    // their space once reclamation moves their last live records out
    // (without that, the third round fell to a fifth). With a third
    // logged, at least a quarter: a zone's records then belong to keys in
    // every leaf, so no zone pays to empty alone, and zones are emptied
    // together (without that, the third round took nothing). Emptying
    // them together also rewrites every leaf, which fits in the free
    // zones only once nearly empty leaves have joined their neighbours
    // (without joins, seed 104's second round took one put).
    if values.logged > 0.0 {
        assert!(
            relocated > 0.0,
            "{variant:?}: no value-log record was moved"
        );
    }
    let share = if values.logged == 0.0 {
        2
    } else if values.logged <= 0.1 {
        3
    } else {
        4
    };
    for (round, &t) in taken.iter().enumerate().skip(1) {
        assert!(
            t * share >= taken[0],
            "{variant:?} {values:?}: round {round} took {t} puts, the first {}",
            taken[0]
        );
    }
}

/// What [`rounds`] saw.
struct Rounds {
    /// Puts each round took before the store refused one.
    taken: Vec<usize>,
    /// Value-log records reclamation moved.
    relocated: f64,
    /// The round whose deletes the full store refused, which ends the run.
    refused_delete: Option<(u64, Error)>,
}

/// Three rounds of filling the device and deleting about two thirds of
/// the keys, each checked against the model.
fn rounds(zo: &ZkvOptions, values: Values, seed: u64) -> Rounds {
    let variant = zo.variant;
    let mut rng = SmallRng::seed_from_u64(seed);
    let dev: Arc<dyn ZonedDevice> =
        Arc::new(EmulatedZonedDevice::format(MemDevice::new(), common::geometry(14)).unwrap());
    let mut db = open(&dev, zo);
    let mut model = Model::new();
    let mut taken = Vec::new();
    let mut relocated = 0.0;
    for round in 0..3u64 {
        taken.push(fill(&db, &mut model, &mut rng, values, round));
        // Full only after reclamation ran out of zones to free.
        let s = db.stats();
        assert!(s.field("refused_writes").unwrap() >= 1.0);
        assert!(s.field("gc_zones").unwrap() > 0.0, "nothing was reclaimed");
        relocated += s.field("relocated_values").unwrap();
        // The store is not poisoned: reads answer.
        assert_matches(&db, &model, "full");
        // A reopen on the full device works.
        drop(db);
        db = open(&dev, zo);
        assert_matches(&db, &model, "reopened full");
        // Deletes go through on the full device. Scattered ones leave
        // leaves part full, and nearly empty ones join a neighbour; a
        // slice of the key space empties whole leaves and returns their
        // pages.
        let keys: Vec<Vec<u8>> = model.keys().cloned().collect();
        let from = rng.gen_range(0..keys.len() / 3);
        let slice = from..from + keys.len() * 3 / 5;
        let victims: Vec<&Vec<u8>> = keys
            .iter()
            .enumerate()
            .filter(|(i, _)| slice.contains(i) || rng.gen_bool(0.2))
            .map(|(_, k)| k)
            .collect();
        for k in victims {
            if let Err(e) = db.delete(k) {
                assert!(e.is_no_space(), "{variant:?} round {round}: {e}");
                assert_matches(&db, &model, "a delete refused");
                return Rounds {
                    taken,
                    relocated,
                    refused_delete: Some((round, e)),
                };
            }
            model.remove(k);
        }
        assert_matches(&db, &model, "after deletes");
    }
    drop(db);
    let db = open(&dev, zo);
    assert_matches(&db, &model, "final reopen");
    Rounds {
        taken,
        relocated,
        refused_delete: None,
    }
}

#[test]
fn a_full_zkv_refuses_puts_and_recovers_room_from_deletes() {
    run(Variant::Zkv, Values { logged: 0.0 }, 1);
    run(Variant::Zkv, Values { logged: 0.1 }, 2);
    run(Variant::Zkv, Values { logged: 0.3 }, 3);
    run(Variant::Zkv, Values { logged: 0.3 }, 104);
}

/// Seed 134 with a third of the values logged and joins off: a full store
/// whose two flushers had just moved on to fresh zones refused its deletes
/// with one zone free, although the flushers' zones stood nearly empty;
/// their room now counts towards admission.
#[test]
fn deletes_go_through_while_the_flushers_zones_have_room() {
    let zo = common::small_opts(Variant::Zkv).leaf_joins(false);
    let r = rounds(&zo, Values { logged: 0.3 }, 134);
    if let Some((round, e)) = &r.refused_delete {
        panic!("round {round} refused deletes: {e}");
    }
    assert_eq!(r.taken.len(), 3);
}

/// What deletes give back on a full device, with leaf joins on and off:
/// the puts each round after the first takes, as a share of the first,
/// over 64 seeds per value mix (a run whose deletes are refused counts
/// its later rounds as taking nothing). A measurement (every round is
/// still checked against the model); `docs/results/zkv-space.md` holds a
/// run.
#[test]
#[ignore = "a measurement, run by hand: cargo test --release -p ferrite-zkv --test disk_full -- --ignored --nocapture"]
fn space_returned_by_deletes() {
    const SEEDS: std::ops::Range<u64> = 100..164;
    let n = SEEDS.end - SEEDS.start;
    println!(
        "| values logged | leaf joins | round 2 / round 1 (min, median) | \
         round 3 / round 1 (min, median) | seeds under 5% in a round | seeds with deletes refused |"
    );
    println!("|---|---|---|---|---|---|");
    for logged in [0.0, 0.1, 0.3] {
        for joins in [false, true] {
            let zo = common::small_opts(Variant::Zkv).leaf_joins(joins);
            let mut shares: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
            let (mut starved, mut refused) = (0, 0);
            for seed in SEEDS {
                let mut r = rounds(&zo, Values { logged }, seed);
                refused += usize::from(r.refused_delete.is_some());
                r.taken.resize(3, 0);
                for i in 1..3 {
                    shares[i - 1].push(r.taken[i] as f64 / r.taken[0] as f64);
                }
                starved += usize::from(r.taken[1..].iter().any(|&t| t * 20 < r.taken[0]));
            }
            let cell = |v: &mut Vec<f64>| {
                v.sort_by(f64::total_cmp);
                let mid = v.len() / 2;
                format!("{:.3}, {:.3}", v[0], (v[mid - 1] + v[mid]) / 2.0)
            };
            let (a, b) = (cell(&mut shares[0]), cell(&mut shares[1]));
            let on = if joins { "on" } else { "off" };
            println!("| {logged} | {on} | {a} | {b} | {starved} of {n} | {refused} of {n} |");
        }
    }
}

#[test]
fn full_baselines_refuse_puts_and_recover_room_from_deletes() {
    run(Variant::BPlusTree, Values { logged: 0.0 }, 7);
    run(Variant::BdTree, Values { logged: 0.1 }, 8);
}

/// Writers racing into a full device: each is refused in the end, none
/// poisons the store, and every acknowledged put is there, before and
/// after a reopen.
#[test]
fn concurrent_writers_fill_the_device_without_poisoning_it() {
    // More writers than cores, so writes are admitted together while
    // others reclaim; value-log records make them take zones of their own.
    for writers in [3u64, 5] {
        fill_concurrently(writers, 100 * writers, SyncMode::Never);
    }
}

/// The same with every write synced, so the writers go through write
/// groups and a leader is refused or admitted for each batch it carries.
#[test]
fn grouped_writers_fill_the_device_without_poisoning_it() {
    for writers in [3u64, 5] {
        fill_concurrently(writers, 7 + 100 * writers, SyncMode::Always);
    }
}

/// Writers that fill, delete and fill again together. It once failed now
/// and then (a few cases in a few hundred): a flusher found no free zone
/// and the store was poisoned, because inserting evicted batches into the
/// leaves (by writers, and by the checkpoint of a refused writer's
/// reclamation) could take the zones kept for reclamation; and with three
/// writers a delete was refused because other deletes were in flight.
#[test]
fn concurrent_deletes_on_a_full_device_are_admitted_and_lose_nothing() {
    for writers in [2u64, 3, 4] {
        fill_and_delete_concurrently(writers, 1000 + 100 * writers, SyncMode::Never);
    }
}

/// The same through write groups (every write synced).
#[test]
fn grouped_deletes_on_a_full_device_are_admitted_and_lose_nothing() {
    for writers in [2u64, 4] {
        fill_and_delete_concurrently(writers, 2000 + 100 * writers, SyncMode::Always);
    }
}

/// What one writer of [`fill_and_delete_concurrently`] leaves: its
/// acknowledged pairs and the keys it deleted.
type Phase = (Model, Vec<Vec<u8>>);

/// Writers fill the device together until each is refused, then delete
/// two thirds of their keys together, then put again until refused: no
/// delete may be refused, nothing may poison the store, and every
/// acknowledged write must read back, also after a reopen. (How much the
/// second round takes is not checked: a writer stops at its first refusal,
/// and the deletes' room returns only as their leaves merge, so with
/// writers admitted together a round can end before it takes any.)
fn fill_and_delete_concurrently(writers: u64, seed: u64, sync: SyncMode) {
    let dev: Arc<dyn ZonedDevice> =
        Arc::new(EmulatedZonedDevice::format(MemDevice::new(), common::geometry(14)).unwrap());
    let db = Arc::new(open_with(&dev, &common::small_opts(Variant::Zkv), sync));
    let phase = |round: u64| -> Vec<std::thread::JoinHandle<Phase>> {
        (0..writers)
            .map(|t| {
                let db = db.clone();
                std::thread::spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(seed + 10 * round + t);
                    let mut acked = Model::new();
                    fill(&db, &mut acked, &mut rng, Values { logged: 0.1 }, round);
                    let mut deleted = Vec::new();
                    if round == 0 {
                        let keys: Vec<Vec<u8>> = acked.keys().cloned().collect();
                        for k in keys.into_iter().filter(|_| rng.gen_bool(2.0 / 3.0)) {
                            db.delete(&k)
                                .unwrap_or_else(|e| panic!("writer {t}: a delete refused: {e}"));
                            acked.remove(&k);
                            deleted.push(k);
                        }
                    }
                    (acked, deleted)
                })
            })
            .collect()
    };
    let mut model = Model::new();
    for round in 0..2 {
        for w in phase(round) {
            let (acked, deleted) = w.join().unwrap();
            for k in deleted {
                model.remove(&k);
            }
            model.extend(acked);
        }
        assert_matches(&db, &model, "after a round");
    }
    let db = Arc::into_inner(db).unwrap();
    drop(db);
    let db = open(&dev, &common::small_opts(Variant::Zkv));
    assert_matches(&db, &model, "reopened");
}

fn fill_concurrently(writers: u64, seed: u64, sync: SyncMode) {
    let dev: Arc<dyn ZonedDevice> =
        Arc::new(EmulatedZonedDevice::format(MemDevice::new(), common::geometry(14)).unwrap());
    let db = Arc::new(open_with(&dev, &common::small_opts(Variant::Zkv), sync));
    let writers: Vec<_> = (0..writers)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(seed + t);
                let mut acked = Model::new();
                loop {
                    let k = format!("{t}-{:012}", rng.gen_range(0..u64::MAX / 2)).into_bytes();
                    let v = value(&mut rng, Values { logged: 0.05 }, t);
                    match db.put(&k, &v) {
                        Ok(()) => {
                            acked.insert(k, v);
                        }
                        Err(e) => {
                            assert!(matches!(e, Error::StoreFull { .. }), "writer {t}: {e}");
                            return acked;
                        }
                    }
                }
            })
        })
        .collect();
    let mut model = Model::new();
    for w in writers {
        model.extend(w.join().unwrap());
    }
    assert_matches(&db, &model, "full");
    let db = Arc::into_inner(db).unwrap();
    drop(db);
    let db = open(&dev, &common::small_opts(Variant::Zkv));
    assert_matches(&db, &model, "reopened");
}
