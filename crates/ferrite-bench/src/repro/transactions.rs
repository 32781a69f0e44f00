//! `transactions`: read-modify-write transactions (read two keys, write
//! both) on ferrite's btree, lsm and zkv against fjall's optimistic
//! transactions and RocksDB's `OptimisticTransactionDB`, uniform and
//! zipfian keys, one and two threads; and each ferrite engine's
//! transactions against the same reads and writes as a plain batch.
//!
//! Every store gets the same records, the same cache budget (larger than
//! the data: this measures the transaction path, not the device), and the
//! same durability (the log buffered in the store, no sync per commit).
//! Variants run side by side in chunks (`alternate`); a figure is the
//! median of a variant's chunks. A conflicting commit is run again until
//! it commits; throughput counts commits, and the conflict rate is
//! conflicts per commit.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use ferrite::EngineKind;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::driver::{alternate, fresh_dir, store_err, Figure, Metrics, Report, Study, Table};
use super::ReproContext;
use crate::adapter::tx_target::{FerriteMode, FerriteTx, TxTarget};
use crate::distribution::{Chooser, ScrambledZipfian, Uniform};
use crate::error::Result;
use crate::report::median;

pub struct TransactionsRepro;

/// One store's chunks in one cell (distribution × threads).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Cell {
    pub dist: String,
    pub threads: usize,
    pub store: String,
    /// Commits per second of each chunk, in thousands.
    pub kops: Vec<f64>,
    pub commits: u64,
    pub conflicts: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Results {
    pub records: u64,
    pub value_bytes: usize,
    pub cache_bytes: u64,
    pub chunk_ops: u64,
    pub chunks: u64,
    pub stores: Vec<String>,
    pub cells: Vec<Cell>,
}

const VALUE_BYTES: usize = 100;
const DISTS: [&str; 2] = ["uniform", "zipfian"];
const THREADS: [usize; 2] = [1, 2];
const PEERS: [&str; 2] = ["fjall-tx", "rocksdb-tx"];

fn key(i: u64) -> Vec<u8> {
    format!("user{i:012}").into_bytes()
}

/// The next value of a record: its first 8 bytes count the updates.
fn bump(old: Option<&[u8]>) -> Vec<u8> {
    let n = old
        .and_then(|v| v.get(..8))
        .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
    let mut v = (n + 1).to_le_bytes().to_vec();
    v.resize(VALUE_BYTES, b'v');
    v
}

/// Every store, with its directory.
fn targets(ctx: &ReproContext, cache: u64) -> Result<Vec<(Box<dyn TxTarget>, PathBuf)>> {
    let root = ctx.work_dir.join("transactions");
    let mut out: Vec<(Box<dyn TxTarget>, PathBuf)> = Vec::new();
    for kind in [EngineKind::Btree, EngineKind::Lsm, EngineKind::Zkv] {
        for mode in [FerriteMode::Transaction, FerriteMode::PlainBatch] {
            let name = format!("{kind}-{mode:?}");
            let dir = fresh_dir(&root.join(&name))?;
            let t = FerriteTx::open(&dir, kind, cache, mode).map_err(store_err(&name))?;
            out.push((Box::new(t), dir));
        }
    }
    #[cfg(feature = "fjall")]
    {
        let dir = fresh_dir(&root.join("fjall"))?;
        let t =
            crate::adapter::tx_target::FjallTx::open(&dir, cache).map_err(store_err("fjall"))?;
        out.push((Box::new(t), dir));
    }
    #[cfg(feature = "rocksdb")]
    {
        let dir = fresh_dir(&root.join("rocksdb"))?;
        let t =
            crate::adapter::tx_target::RocksTx::open(&dir, cache).map_err(store_err("rocksdb"))?;
        out.push((Box::new(t), dir));
    }
    Ok(out)
}

/// Runs `ops` read-modify-writes on `t` from `threads` threads; returns
/// commits per second and the conflicts met.
fn run_chunk(
    t: &dyn TxTarget,
    dist: &str,
    threads: usize,
    ops: u64,
    records: u64,
    seed: u64,
) -> Result<(f64, u64)> {
    let conflicts = AtomicU64::new(0);
    let per = ops / threads as u64;
    let start = Instant::now();
    std::thread::scope(|s| -> Result<()> {
        let handles: Vec<_> = (0..threads)
            .map(|th| {
                let conflicts = &conflicts;
                s.spawn(move || -> Result<()> {
                    let mut rng = SmallRng::seed_from_u64(seed ^ ((th as u64 + 1) * 0x9E37));
                    let mut chooser: Box<dyn Chooser> = if dist == "zipfian" {
                        Box::new(ScrambledZipfian::new(records))
                    } else {
                        Box::new(Uniform)
                    };
                    for _ in 0..per {
                        let a = chooser.next(&mut rng, records);
                        let mut b = chooser.next(&mut rng, records);
                        while b == a {
                            b = rng.gen_range(0..records);
                        }
                        let (ka, kb) = (key(a), key(b));
                        while !t.rmw(&ka, &kb, &bump).map_err(store_err(&t.name()))? {
                            conflicts.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join().map_err(|_| {
                crate::error::BenchError::Config("a client thread panicked".into())
            })??;
        }
        Ok(())
    })?;
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    Ok(((per * threads as u64) as f64 / secs, conflicts.into_inner()))
}

sizes! {
    struct Sizes {
        records: u64 = (2_000, 200_000, 1_000_000),
        chunk_ops: u64 = (400, 20_000, 50_000),
        chunks: u64 = (2, 5, 7),
    }
}

claims! {
    struct Claims {
        btree_vs_best_peer >= 1.0, "issue: ≥ 1.0× the faster peer";
        lsm_vs_best_peer >= 1.0, "issue: ≥ 1.0× the faster peer";
        btree_tx_vs_batch >= 0.8, "issue: ≥ 0.8× plain batches";
        lsm_tx_vs_batch >= 0.8, "issue: ≥ 0.8× plain batches";
    }
}

impl Study for TransactionsRepro {
    type Results = Results;
    type Claims = Claims;

    const NAME: &'static str = "transactions";

    const SUMMARY: &'static str = "read-modify-write transactions (read 2 keys, write both) on btree/lsm/zkv vs fjall and RocksDB optimistic transactions, uniform and zipfian, 1 and 2 threads; and vs plain batches";

    type Sizes = Sizes;

    fn measure(&self, ctx: &ReproContext, s: Sizes) -> Result<Results> {
        let Sizes {
            records,
            chunk_ops,
            chunks,
        } = s;
        // Four times the user bytes: room for every store's pages and
        // overhead (the B+tree's pages after an ascending load are half
        // full, twice the user bytes), so this measures the transaction
        // path, not the device.
        let cache = (records * (16 + VALUE_BYTES as u64) * 4).max(8 << 20);
        let (stores, dirs): (Vec<_>, Vec<_>) = targets(ctx, cache)?.into_iter().unzip();
        for (t, dir) in stores.iter().zip(&dirs) {
            let bytes = std::cell::Cell::new(0u64);
            t.load(
                &mut (0..records)
                    .map(|i| (key(i), bump(None)))
                    .inspect(|(k, v)| bytes.set(bytes.get() + (k.len() + v.len()) as u64)),
            )
            .map_err(store_err(&t.name()))?;
            crate::user_data::declare(dir, bytes.get());
        }
        let mut cells = Vec::new();
        for dist in DISTS {
            for threads in THREADS {
                let mut mine: Vec<Cell> = stores
                    .iter()
                    .map(|t| Cell {
                        dist: dist.into(),
                        threads,
                        store: t.name(),
                        ..Cell::default()
                    })
                    .collect();
                alternate(stores.len(), chunks, |v, c| {
                    let (kops, conflicts) =
                        run_chunk(&*stores[v], dist, threads, chunk_ops, records, c)?;
                    let cell = &mut mine[v];
                    cell.kops.push(kops / 1000.0);
                    cell.commits += chunk_ops / threads as u64 * threads as u64;
                    cell.conflicts += conflicts;
                    Ok(())
                })?;
                cells.extend(mine);
            }
        }
        Ok(Results {
            records,
            value_bytes: VALUE_BYTES,
            cache_bytes: cache,
            chunk_ops,
            chunks,
            stores: stores.iter().map(|t| t.name()).collect(),
            cells,
        })
    }

    fn params(&self, r: &Results) -> serde_json::Value {
        json!({
            "value_bytes": r.value_bytes,
            "key_bytes": 16,
            "cache_bytes": r.cache_bytes,
            "durability": "log buffered in the store, no sync per commit (ferrite never, fjall manual_journal_persist, RocksDB manual_wal_flush)",
            "stores": r.stores,
        })
    }

    fn metrics(&self, r: &Results, c: &mut Claims) -> Metrics {
        let mut m = Metrics::new();
        let kops = |dist: &str, threads: usize, store: &str| {
            r.cells
                .iter()
                .find(|c| c.dist == dist && c.threads == threads && c.store == store)
                .map(|c| median(&c.kops))
        };
        for c in &r.cells {
            let name = format!("{}_t{}_{}", c.dist, c.threads, c.store);
            m.set(format!("{name}_kops"), median(&c.kops));
            m.set(
                format!("{name}_conflict_rate"),
                c.conflicts as f64 / c.commits.max(1) as f64,
            );
        }
        // zkv's figures are reported beside; no claim judges them.
        let mut zkv = (
            Figure::named("zkv_vs_best_peer"),
            Figure::named("zkv_tx_vs_batch"),
        );
        for dist in DISTS {
            for threads in THREADS {
                let label = format!("{dist}_t{threads}");
                let best = PEERS
                    .iter()
                    .filter_map(|p| kops(dist, threads, p))
                    .fold(None, |a: Option<f64>, v| Some(a.map_or(v, |a| a.max(v))));
                for (engine, (vs_peer, vs_batch)) in [
                    (
                        "btree",
                        (&mut c.btree_vs_best_peer, &mut c.btree_tx_vs_batch),
                    ),
                    ("lsm", (&mut c.lsm_vs_best_peer, &mut c.lsm_tx_vs_batch)),
                    ("zkv", (&mut zkv.0, &mut zkv.1)),
                ] {
                    let tx = kops(dist, threads, &format!("{engine}-tx"));
                    let ratio = tx.zip(best).map(|(t, b)| t / b);
                    m.lowest(vs_peer, &label, ratio);
                    // Plain batches: one thread, where nothing conflicts.
                    if threads == 1 {
                        let batch = kops(dist, threads, &format!("{engine}-batch"));
                        m.lowest(vs_batch, dist, tx.zip(batch).map(|(t, b)| t / b));
                    }
                }
            }
        }
        m.add(&zkv.0);
        m.add(&zkv.1);
        m
    }

    fn render(&self, r: &Results, m: &Metrics, doc: &mut Report) -> Result<()> {
        doc.h1("Transactions");
        doc.text(format!(
            "Read-modify-write transactions: read two keys, write both (each value's first \
             8 bytes count its updates), {} records of 16-byte keys and {}-byte values, every \
             store with a cache of {:.0} MiB (four times the user bytes, so every store's \
             pages fit) and the same durability (the log buffered in the store, no sync per \
             commit: ferrite `never`, fjall `manual_journal_persist`, RocksDB \
             `manual_wal_flush`). ferrite runs \
             `Store::transaction` (`-tx`: snapshot reads; the commit re-reads both keys under \
             the engine's write lock unless no write came since the snapshot) and, as the reference, two gets and a plain batch \
             (`-batch`: no snapshot, no validation); fjall runs its `OptimisticTxDatabase`, \
             RocksDB its `OptimisticTransactionDB` with a snapshot and `get_for_update`. A \
             conflicting commit runs again until it commits. Variants run side by side, {} \
             chunks of {} transactions each, the first variant rotating; figures are medians \
             of the chunks, in thousands of commits per second.",
            r.records,
            r.value_bytes,
            r.cache_bytes as f64 / f64::from(1 << 20),
            r.chunks,
            r.chunk_ops,
        ));
        for dist in DISTS {
            for threads in THREADS {
                doc.h2(format!("{dist} keys, {threads} thread(s)"));
                let mut t = Table::new(["store", "k commits/s", "conflicts per commit"]);
                for c in r
                    .cells
                    .iter()
                    .filter(|c| c.dist == dist && c.threads == threads)
                {
                    t.row([
                        c.store.clone(),
                        format!("{:.1}", median(&c.kops)),
                        format!("{:.4}", c.conflicts as f64 / c.commits.max(1) as f64),
                    ]);
                }
                doc.table(&t);
            }
        }
        doc.h2("Ratios");
        let mut t = Table::new(["figure", "worst cell", "per cell"]);
        for name in [
            "btree_vs_best_peer",
            "lsm_vs_best_peer",
            "zkv_vs_best_peer",
            "btree_tx_vs_batch",
            "lsm_tx_vs_batch",
            "zkv_tx_vs_batch",
        ] {
            let per: Vec<String> = m
                .iter()
                .filter(|(k, _)| k.starts_with(&format!("{name}_")))
                .map(|(k, v)| format!("{}: {v:.2}", &k[name.len() + 1..]))
                .collect();
            t.row([
                name.to_string(),
                format!("{:.2}", m.value(name)),
                per.join(", "),
            ]);
        }
        doc.table(&t);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_counts_its_updates() {
        let v = bump(None);
        assert_eq!(v.len(), VALUE_BYTES);
        let v = bump(Some(&bump(Some(&v))));
        assert_eq!(u64::from_le_bytes(v[..8].try_into().unwrap()), 3);
    }
}
