//! `ferrite-bench hit-path`: the B+tree's in-cache lookup taken apart.
//!
//! Loads a B+tree within its pool, reads every record once, then measures
//! a YCSB-C key sequence (scrambled Zipfian) part by part with
//! `BTreeStore::hit_path`: the whole `get`, the descent through routes and
//! through the page table, the table lookups, latches, page searches and
//! the value copy alone, in alternating rounds, medians reported.

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Args;
use ferrite::{KvStore, Options, SyncMode, WriteBatch};
use ferrite_bench::distribution::RequestDistribution;
use ferrite_bench::keyset::{KeySet, KeySpec, ValueSpec};
use ferrite_btree::{BTreeOptions, BTreeStore};
use rand::rngs::SmallRng;
use rand::SeedableRng;

#[derive(Args)]
pub struct HitPathArgs {
    /// Key set: sequential, uniform, ycsb, geolite2, or sosd:<path>.
    #[arg(long, default_value = "ycsb")]
    keys: String,
    /// Value size in bytes.
    #[arg(long, default_value = "100")]
    values: String,
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// Lookups per round.
    #[arg(long, default_value_t = 200_000)]
    ops: usize,
    #[arg(long, default_value_t = 9)]
    rounds: usize,
    /// Where the store is created (removed afterwards).
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Where the shared real data lives (for --keys geolite2).
    #[arg(long, default_value = "../shared/data")]
    data_dir: PathBuf,
    /// Write the result as JSON to this path.
    #[arg(long)]
    json: Option<PathBuf>,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Allow running a debug build (numbers are not comparable).
    #[arg(long)]
    allow_debug: bool,
}

pub fn run(a: HitPathArgs) -> anyhow::Result<()> {
    if cfg!(debug_assertions) && !a.allow_debug {
        bail!("a debug build's figures mean nothing: build with --release (or pass --allow-debug)");
    }
    let spec = KeySpec::parse(&a.keys, &a.data_dir)?;
    let keys = KeySet::new(spec, a.seed)?;
    let values = ValueSpec::parse(&a.values)?;
    let records = a.records.min(keys.capacity());
    let dir = tempfile::Builder::new()
        .prefix("ferrite-hit-path")
        .tempdir_in(&a.dir)
        .context("creating the store's directory")?;
    // Four times the data: every page stays resident.
    let data = records as f64 * (keys.mean_key_len() + values.mean());
    let options = Options::default()
        .cache_bytes((4.0 * data) as u64 + (64 << 20))
        .sync(SyncMode::Never);
    let db = BTreeStore::open(dir.path(), &options, BTreeOptions::default())?;
    let mut rng = SmallRng::seed_from_u64(a.seed);
    let (mut k, mut v) = (Vec::new(), Vec::new());
    for start in (0..records).step_by(1000) {
        let mut batch = WriteBatch::new();
        for i in start..(start + 1000).min(records) {
            keys.key(i, &mut k);
            values.value(i, 0, &mut rng, &mut v);
            batch.put(&k, &v)?;
        }
        db.write_batch(&batch)?;
    }
    // Warm: read every record once, in key order.
    let mut seen = 0u64;
    db.scan(ferrite::KeyRange::all(), &mut |_, _| {
        seen += 1;
        std::ops::ControlFlow::Continue(())
    })?;
    if seen != records {
        bail!("loaded {records} records, found {seen}");
    }
    let mut chooser = RequestDistribution::Zipfian.chooser(records);
    let lookups: Vec<Vec<u8>> = (0..a.ops)
        .map(|_| {
            let mut key = Vec::new();
            keys.key(chooser.next(&mut rng, records), &mut key);
            key
        })
        .collect();
    for key in &lookups {
        db.get(key)?;
    }
    let h = db.hit_path(&lookups, a.rounds)?;
    println!(
        "{records} records, keys {}, values {}, {} lookups (scrambled Zipfian) x {} rounds, medians in ns per lookup, {:.2} pages per lookup",
        keys.spec().label(),
        values.label(),
        h.keys,
        h.rounds,
        h.pages
    );
    let rows = [
        ("get, whole", h.get),
        ("descent through routes", h.descent_routed),
        ("descent through the page table", h.descent_table),
        ("page-table lookups alone", h.table),
        ("latches alone", h.latches),
        ("page searches alone", h.search),
        ("leaf latch + value copy", h.copy),
    ];
    for (name, ns) in rows {
        println!("{name:<34} {ns:>8.1}");
    }
    if let Some(path) = a.json {
        let json = serde_json::json!({
            "records": records,
            "keys": keys.spec().label(),
            "values": values.label(),
            "lookups": h.keys,
            "rounds": h.rounds,
            "pages_per_lookup": h.pages,
            "ns": {
                "get": h.get,
                "descent_routed": h.descent_routed,
                "descent_table": h.descent_table,
                "table": h.table,
                "latches": h.latches,
                "search": h.search,
                "copy": h.copy,
            },
            "provenance": ferrite_bench::provenance::Provenance::capture(),
        });
        std::fs::write(&path, serde_json::to_string_pretty(&json)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Box::new(db).close()?;
    Ok(())
}
