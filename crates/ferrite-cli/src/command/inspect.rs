//! `ferrite inspect --path P`: what a store directory holds.

use std::path::Path;

use anyhow::{Context, Result};
use ferrite::{Error, Options};

/// Allocated bytes, apparent bytes and files below `path` (sparse files,
/// such as an emulated zoned device, allocate far less than their length).
fn dir_size(path: &Path) -> std::io::Result<(u64, u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let (mut allocated, mut apparent, mut files) = (0, 0, 0);
    for entry in std::fs::read_dir(path)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        if meta.is_dir() {
            let (a, b, f) = dir_size(&entry.path())?;
            allocated += a;
            apparent += b;
            files += f;
        } else {
            allocated += meta.blocks() * 512;
            apparent += meta.len();
            files += 1;
        }
    }
    Ok((allocated, apparent, files))
}

pub fn run(path: &Path) -> Result<()> {
    let identity =
        ferrite::detect(path).with_context(|| format!("inspecting {}", path.display()))?;
    let (allocated, apparent, files) =
        dir_size(path).with_context(|| format!("listing {}", path.display()))?;
    println!("store      {}", path.display());
    println!(
        "engine     {} (format {})",
        identity.engine, identity.engine_format
    );
    println!("created    {} (unix seconds)", identity.created_unix);
    println!("on disk    {allocated} bytes allocated ({apparent} apparent) in {files} files");
    if identity.engine == ferrite::EngineKind::Rask {
        return inspect_rask(path);
    }
    let opts = Options::default().create_if_missing(false);
    match ferrite::open_existing(path, &opts) {
        Ok(db) => {
            // Verified first: engines report what the walk found (page
            // fill per level) among their statistics.
            let verified = db.verify();
            let s = db.stats();
            // Opening may write (a recovery, a new log), so the directory
            // is measured again beside what the engine accounts for.
            let now = dir_size(path).map_or(0, |(a, _, _)| a);
            print_footprint(&s.footprint, now);
            println!("memory     {} bytes in engine structures", s.memory_bytes);
            for (name, value) in s.detail.as_ref().map(|d| d.fields()).unwrap_or_default() {
                println!("{name:<10} {value}");
            }
            print_keyspaces(&db)?;
            match verified {
                Ok(()) => println!("verify     ok"),
                Err(e) => {
                    println!("verify     FAILED: {e}");
                    std::process::exit(2);
                }
            }
        }
        Err(Error::EngineUnavailable(k)) => {
            println!("verify     skipped: engine {k} is not in this build");
        }
        Err(e) => {
            let hint = super::kv::salvage_hint(&e);
            return Err(anyhow::Error::new(e).context(format!("opening the store{hint}")));
        }
    }
    Ok(())
}

/// The store's bytes by kind, as the engine accounts for them, beside the
/// open store's directory (allocated bytes; the difference is files no
/// engine device covers, such as the identity file, and blocks a device
/// keeps beyond its accounting).
fn print_footprint(f: &ferrite::Footprint, allocated: u64) {
    if f.is_empty() {
        return;
    }
    let total = f.total();
    let share = |b: u64| 100.0 * b as f64 / total.max(1) as f64;
    for (kind, bytes) in f.parts().filter(|&(_, b)| b > 0) {
        println!(
            "  {:<12} {bytes:>14} bytes  {:>5.1}%",
            kind.name(),
            share(bytes)
        );
    }
    println!(
        "  {:<12} {total:>14} bytes  (the open store's directory: {allocated})",
        "accounted"
    );
}

/// The store's key spaces: the default one and each named keyspace,
/// with the pairs and the key and value bytes a scan of it finds, and the
/// dropped keyspaces whose keys are still being removed.
fn print_keyspaces(db: &ferrite::Store) -> Result<()> {
    let names = db.keyspaces();
    if names.is_empty() && db.dropped_keyspaces_pending() == 0 {
        return Ok(());
    }
    let count = |scan: &dyn Fn(&mut ferrite::ScanVisitor<'_>) -> ferrite::Result<()>| {
        let (mut pairs, mut bytes) = (0u64, 0u64);
        scan(&mut |k, v| {
            pairs += 1;
            bytes += (k.len() + v.len()) as u64;
            std::ops::ControlFlow::Continue(())
        })
        .map(|()| (pairs, bytes))
    };
    println!("keyspaces  {} named, besides the default", names.len());
    let (pairs, bytes) = count(&|v| db.scan(ferrite::KeyRange::all(), v))?;
    println!("  {:<24} {pairs:>12} pairs {bytes:>14} bytes", "(default)");
    for name in &names {
        let Some(ks) = db.existing_keyspace(name) else {
            continue;
        };
        let (pairs, bytes) = count(&|v| ks.scan(ferrite::KeyRange::all(), v))?;
        println!("  {name:<24} {pairs:>12} pairs {bytes:>14} bytes");
    }
    let pending = db.dropped_keyspaces_pending();
    if pending > 0 {
        println!("  {pending} dropped keyspaces' keys being removed in the background");
    }
    Ok(())
}

/// A durable RASK index (block ranges mapped to physical runs).
fn inspect_rask(path: &Path) -> Result<()> {
    use ferrite_rask::{DurableOptions, DurableRask, PhysicalRun};
    let mut opts = DurableOptions::default();
    opts.store.create_if_missing = false;
    let db = DurableRask::<PhysicalRun>::open(path, opts).map_err(|e| {
        let hint = super::rask::salvage_hint(&e);
        anyhow::Error::new(e).context(format!("opening the index{hint}"))
    })?;
    let r = db.recovery();
    println!(
        "recovery   snapshot {} ({} runs) + {} log records in {:.3} s",
        r.snapshot_epoch, r.snapshot_runs, r.replayed_records, r.seconds
    );
    let s = db.stats();
    let mut runs = 0u64;
    let mut blocks = 0u64;
    db.index().for_each_mapped(|range, _| {
        runs += 1;
        blocks += range.len();
    });
    println!("mapped     {blocks} blocks in {runs} runs");
    println!(
        "index      {} leaves, {} entries, {} bytes",
        s.leaves, s.entries, s.index_bytes
    );
    println!("log        {} bytes", db.log_bytes());
    match db.index().verify() {
        Ok(()) => println!("verify     ok"),
        Err(e) => {
            println!("verify     FAILED: {e}");
            std::process::exit(2);
        }
    }
    Ok(())
}
