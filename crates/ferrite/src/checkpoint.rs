//! [`Store::checkpoint`]: a consistent, openable copy of a live store.
//!
//! The copy is the store as one snapshot shows it, made while reads and
//! writes go on (they see nothing of it), in a new store of the same
//! engine and options. An engine that can copy its own files does
//! ([`ferrite_core::KvStore::copy_files`]): the LSM copies each live
//! table's extent as it is, sharing its blocks where the file system
//! clones (XFS, btrfs: the counterpart of a hard link to a table file)
//! and in the kernel otherwise, and writes only its memtables anew. The
//! others are copied pair by pair: the snapshot's pairs bulk-loaded into
//! the new store, which then holds no log to replay and no garbage, the
//! B+trees' pages built bottom-up. Either way the copy is written into a
//! sibling directory and renamed into place once synced, so a crash part
//! way leaves no half copy under the name asked for.
//!
//! While it runs, the copy holds a snapshot; its cost per engine is
//! [`crate::Snapshot`]'s (the LSM pins tables on the device; the B+trees
//! and ZKV keep replaced values in memory up to their bound, past which
//! the checkpoint fails with [`Error::SnapshotTooOld`] and leaves
//! nothing).

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ferrite_core::{Error, FileCopy, KeyRange, Result};

use crate::store::Store;

/// What a checkpoint copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointStats {
    /// Pairs in the copy, when it was made pair by pair; `None` when the
    /// engine copied its files, which it does without counting pairs.
    pub pairs: Option<u64>,
    /// Bytes of keys and values copied, when made pair by pair.
    pub user_bytes: Option<u64>,
    /// Bytes of the store's files the copy shares with it: blocks the file
    /// system cloned, written by neither.
    pub shared_bytes: u64,
    /// Bytes of the store's files copied as they are.
    pub copied_bytes: u64,
    /// Bytes the copy's directory holds on the device.
    pub disk_bytes: u64,
    /// From the call to the copy's rename.
    pub elapsed: Duration,
}

/// How the copy was made.
enum Made {
    /// Pair by pair from a snapshot: how many, and their bytes.
    Pairs { pairs: u64, bytes: u64 },
    /// By the engine, from its files.
    Files(FileCopy),
}

/// The copy is made here, beside `dir`, and renamed to `dir` when done.
fn staging(dir: &Path) -> PathBuf {
    let mut name = dir.file_name().unwrap_or_default().to_os_string();
    name.push(".checkpoint-partial");
    dir.with_file_name(name)
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::Resource {
        what: format!("{what} {}", path.display()),
        reason: e.to_string(),
    }
}

/// Bytes the files under `dir` occupy on the device.
pub(crate) fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => disk_bytes(&e.path()),
            Ok(m) => m.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

impl Store {
    /// Writes a consistent copy of the store, as of now, into `dir` (which
    /// must not exist), while reads and writes go on; the copy opens as a
    /// store of the same engine and options (see the module docs for how
    /// and at what cost). Errors: [`Error::AlreadyExists`] when `dir`
    /// exists, [`Error::SnapshotTooOld`] when writes outran the snapshot's
    /// bound, and what opening, reading and writing stores return; on any
    /// error nothing is left under `dir`.
    pub fn checkpoint(&self, dir: impl AsRef<Path>) -> Result<CheckpointStats> {
        let dir = dir.as_ref();
        if dir.exists() {
            return Err(Error::AlreadyExists {
                path: dir.to_path_buf(),
            });
        }
        let start = Instant::now();
        let stage = staging(dir);
        if stage.exists() {
            // A crashed checkpoint's leftovers: never a store anyone opened.
            std::fs::remove_dir_all(&stage).map_err(|e| io_err("removing", &stage, e))?;
        }
        let made = (|| -> Result<Made> {
            let mut config = self.config().clone();
            config.options.create_if_missing = true;
            config.options.error_if_exists = true;
            // Written once, front to back, then synced: through the page
            // cache, the bulk load's page writes cost a copy each instead
            // of a device round trip (the copy opens later as its opener
            // asks; O_DIRECT is not part of a store's format).
            config.options.direct_io = false;
            // A never-written store of the same engine and options, which
            // the engine fills from its files if it can.
            config.open(&stage)?.close()?;
            if let Some(files) = self.as_kv().copy_files(&stage)? {
                return Ok(Made::Files(files));
            }
            let snap = self.as_kv().snapshot()?;
            config.options.error_if_exists = false;
            let copy = config.open(&stage)?;
            // Pairs come from a scan of the snapshot, a chunk at a time,
            // into the copy's bulk load (strictly ascending, as it needs).
            let (mut pairs, mut bytes) = (0u64, 0u64);
            let mut failed: Option<Error> = None;
            let mut chunk: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
            let mut after: Option<Vec<u8>> = None;
            let feed = std::iter::from_fn(|| loop {
                if let Some(p) = chunk.pop() {
                    pairs += 1;
                    bytes += (p.0.len() + p.1.len()) as u64;
                    return Some(p);
                }
                if failed.is_some() {
                    return None;
                }
                let range = KeyRange {
                    start: after
                        .as_deref()
                        .map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded),
                    end: std::ops::Bound::Unbounded,
                };
                let mut next = Vec::new();
                let r = snap.scan(range, &mut |k, v| {
                    next.push((k.to_vec(), v.to_vec()));
                    if next.len() >= 1024 {
                        ControlFlow::Break(())
                    } else {
                        ControlFlow::Continue(())
                    }
                });
                if let Err(e) = r {
                    failed = Some(e);
                    return None;
                }
                let last = next.last()?;
                after = Some(last.0.clone());
                next.reverse();
                chunk = next;
            });
            let loaded = copy.bulk_load(feed);
            if let Some(e) = failed {
                drop(copy);
                return Err(e);
            }
            loaded?;
            copy.sync()?;
            copy.close()?;
            Ok(Made::Pairs { pairs, bytes })
        })();
        let made = match made {
            Ok(v) => v,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&stage);
                return Err(e);
            }
        };
        std::fs::rename(&stage, dir).map_err(|e| io_err("renaming", &stage, e))?;
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::File::open(parent)
                .and_then(|f| f.sync_all())
                .map_err(|e| io_err("syncing", parent, e))?;
        }
        let (pairs, user_bytes, files) = match made {
            Made::Pairs { pairs, bytes } => (Some(pairs), Some(bytes), FileCopy::default()),
            Made::Files(f) => (None, None, f),
        };
        Ok(CheckpointStats {
            pairs,
            user_bytes,
            shared_bytes: files.shared_bytes,
            copied_bytes: files.copied_bytes,
            disk_bytes: disk_bytes(dir),
            elapsed: start.elapsed(),
        })
    }
}
