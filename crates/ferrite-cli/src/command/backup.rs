//! `ferrite backup` and `ferrite restore`: a store copied, consistently,
//! into a new directory through `Store::checkpoint` (the store as one
//! snapshot shows it, bulk-loaded into a fresh store of the same engine).
//!
//! Both open the store they read, so it must not be open in another
//! process (a running server's store is copied by the embedder's own
//! `Store::checkpoint`). A restore verifies the backup before it copies
//! it, and the restored store after.

use std::path::Path;

use anyhow::{bail, Context, Result};
use ferrite::{CheckpointStats, Options};

fn report(what: &str, to: &Path, s: &CheckpointStats) {
    println!(
        "{what} {}: {} pairs, {} bytes of keys and values, {} bytes on disk, {:.2} s",
        to.display(),
        s.pairs,
        s.user_bytes,
        s.disk_bytes,
        s.elapsed.as_secs_f64()
    );
}

/// Copies the store in `path` into `to`, which must not exist.
pub fn backup(path: &Path, to: &Path) -> Result<()> {
    let db = ferrite::open_existing(path, &Options::default())
        .with_context(|| format!("opening {}", path.display()))?;
    let stats = db
        .checkpoint(to)
        .with_context(|| format!("copying {} into {}", path.display(), to.display()))?;
    db.close()
        .with_context(|| format!("closing {}", path.display()))?;
    report("backed up into", to, &stats);
    Ok(())
}

/// Checks the backup in `from`, copies it into `path` (which must not
/// exist), and checks the copy.
pub fn restore(from: &Path, path: &Path) -> Result<()> {
    let backup = ferrite::open_existing(from, &Options::default())
        .with_context(|| format!("opening the backup {}", from.display()))?;
    backup
        .verify()
        .with_context(|| format!("the backup {} fails its check", from.display()))?;
    let stats = backup
        .checkpoint(path)
        .with_context(|| format!("copying {} into {}", from.display(), path.display()))?;
    backup.close()?;
    let restored = ferrite::open_existing(path, &Options::default())
        .with_context(|| format!("opening the restored {}", path.display()))?;
    restored
        .verify()
        .with_context(|| format!("the restored {} fails its check", path.display()))?;
    let pairs = restored.iter().count() as u64;
    restored.close()?;
    if pairs != stats.pairs {
        bail!(
            "the restored store holds {pairs} pairs, the backup {}",
            stats.pairs
        );
    }
    report("restored into", path, &stats);
    Ok(())
}
