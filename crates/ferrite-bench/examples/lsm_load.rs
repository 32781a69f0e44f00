//! One variant's load as `ferrite repro swiftkv` runs it, alone in the
//! process, for a profiler: where a load's time goes with sparse or
//! learned index blocks.
//!
//! ```text
//! cargo run --release -p ferrite-bench --example lsm_load -- DIR KEY_BYTES VALUE_BYTES RECORDS sparse|learned
//! ```
//! `KEY_BYTES` is 8 (uniform 64-bit keys) or 16 (uniform 16-byte keys).
//! Sizes memtables, tables and L1 from the data size as the repro does
//! (`sized_lsm_options`),
//! writes the records in key-set order in batches of 256 with no syncs,
//! flushes, waits for compactions, and prints the seconds, the device's
//! bytes written per user byte and the store's flush and compaction
//! counts. Removes `DIR`.

use std::time::Instant;

use ferrite::{KvStore, Options, SyncMode, WriteBatch};
use ferrite_bench::keyset::{KeySet, KeySpec};
use ferrite_bench::repro::sized_lsm_options;
use ferrite_lsm::{IndexKind, LsmStore};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: lsm_load DIR KEY_BYTES VALUE_BYTES RECORDS sparse|learned";
    anyhow::ensure!(args.len() == 5, usage);
    let dir = std::path::PathBuf::from(&args[0]);
    let key_bytes: u64 = args[1].parse()?;
    let value_bytes: usize = args[2].parse()?;
    let records: u64 = args[3].parse()?;
    let index = match args[4].as_str() {
        "sparse" => IndexKind::Sparse,
        "learned" => IndexKind::LEARNED,
        _ => anyhow::bail!(usage),
    };
    let spec = match key_bytes {
        8 => KeySpec::UniformU64,
        16 => KeySpec::Uniform16,
        _ => anyhow::bail!("KEY_BYTES must be 8 or 16"),
    };
    anyhow::ensure!(
        !dir.exists(),
        "{} exists; give a new directory",
        dir.display()
    );
    let keys = KeySet::new(spec, 7)?;
    let data = records * (key_bytes + value_bytes as u64);
    let lsm = sized_lsm_options(index, data);
    let opts = Options {
        sync: SyncMode::Never,
        cache_bytes: (data / 10).max(1 << 20),
        ..Options::default()
    };
    let db = LsmStore::open(&dir, &opts, lsm)?;
    let (mut k, mut v) = (Vec::new(), Vec::new());
    let t = Instant::now();
    let mut b = WriteBatch::new();
    for i in 0..records {
        keys.key(i, &mut k);
        v.clear();
        v.extend(i.to_le_bytes().iter().cycle().take(value_bytes));
        b.put(&k, &v)?;
        if b.len() == 256 || i + 1 == records {
            db.write_batch(&b)?;
            b.clear();
        }
    }
    db.flush()?;
    db.wait_for_compactions()?;
    let secs = t.elapsed().as_secs_f64();
    let stats = db.stats();
    println!(
        "{} {records} records of {key_bytes}+{value_bytes} bytes in {secs:.2} s ({:.0} k/s), write amplification {:.2}",
        args[4],
        records as f64 / secs / 1e3,
        stats.write_amplification().unwrap_or(f64::NAN),
    );
    for name in ["flushes", "compactions", "trivial_moves", "write_stalls"] {
        print!("{name} {} ", stats.extra(name).unwrap_or(0.0));
    }
    println!();
    drop(db);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
