//! YCSB D's reads against an LSM store whose newest records sit in L0 or
//! have been compacted into L1: how the level shape a load ends in moves
//! the block cache's hit rate under the `latest` distribution.
//!
//! ```text
//! cargo run --release -p ferrite-bench --example latest_reads -- DIR RECORDS [TAIL]
//! ```
//! Loads `RECORDS` records (16-byte keys, 100-byte values, in record
//! order, as `ferrite bench` loads) into a new store in `DIR`, settles it
//! and compacts L0 away; with `TAIL`, then loads `TAIL` more records and
//! flushes them, so they stay in L0 while fewer tables than the trigger.
//! Then runs 20000 warm-up and 3 × 100000 measured operations of YCSB D
//! (95% reads of `latest` records, 5% inserts) with a cache of 10% of the
//! raw pairs, and prints the level shape and, per round, the rate, device
//! reads per operation and the block cache's hit ratio. Removes `DIR`.

use std::time::Instant;

use ferrite::internals::Instrumented;
use ferrite::{KvStore, Options, SyncMode, WriteBatch};
use ferrite_bench::distribution::{Chooser, Latest, ZIPFIAN_THETA};
use ferrite_bench::keyset::{KeySet, KeySpec};
use ferrite_lsm::{LsmOptions, LsmStore};
use rand::{Rng, SeedableRng};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: latest_reads DIR RECORDS [TAIL]";
    let dir = std::path::PathBuf::from(args.first().ok_or_else(|| anyhow::anyhow!(usage))?);
    let records: u64 = args.get(1).ok_or_else(|| anyhow::anyhow!(usage))?.parse()?;
    let tail: u64 = args.get(2).map_or(Ok(0), |a| a.parse())?;
    anyhow::ensure!(
        !dir.exists(),
        "{} exists; give a new directory",
        dir.display()
    );
    let keys = KeySet::new(KeySpec::Uniform16, 7)?;
    // 10% of the raw pairs, as `ferrite bench --cache-ratio 0.1` sizes it.
    let cache_bytes = (records + tail) * 116 / 10;
    let opts = Options::default()
        .sync(SyncMode::Never)
        .cache_bytes(cache_bytes);
    let db = LsmStore::open(&dir, &opts, LsmOptions::default())?;
    let (mut k, value) = (Vec::new(), vec![7u8; 100]);
    let load = |from: u64, to: u64, k: &mut Vec<u8>| -> anyhow::Result<()> {
        let mut b = WriteBatch::new();
        for i in from..to {
            keys.key(i, k);
            b.put(k, &value)?;
            if b.len() == 1000 || i + 1 == to {
                db.write_batch(&b)?;
                b.clear();
            }
        }
        Ok(())
    };
    let t = Instant::now();
    load(0, records, &mut k)?;
    db.settle()?;
    db.compact_l0()?;
    if tail > 0 {
        load(records, records + tail, &mut k)?;
        db.flush()?;
    }
    println!(
        "loaded {} records in {:.1} s",
        records + tail,
        t.elapsed().as_secs_f64()
    );
    let stats = db.stats();
    for name in [
        "flushes",
        "compactions",
        "trivial_moves",
        "write_slowdowns",
        "write_stalls",
    ] {
        print!("{name} {} ", stats.field(name).unwrap_or(0.0));
    }
    println!();
    for (l, level) in db.report().levels.iter().enumerate() {
        if level.tables > 0 {
            println!("L{l}: {} tables, {} MiB", level.tables, level.bytes >> 20);
        }
    }
    let mut rng = rand::rngs::SmallRng::seed_from_u64(5);
    let mut latest = Latest::new(ZIPFIAN_THETA);
    let mut count = records + tail;
    for (round, ops) in [20_000u64, 100_000, 100_000, 100_000]
        .into_iter()
        .enumerate()
    {
        let before = db.stats();
        let t = Instant::now();
        for _ in 0..ops {
            if rng.gen_bool(0.05) {
                keys.key(count, &mut k);
                db.put(&k, &value)?;
                count += 1;
            } else {
                keys.key(latest.next(&mut rng, count), &mut k);
                anyhow::ensure!(db.get(&k)?.is_some(), "a loaded key is missing");
            }
        }
        let after = db.stats();
        let hits = after.cache.hits - before.cache.hits;
        let misses = after.cache.misses - before.cache.misses;
        println!(
            "{}: {:.1} kops/s, device reads/op {:.3}, cache hit ratio {:.3}",
            if round == 0 {
                "warm-up".to_string()
            } else {
                format!("round {round}")
            },
            ops as f64 / t.elapsed().as_secs_f64() / 1e3,
            (after.device.reads - before.device.reads) as f64 / ops as f64,
            hits as f64 / (hits + misses).max(1) as f64,
        );
    }
    drop(db);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
