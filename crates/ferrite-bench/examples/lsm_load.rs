//! Loads as `ferrite repro swiftkv` does, for a profiler or a quick
//! side-by-side: where a load's time goes with sparse or learned index
//! blocks, and what the two cost relative to each other.
//!
//! ```text
//! cargo run --release -p ferrite-bench --example lsm_load -- DIR KEY_BYTES VALUE_BYTES RECORDS VARIANTS [CHUNKS]
//! ```
//! `KEY_BYTES` is 8 (uniform 64-bit keys) or 16 (uniform 16-byte keys);
//! `VARIANTS` is `sparse`, `learned` or a comma-separated list of them.
//! Each store is sized from the data size as the repro sizes it (the
//! driver's `sized_lsm_options`). The records are written in key-set
//! order in batches of 256 with no syncs, in `CHUNKS` chunks (default 1)
//! that alternate between the stores; each chunk ends when its store has
//! settled (the last one after a flush). Prints per store the seconds,
//! the device's bytes written per user byte and the flush and compaction
//! counts, and for two stores the median over chunks of the second's
//! throughput over the first's. Removes `DIR`.

use std::time::Instant;

use ferrite::{KvStore, Options, SyncMode, WriteBatch};
use ferrite_bench::keyset::{KeySet, KeySpec};
use ferrite_bench::report::median;
use ferrite_bench::repro::driver::sized_lsm_options;
use ferrite_lsm::{IndexKind, LsmStore};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: lsm_load DIR KEY_BYTES VALUE_BYTES RECORDS sparse|learned[,...] [CHUNKS]";
    anyhow::ensure!(args.len() == 5 || args.len() == 6, usage);
    let dir = std::path::PathBuf::from(&args[0]);
    let key_bytes: u64 = args[1].parse()?;
    let value_bytes: usize = args[2].parse()?;
    let records: u64 = args[3].parse()?;
    let names: Vec<&str> = args[4].split(',').collect();
    let chunks: u64 = args.get(5).map_or(Ok(1), |c| c.parse())?.max(1);
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
    let opts = Options::default()
        .sync(SyncMode::Never)
        .cache_bytes((data / 10).max(1 << 20));
    let mut stores = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let index = match *name {
            "sparse" => IndexKind::Sparse,
            "learned" => IndexKind::LEARNED,
            _ => anyhow::bail!(usage),
        };
        let lsm = sized_lsm_options(index, data);
        stores.push(LsmStore::open(&dir.join(i.to_string()), &opts, lsm)?);
    }
    let mut secs = vec![Vec::new(); stores.len()];
    let (mut k, mut v) = (Vec::new(), Vec::new());
    let per_chunk = records.div_ceil(chunks);
    for c in 0..chunks {
        let (start, end) = (c * per_chunk, ((c + 1) * per_chunk).min(records));
        for step in 0..stores.len() {
            let s = (c as usize + step) % stores.len();
            let t = Instant::now();
            let mut b = WriteBatch::new();
            for i in start..end {
                keys.key(i, &mut k);
                v.clear();
                v.extend(i.to_le_bytes().iter().cycle().take(value_bytes));
                b.put(&k, &v)?;
                if b.len() == 256 || i + 1 == end {
                    stores[s].write_batch(&b)?;
                    b.clear();
                }
            }
            if end == records {
                stores[s].flush()?;
            }
            stores[s].wait_for_compactions()?;
            secs[s].push(t.elapsed().as_secs_f64());
        }
    }
    for ((name, db), secs) in names.iter().zip(&stores).zip(&secs) {
        let total: f64 = secs.iter().sum();
        let stats = db.stats();
        print!(
            "{name} {records} records of {key_bytes}+{value_bytes} bytes in {total:.2} s ({:.0} k/s), write amplification {:.2}; ",
            records as f64 / total / 1e3,
            stats.write_amplification().unwrap_or(f64::NAN),
        );
        for name in ["flushes", "compactions", "trivial_moves", "write_stalls"] {
            print!("{name} {} ", stats.field(name).unwrap_or(0.0));
        }
        println!();
    }
    if let [a, b] = secs.as_slice() {
        let ratios: Vec<f64> = a.iter().zip(b).map(|(a, b)| a / b).collect();
        println!(
            "{} / {} throughput, median of {chunks} side-by-side chunks: {:.3}",
            names[1],
            names[0],
            median(&ratios)
        );
    }
    drop(stores);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
