//! Store directories, errors and sizes, as every experiment opens its
//! variants.

use std::path::{Path, PathBuf};

use ferrite::internals::Instrumented;
use ferrite::{Config, EngineKind, Options};
use ferrite_lsm::{IndexKind, LsmOptions};

use crate::error::{BenchError, Result};

/// Opens a ferrite engine's store with its benchmark hooks.
pub fn open_engine(
    dir: &Path,
    kind: EngineKind,
    options: &Options,
) -> Result<Box<dyn Instrumented>> {
    let err = store_err(kind.name());
    let config = Config::builder(kind)
        .options(options.clone())
        .build()
        .map_err(&err)?;
    ferrite::internals::open_instrumented(dir, &config).map_err(err)
}

/// `dir`, emptied and created: a variant never starts on an earlier run's
/// files.
pub fn fresh_dir(dir: &Path) -> Result<PathBuf> {
    let _ = std::fs::remove_dir_all(dir);
    made_dir(dir)
}

/// `dir`, created if it is not there; what it holds is kept.
pub fn made_dir(dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).map_err(|e| BenchError::Data {
        path: dir.to_path_buf(),
        reason: e.to_string(),
    })?;
    Ok(dir.to_path_buf())
}

/// Names the variant whose store failed.
pub fn store_err(name: &str) -> impl Fn(ferrite::Error) -> BenchError + '_ {
    move |source| BenchError::Store {
        target: name.to_string(),
        source,
    }
}

/// The LSM options for a store of `data` bytes of keys and values: the
/// engine's defaults (RocksDB's) once the data is a few GiB; smaller
/// stores get memtables and levels scaled down so they still have several
/// levels.
pub fn sized_lsm_options(index: IndexKind, data: u64) -> LsmOptions {
    let d = LsmOptions::default();
    let memtable = (data / 24).clamp(256 << 10, d.memtable_bytes as u64) as usize;
    let (table_bytes, l1_bytes) = (d.table_bytes, d.l1_bytes);
    d.index(index)
        .memtable_bytes(memtable)
        .table_bytes((memtable / 4).clamp(64 << 10, table_bytes))
        .l1_bytes((memtable as u64 * 4).min(l1_bytes))
}
