//! `ferrite backup` and `ferrite restore`: a store copied, consistently,
//! into a new directory through `Store::checkpoint` (the store as one
//! snapshot shows it: the LSM's tables copied or cloned as they are, the
//! other engines' pairs bulk-loaded into a fresh store of the same engine).
//!
//! Both open the store they read, so it must not be open in another
//! process (a running server's store is copied by the embedder's own
//! `Store::checkpoint`). A restore verifies the backup before it copies
//! it, and the restored store after.

use std::path::Path;

use anyhow::{bail, Context, Result};
use ferrite::{CheckpointStats, Options};

/// Prints what a copy holds: its pairs where they were copied or
/// `counted`, and the bytes of files copied and shared where the engine
/// copied its files.
fn report(what: &str, to: &Path, s: &CheckpointStats, counted: Option<u64>) {
    let mut how = Vec::new();
    if let Some(pairs) = s.pairs.or(counted) {
        how.push(format!("{pairs} pairs"));
    }
    match s.user_bytes {
        Some(bytes) => how.push(format!("{bytes} bytes of keys and values")),
        None => how.push(format!(
            "files copied: {} bytes, shared (cloned): {} bytes",
            s.copied_bytes, s.shared_bytes
        )),
    }
    let how = how.join(", ");
    println!(
        "{what} {}: {how}, {} bytes on disk, {:.2} s",
        to.display(),
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
    report("backed up into", to, &stats, None);
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
    let held = backup.iter().count() as u64;
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
    if pairs != held {
        bail!("the restored store holds {pairs} pairs, the backup {held}");
    }
    report("restored into", path, &stats, Some(pairs));
    Ok(())
}
