//! What building a table costs per entry with a sparse and with a learned
//! index block: the CPU a flush or a compaction spends in the table
//! builder, apart from reading its inputs and writing its output.
//!
//! ```text
//! cargo run --release -p ferrite-bench --example table_build -- KEY_BYTES VALUE_BYTES [ROUNDS [VARIANT]]
//! ```
//! `VARIANT` (`sparse` or `learned`) builds only that variant, for a
//! profiler to see one builder at a time.
//! Builds 2M distinct random keys (sorted, held contiguously, as a
//! compaction reads them from blocks) into tables of about 4 MiB of data,
//! once per variant per round, alternating, and prints each variant's
//! fastest round in ns per entry, and the learned variant's training time
//! (model, thresholds; `BuiltTable::training_micros`) per entry. The
//! fastest round is reported because the other tenants of a shared host
//! only ever add time.

use std::time::Instant;

use ferrite_lsm::internals::TableBuilder;
use ferrite_lsm::IndexKind;
use rand::{Rng, SeedableRng};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: table_build KEY_BYTES VALUE_BYTES [ROUNDS [sparse|learned]]";
    let key_bytes: usize = args
        .first()
        .ok_or_else(|| anyhow::anyhow!(usage))?
        .parse()?;
    let value_bytes: usize = args.get(1).ok_or_else(|| anyhow::anyhow!(usage))?.parse()?;
    let rounds: usize = args.get(2).map_or(Ok(10), |a| a.parse())?;
    let only = args.get(3).map(String::as_str);
    anyhow::ensure!(
        matches!(only, None | Some("sparse" | "learned")),
        "VARIANT must be sparse or learned"
    );
    anyhow::ensure!((1..=16).contains(&key_bytes), "KEY_BYTES must be 1 to 16");
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let mut nums: Vec<u128> = (0..2_000_000).map(|_| rng.gen()).collect();
    nums.sort_unstable();
    let flat: Vec<u8> = nums
        .iter()
        .flat_map(|x| x.to_be_bytes().into_iter().take(key_bytes))
        .collect();
    let mut keys: Vec<&[u8]> = flat.chunks(key_bytes).collect();
    keys.dedup();
    let value = vec![7u8; value_bytes];
    let per_table = ((4 << 20) / (key_bytes + value_bytes + 8)).max(1);
    let variants = [
        ("sparse", IndexKind::Sparse),
        ("learned", IndexKind::LEARNED),
    ];
    let mut best = [(f64::MAX, f64::MAX); 2];
    for _ in 0..rounds {
        for (slot, (name, kind)) in best.iter_mut().zip(variants) {
            if only.is_some_and(|o| o != name) {
                continue;
            }
            let started = Instant::now();
            let mut training_micros = 0;
            // One builder for all tables, as a compaction cuts them.
            let mut b = TableBuilder::new(kind, 10, 1);
            for chunk in keys.chunks(per_table) {
                for k in chunk {
                    b.add(k, Some(&value));
                }
                if let Some(t) = b.finish() {
                    training_micros += t.training_micros;
                }
            }
            let n = keys.len() as f64;
            slot.0 = slot.0.min(started.elapsed().as_nanos() as f64 / n);
            slot.1 = slot.1.min(training_micros as f64 * 1e3 / n);
        }
    }
    println!(
        "{} entries of {key_bytes}+{value_bytes} bytes, {per_table} per table, fastest of {rounds} rounds",
        keys.len()
    );
    for ((name, _), (ns, training)) in variants.iter().zip(best) {
        if only.is_some_and(|o| o != *name) {
            continue;
        }
        println!("{name:8} {ns:6.1} ns/entry (training {training:.1})");
    }
    Ok(())
}
