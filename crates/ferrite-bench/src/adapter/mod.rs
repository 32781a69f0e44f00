//! The stores a benchmark can drive, all behind [`ferrite::KvStore`].
//!
//! ferrite engines are opened through the facade; the baselines (RocksDB,
//! LMDB, redb, fjall, and a locked `BTreeMap` as the in-memory ceiling) are
//! wrapped in adapters here, so the runner drives every store through the
//! same calls. Each adapter is configured from one [`StoreConfig`] (cache
//! bytes, durability, direct I/O) and reports in [`TargetInfo`] how it
//! honoured it, because not every peer can (LMDB has no cache of its own).

mod btreemap;
mod counted;
#[cfg(feature = "fjall")]
mod fjall;
#[cfg(feature = "lmdb")]
mod lmdb;
mod peer_files;
#[cfg(feature = "redb")]
mod redb;
#[cfg(feature = "rocksdb")]
mod rocksdb;
#[cfg(any(feature = "lmdb", feature = "redb"))]
mod tx_store;
pub mod tx_target;

use std::path::Path;

use ferrite::internals::Instrumented;
use ferrite::{EngineKind, KvStore, Options, SyncMode};

use crate::error::{BenchError, Result};

/// A store under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Ferrite(EngineKind),
    /// A ferrite engine whose writers each take its write lock themselves
    /// (`Options::write_group` off), to measure what the group gains.
    FerriteUngrouped(EngineKind),
    RocksDb,
    Lmdb,
    Redb,
    Fjall,
    BTreeMap,
}

impl Target {
    /// The baselines, in report order.
    pub const BASELINES: [Target; 5] = [
        Target::RocksDb,
        Target::Lmdb,
        Target::Redb,
        Target::Fjall,
        Target::BTreeMap,
    ];

    pub fn name(&self) -> String {
        match self {
            Target::Ferrite(k) => k.name().to_string(),
            Target::FerriteUngrouped(k) => format!("{}-nogroup", k.name()),
            Target::RocksDb => "rocksdb".into(),
            Target::Lmdb => "lmdb".into(),
            Target::Redb => "redb".into(),
            Target::Fjall => "fjall".into(),
            Target::BTreeMap => "btreemap".into(),
        }
    }

    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "rocksdb" => Target::RocksDb,
            "lmdb" => Target::Lmdb,
            "redb" => Target::Redb,
            "fjall" => Target::Fjall,
            "btreemap" => Target::BTreeMap,
            other if other.ends_with("-nogroup") => Target::FerriteUngrouped(
                other
                    .trim_end_matches("-nogroup")
                    .parse::<EngineKind>()
                    .map_err(|_| BenchError::Config(format!("unknown target {other:?}")))?,
            ),
            other => Target::Ferrite(
                other
                    .parse::<EngineKind>()
                    .map_err(|_| BenchError::Config(format!(
                        "unknown target {other:?}: expected a ferrite engine or rocksdb, lmdb, redb, fjall, btreemap"
                    )))?,
            ),
        })
    }

    /// Whether this build can open the target.
    pub fn available(&self) -> bool {
        match self {
            Target::Ferrite(k) | Target::FerriteUngrouped(k) => ferrite::available().contains(k),
            Target::RocksDb => cfg!(feature = "rocksdb"),
            Target::Lmdb => cfg!(feature = "lmdb"),
            Target::Redb => cfg!(feature = "redb"),
            Target::Fjall => cfg!(feature = "fjall"),
            Target::BTreeMap => true,
        }
    }

    /// Whether device traffic comes from the store's own counters (ferrite
    /// engines) rather than the process's `/proc/self/io`.
    pub fn counts_own_io(&self) -> bool {
        matches!(self, Target::Ferrite(_) | Target::FerriteUngrouped(_))
    }

    /// `db`'s bytes on disk by kind: a ferrite engine's own account, a
    /// baseline's files by name (in `dir`).
    pub fn footprint(&self, db: &dyn KvStore, dir: &Path) -> ferrite::Footprint {
        if self.counts_own_io() {
            db.stats().footprint
        } else {
            peer_files::footprint(*self, dir)
        }
    }
}

/// What every store is given.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StoreConfig {
    pub cache_bytes: u64,
    pub sync: SyncMode,
    pub direct_io: bool,
    /// Table block compression, for the stores that have it (ferrite's
    /// LSM, RocksDB; fjall has lz4 or nothing, and zstd leaves it at lz4);
    /// the others store what they are given.
    pub compression: Compression,
}

/// `builder` (of an engine of `kind`) set to `compression`: the LSM's
/// table blocks; the B+tree and ZKV compress long values with lz4 where
/// it pays, which `none` turns off.
pub fn compressed(
    builder: ferrite::ConfigBuilder,
    kind: EngineKind,
    compression: Compression,
) -> ferrite::ConfigBuilder {
    let squeeze = compression != Compression::None;
    match kind {
        EngineKind::Lsm => {
            builder.lsm(ferrite::lsm::LsmOptions::default().compression(compression))
        }
        EngineKind::Btree => {
            builder.btree(ferrite::btree::BTreeOptions::default().compress_values(squeeze))
        }
        EngineKind::Zkv => {
            builder.zkv(ferrite::zkv::ZkvOptions::default().compress_values(squeeze))
        }
        _ => builder,
    }
}

/// The compression a [`StoreConfig`] asks for (ferrite's LSM names).
pub use ferrite::lsm::Compression;

/// How a store was actually configured, for the report.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TargetInfo {
    pub name: String,
    pub cache_bytes: u64,
    pub o_direct: bool,
    pub durability: String,
    /// Where this store differs from the common configuration, and why.
    pub notes: String,
}

/// Opens `target` in the empty directory `dir`.
pub fn open(
    target: Target,
    dir: &Path,
    cfg: &StoreConfig,
) -> Result<(Box<dyn Instrumented>, TargetInfo)> {
    std::fs::create_dir_all(dir).map_err(|e| BenchError::Output {
        path: dir.to_path_buf(),
        source: e,
    })?;
    let wrap = |source| BenchError::Store {
        target: target.name(),
        source,
    };
    match target {
        Target::Ferrite(kind) | Target::FerriteUngrouped(kind) => {
            let grouped = matches!(target, Target::Ferrite(_));
            let opts = Options::default()
                .sync(cfg.sync)
                .cache_bytes(cfg.cache_bytes)
                .direct_io(cfg.direct_io)
                .write_group(grouped);
            let builder = ferrite::Config::builder(kind).options(opts);
            let config = compressed(builder, kind, cfg.compression)
                .build()
                .map_err(wrap)?;
            let db = ferrite::internals::open_instrumented(dir, &config).map_err(wrap)?;
            let info = TargetInfo {
                name: target.name(),
                cache_bytes: cfg.cache_bytes,
                o_direct: cfg.direct_io,
                durability: cfg.sync.to_string(),
                notes: match (grouped, kind) {
                    (true, EngineKind::Lsm) => format!("table blocks {}", cfg.compression),
                    (true, EngineKind::Btree | EngineKind::Zkv) => format!(
                        "long values {}",
                        if cfg.compression != Compression::None {
                            "lz4 where it pays"
                        } else {
                            "uncompressed"
                        }
                    ),
                    (true, _) => String::new(),
                    (false, _) => "writers not grouped (each takes the write lock itself)".into(),
                },
            };
            Ok((db, info))
        }
        Target::BTreeMap => Ok(btreemap::open(cfg)),
        #[cfg(feature = "rocksdb")]
        Target::RocksDb => rocksdb::open(dir, cfg).map_err(wrap),
        #[cfg(not(feature = "rocksdb"))]
        Target::RocksDb => Err(BenchError::Unavailable(
            target.name(),
            "build with --features rocksdb (needs librocksdb-dev; see scripts/install-rocksdb.sh)",
        )),
        #[cfg(feature = "lmdb")]
        Target::Lmdb => lmdb::open(dir, cfg).map_err(wrap),
        #[cfg(not(feature = "lmdb"))]
        Target::Lmdb => Err(BenchError::Unavailable(
            target.name(),
            "build with --features lmdb",
        )),
        #[cfg(feature = "redb")]
        Target::Redb => redb::open(dir, cfg).map_err(wrap),
        #[cfg(not(feature = "redb"))]
        Target::Redb => Err(BenchError::Unavailable(
            target.name(),
            "build with --features redb",
        )),
        #[cfg(feature = "fjall")]
        Target::Fjall => fjall::open(dir, cfg).map_err(wrap),
        #[cfg(not(feature = "fjall"))]
        Target::Fjall => Err(BenchError::Unavailable(
            target.name(),
            "build with --features fjall",
        )),
    }
}

/// Converts a baseline's error into the API's error type.
#[cfg(any(
    feature = "lmdb",
    feature = "redb",
    feature = "fjall",
    feature = "rocksdb"
))]
pub(crate) fn foreign(store: &'static str) -> impl Fn(&dyn std::fmt::Display) -> ferrite::Error {
    move |e| ferrite::Error::Foreign {
        store,
        message: e.to_string(),
    }
}

/// Checks that a full scan returns strictly ascending keys; the invariant
/// check available for stores that offer no verifier of their own.
/// A peer's own counters, under the names reports use.
#[cfg(feature = "rocksdb")]
#[derive(Debug)]
pub(crate) struct PeerStats(pub Vec<(String, f64)>);

#[cfg(feature = "rocksdb")]
impl ferrite::EngineStats for PeerStats {
    fn fields(&self) -> Vec<(String, f64)> {
        self.0.clone()
    }
}

pub(crate) fn verify_by_scan(db: &dyn KvStore, store: &'static str) -> ferrite::Result<()> {
    let mut prev: Option<Vec<u8>> = None;
    let mut bad = None;
    db.scan(ferrite::KeyRange::all(), &mut |k, _| {
        if prev.as_deref().is_some_and(|p| p >= k) {
            bad = Some(k.to_vec());
            return std::ops::ControlFlow::Break(());
        }
        prev = Some(k.to_vec());
        std::ops::ControlFlow::Continue(())
    })?;
    match bad {
        Some(k) => Err(ferrite::Error::corruption(
            store,
            format!(
                "scan returned key {:?} out of order",
                k.escape_ascii().to_string()
            ),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite::{KvStoreExt, WriteBatch};
    use std::collections::BTreeMap;

    /// Every available baseline behaves like a BTreeMap under the same calls.
    #[test]
    fn baselines_agree_with_a_map() {
        for target in Target::BASELINES.into_iter().filter(Target::available) {
            let dir = tempfile::tempdir().unwrap();
            let cfg = StoreConfig {
                cache_bytes: 8 << 20,
                sync: SyncMode::Never,
                direct_io: false,
                compression: Compression::default(),
            };
            let (db, info) = open(target, dir.path(), &cfg).unwrap();
            assert_eq!(info.name, target.name());
            let mut model = BTreeMap::new();
            for i in 0u32..500 {
                let k = (i.wrapping_mul(2_654_435_761) % 1000).to_be_bytes();
                let v = i.to_le_bytes();
                db.put(&k, &v).unwrap();
                model.insert(k.to_vec(), v.to_vec());
            }
            for i in (0u32..1000).step_by(7) {
                let k = i.to_be_bytes();
                db.delete(&k).unwrap();
                model.remove(&k[..]);
            }
            let mut b = WriteBatch::new();
            b.put(b"\x00batch", b"1")
                .unwrap()
                .delete(&3u32.to_be_bytes())
                .unwrap();
            db.write_batch(&b).unwrap();
            model.insert(b"\x00batch".to_vec(), b"1".to_vec());
            model.remove(&3u32.to_be_bytes()[..]);
            db.sync().unwrap();
            for i in 0u32..1000 {
                let k = i.to_be_bytes();
                assert_eq!(
                    db.get(&k).unwrap(),
                    model.get(&k[..]).cloned(),
                    "{target:?} key {i}"
                );
            }
            let from = 100u32.to_be_bytes();
            let got = db
                .scan_collect(ferrite::KeyRange::from_bounds(&from[..]..), 50)
                .unwrap();
            let want: Vec<_> = model
                .range(from.to_vec()..)
                .take(50)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            assert_eq!(got, want, "{target:?} scan");
            // Calls and user bytes are counted as the engines count them.
            let st = db.stats();
            let ops = ferrite::OpCounts {
                gets: 1000,
                puts: 500,
                deletes: 143,
                scans: 1,
                batches: 1,
            };
            assert_eq!(st.ops, ops, "{target:?}");
            let written = 500 * 8 + 143 * 4 + b.payload_bytes() as u64;
            assert_eq!(st.user_bytes_written, written, "{target:?}");
            let pair = |(k, v): (&Vec<u8>, &Vec<u8>)| (k.len() + v.len()) as u64;
            let found: u64 = model.iter().filter(|(k, _)| k.len() == 4).map(pair).sum();
            let scanned: u64 = got.iter().map(|(k, v)| pair((k, v))).sum();
            assert_eq!(st.user_bytes_read, found + scanned, "{target:?}");
            db.verify().unwrap();
        }
    }

    #[test]
    fn targets_parse() {
        assert_eq!(Target::parse("rocksdb").unwrap(), Target::RocksDb);
        assert_eq!(
            Target::parse("btree").unwrap(),
            Target::Ferrite(EngineKind::Btree)
        );
        assert!(Target::parse("mongodb").is_err());
    }
}
