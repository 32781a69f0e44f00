//! `keyspaces`: what a named keyspace costs against the default key
//! space, and how long dropping a large one takes, on btree, lsm and zkv.
//!
//! Two stores of the same engine and options hold the same records: one
//! in its default key space, the other in a named keyspace (beside a
//! small second keyspace and a few default keys). Random gets and random
//! overwrites run on each in alternating rounds; the ratios of their
//! medians say what the keyspace's 7-byte prefix and its drop gate cost.
//! Then the large keyspace is dropped: the drop's own latency, the
//! background removal of its records, and, for comparison, a range
//! delete of the same records from the default key space of the other
//! store, which is what a store without keyspaces would do.

use std::path::Path;
use std::time::Instant;

use ferrite::{Config, EngineKind, Keyspace, KeyspaceBatch, Store, SyncMode, WriteBatch};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::driver::{fresh_dir, store_err, Metrics, Report, Study, Table};
use super::ReproContext;
use crate::error::{BenchError, Result};
use crate::keyset::pseudo_random_bytes;
use crate::report::median;

pub struct KeyspacesRepro;

const KEY_BYTES: usize = 16;
const VALUE_BYTES: usize = 100;
const CACHE_BYTES: u64 = 256 << 20;
const ROUNDS: usize = 3;
/// Pairs in the small keyspace and in the default space beside the big
/// keyspace, checked after the drop.
const NEIGHBOURS: u64 = 1000;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct EngineRun {
    pub engine: String,
    pub records: u64,
    pub load_default_secs: f64,
    pub load_keyspace_secs: f64,
    /// Operations per second in each round.
    pub get_default: Vec<f64>,
    pub get_keyspace: Vec<f64>,
    pub put_default: Vec<f64>,
    pub put_keyspace: Vec<f64>,
    pub drop_micros: f64,
    pub reclaim_secs: f64,
    pub keys_removed: u64,
    pub delete_range_secs: f64,
    /// Pairs the neighbours held after the removal (expected: all).
    pub neighbours_left: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Results {
    pub records: u64,
    pub ops_per_round: u64,
    pub runs: Vec<EngineRun>,
}

fn key(i: u64) -> Vec<u8> {
    format!("rec{i:013}").into_bytes()
}

fn value(i: u64, round: u64, buf: &mut Vec<u8>) {
    pseudo_random_bytes(i ^ (round << 40), VALUE_BYTES, buf);
}

fn invalid(what: String) -> BenchError {
    BenchError::Check(what)
}

/// The key space a round works in: a store's default one, or a named
/// keyspace.
#[derive(Clone, Copy)]
enum Space<'a> {
    Default(&'a Store),
    Named(&'a Keyspace<'a>),
}

impl Space<'_> {
    fn get(self, k: &[u8]) -> ferrite::Result<Option<Vec<u8>>> {
        match self {
            Space::Default(s) => s.get(k),
            Space::Named(ks) => ks.get(k),
        }
    }

    fn put(self, k: &[u8], v: &[u8]) -> ferrite::Result<()> {
        match self {
            Space::Default(s) => s.put(k, v),
            Space::Named(ks) => ks.put(k, v),
        }
    }

    fn add(self, b: &mut WriteBatch, k: &[u8], v: &[u8]) -> ferrite::Result<()> {
        match self {
            Space::Default(_) => b.put(k, v).map(drop),
            Space::Named(ks) => b.put_in(ks, k, v).map(drop),
        }
    }
}

/// Random gets of existing keys, per second.
fn gets(space: Space<'_>, records: u64, ops: u64, seed: u64) -> Result<f64> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let t = Instant::now();
    for _ in 0..ops {
        let k = key(rng.gen_range(0..records));
        if space.get(&k).map_err(store_err("get"))?.is_none() {
            return Err(invalid(format!("{} missing", String::from_utf8_lossy(&k))));
        }
    }
    Ok(ops as f64 / t.elapsed().as_secs_f64())
}

/// Random overwrites, per second.
fn puts(space: Space<'_>, records: u64, ops: u64, seed: u64) -> Result<f64> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut v = Vec::new();
    let t = Instant::now();
    for n in 0..ops {
        let i = rng.gen_range(0..records);
        value(i, seed + n, &mut v);
        space.put(&key(i), &v).map_err(store_err("put"))?;
    }
    Ok(ops as f64 / t.elapsed().as_secs_f64())
}

/// Loads `records` pairs into `space` of `db` in batches of 1000, the
/// store at `dir`.
fn load(db: &Store, dir: &Path, space: Space<'_>, records: u64) -> Result<f64> {
    let t = Instant::now();
    let mut bytes = 0u64;
    let mut b = WriteBatch::new();
    let mut v = Vec::new();
    for i in 0..records {
        value(i, 0, &mut v);
        let k = key(i);
        space.add(&mut b, &k, &v).map_err(store_err("load"))?;
        bytes += (k.len() + v.len()) as u64;
        if b.len() == 1000 {
            db.write(&b).map_err(store_err("load"))?;
            b.clear();
        }
    }
    if !b.is_empty() {
        db.write(&b).map_err(store_err("load"))?;
    }
    db.flush().map_err(store_err("load"))?;
    crate::user_data::declare(dir, bytes);
    Ok(t.elapsed().as_secs_f64())
}

fn run_engine(ctx: &ReproContext, kind: EngineKind, records: u64, ops: u64) -> Result<EngineRun> {
    let name = kind.name();
    let err = store_err(name);
    let root = fresh_dir(&ctx.work_dir.join("keyspaces").join(name))?;
    let config = Config::builder(kind)
        .cache_bytes(CACHE_BYTES)
        .sync(SyncMode::Never)
        .build()
        .map_err(&err)?;
    let plain = config.open(root.join("default")).map_err(&err)?;
    let spaced = config.open(root.join("keyspace")).map_err(&err)?;
    let mut run = EngineRun {
        engine: name.into(),
        records,
        ..EngineRun::default()
    };
    run.load_default_secs = load(
        &plain,
        &root.join("default"),
        Space::Default(&plain),
        records,
    )?;
    {
        let data = spaced.keyspace("data").map_err(&err)?;
        let other = spaced.keyspace("other").map_err(&err)?;
        for i in 0..NEIGHBOURS {
            other.put(key(i), b"other").map_err(&err)?;
            spaced.put(key(i), b"default").map_err(&err)?;
        }
        run.load_keyspace_secs = load(
            &spaced,
            &root.join("keyspace"),
            Space::Named(&data),
            records,
        )?;
        for round in 0..ROUNDS {
            let seed = round as u64 + 1;
            // Alternate which goes first, so neither always runs warmer.
            for first in [round % 2 == 0, round % 2 != 0] {
                if first {
                    run.get_default
                        .push(gets(Space::Default(&plain), records, ops, seed)?);
                    run.put_default
                        .push(puts(Space::Default(&plain), records, ops, seed)?);
                } else {
                    run.get_keyspace
                        .push(gets(Space::Named(&data), records, ops, seed)?);
                    run.put_keyspace
                        .push(puts(Space::Named(&data), records, ops, seed)?);
                }
            }
        }
    }
    let t = Instant::now();
    if !spaced.drop_keyspace("data").map_err(&err)? {
        return Err(invalid("the keyspace to drop was missing".into()));
    }
    run.drop_micros = t.elapsed().as_secs_f64() * 1e6;
    spaced.wait_for_dropped_keyspaces();
    run.reclaim_secs = t.elapsed().as_secs_f64();
    run.keys_removed = spaced.dropped_keys_removed();
    if spaced.dropped_keyspaces_pending() != 0 {
        return Err(invalid("the dropped keyspace's removal stopped".into()));
    }
    let other = spaced.keyspace("other").map_err(&err)?;
    run.neighbours_left = other.iter().count() as u64 + spaced.iter().count() as u64;
    let t = Instant::now();
    plain.delete_range(key(0)..key(records)).map_err(&err)?;
    run.delete_range_secs = t.elapsed().as_secs_f64();
    plain.close().map_err(&err)?;
    spaced.close().map_err(&err)?;
    let _ = std::fs::remove_dir_all(&root);
    Ok(run)
}

fn ratio(a: &[f64], b: &[f64]) -> f64 {
    median(a) / median(b).max(1e-9)
}

sizes! {
    struct Sizes {
        records: u64 = (20_000, 400_000, 2_000_000),
        /// Operations per round.
        ops: u64 = (20_000, 200_000, 500_000),
    }
}

claims! {
    struct Claims {
        max_drop_ms <= 50, "issue: dropping a keyspace is quick whatever its size";
        min_get_ratio >= 0.9, "a keyspace costs its 7-byte prefix and little else";
        min_put_ratio >= 0.9, "a keyspace costs its 7-byte prefix and little else";
    }
}

impl Study for KeyspacesRepro {
    type Results = Results;
    type Claims = Claims;

    const NAME: &'static str = "keyspaces";

    const SUMMARY: &'static str = "named keyspaces against the default key space (random gets and overwrites, alternating rounds), and dropping a large keyspace: its latency and background removal";

    type Sizes = Sizes;

    fn measure(&self, ctx: &ReproContext, Sizes { records, ops }: Sizes) -> Result<Results> {
        let mut runs = Vec::new();
        for kind in [EngineKind::Btree, EngineKind::Lsm, EngineKind::Zkv] {
            runs.push(run_engine(ctx, kind, records, ops)?);
        }
        Ok(Results {
            records,
            ops_per_round: ops,
            runs,
        })
    }

    fn params(&self, _: &Results) -> serde_json::Value {
        json!({
            "rounds": ROUNDS,
            "key_bytes": KEY_BYTES,
            "value_bytes": VALUE_BYTES,
            "cache_bytes": CACHE_BYTES,
            "sync": "never",
        })
    }

    fn metrics(&self, r: &Results, c: &mut Claims) -> Metrics {
        let mut m = Metrics::new();
        let (mut drop_ms, mut get, mut put) = (0f64, f64::MAX, f64::MAX);
        for run in &r.runs {
            let e = &run.engine;
            let (g, p) = (
                ratio(&run.get_keyspace, &run.get_default),
                ratio(&run.put_keyspace, &run.put_default),
            );
            m.set(format!("{e}_get_ratio"), g);
            m.set(format!("{e}_put_ratio"), p);
            m.set(format!("{e}_drop_ms"), run.drop_micros / 1e3);
            m.set(format!("{e}_reclaim_secs"), run.reclaim_secs);
            m.set(format!("{e}_delete_range_secs"), run.delete_range_secs);
            m.set(format!("{e}_neighbours_left"), run.neighbours_left as f64);
            drop_ms = drop_ms.max(run.drop_micros / 1e3);
            get = get.min(g);
            put = put.min(p);
        }
        c.max_drop_ms.set(drop_ms);
        c.min_get_ratio.set(get);
        c.min_put_ratio.set(put);
        m
    }

    fn render(&self, r: &Results, _: &Metrics, doc: &mut Report) -> Result<()> {
        doc.h1("Named keyspaces");
        doc.text(format!(
            "Two stores of each engine hold the same {} records ({KEY_BYTES}-byte keys, \
             {VALUE_BYTES}-byte incompressible values, loaded in batches of 1000; cache {} MiB, \
             durability `never`): one in its default key space, one in a named keyspace (beside \
             a keyspace and default keys of {NEIGHBOURS} pairs each). {ROUNDS} rounds of {} \
             random gets, then {} random overwrites, run on each store in turn, the order \
             alternating; the table gives the medians. Then the big keyspace is dropped \
             (`Store::drop_keyspace`, timed to its return), its records removed in the \
             background (timed until `wait_for_dropped_keyspaces` returns), and the same \
             records range-deleted from the other store's default key space.",
            r.records,
            CACHE_BYTES >> 20,
            r.ops_per_round,
            r.ops_per_round
        ));
        let mut t = Table::new([
            "engine",
            "load default / keyspace",
            "gets/s default / keyspace (ratio)",
            "puts/s default / keyspace (ratio)",
            "drop",
            "background removal",
            "range delete, default space",
            "neighbours kept",
        ]);
        for run in &r.runs {
            t.row([
                run.engine.clone(),
                format!(
                    "{:.2} / {:.2} s",
                    run.load_default_secs, run.load_keyspace_secs
                ),
                format!(
                    "{:.0}k / {:.0}k ({:.3})",
                    median(&run.get_default) / 1e3,
                    median(&run.get_keyspace) / 1e3,
                    ratio(&run.get_keyspace, &run.get_default)
                ),
                format!(
                    "{:.0}k / {:.0}k ({:.3})",
                    median(&run.put_default) / 1e3,
                    median(&run.put_keyspace) / 1e3,
                    ratio(&run.put_keyspace, &run.put_default)
                ),
                format!("{:.0} µs", run.drop_micros),
                format!(
                    "{:.2} s ({} keys one by one)",
                    run.reclaim_secs, run.keys_removed
                ),
                format!("{:.2} s", run.delete_range_secs),
                format!("{} of {}", run.neighbours_left, 2 * NEIGHBOURS),
            ]);
        }
        doc.table(&t);
        doc.text(
            "The LSM-tree removes a dropped keyspace with one range tombstone, so its \
             background removal counts no keys; the B+tree and ZKV delete the records in \
             batches of 1024.",
        );
        Ok(())
    }
}
