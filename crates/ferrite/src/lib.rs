//! # ferrite: SSD-native key-value stores
//!
//! One API over five engine designs. Pick an engine, configure it, open a
//! directory, and use the [`Store`]:
//!
//! ```
//! use ferrite::{Config, EngineKind, WriteBatch};
//! # let dir = tempfile::tempdir().unwrap();
//! let store = Config::builder(EngineKind::Btree)
//!     .cache_bytes(64 << 20)
//!     .open(dir.path().join("db"))?;
//! store.put("user:1", "ada")?;
//! store.put("user:2", "grace")?;
//! let snapshot = store.snapshot()?;
//! store.delete_range("user:".."user;")?;
//! assert_eq!(snapshot.get("user:1")?, Some(b"ada".to_vec()));
//! assert!(store.get("user:1")?.is_none());
//! for pair in snapshot.prefix("user:").rev() {
//!     let (key, value) = pair?;
//!     println!("{} = {}", key.escape_ascii(), value.escape_ascii());
//! }
//! let mut batch = WriteBatch::new();
//! batch.put(b"a", b"1")?;
//! batch.delete(b"b")?;
//! store.write(&batch)?;
//! store.close()?;
//! # Ok::<(), ferrite::Error>(())
//! ```
//!
//! ## Which engine
//!
//! Every engine keeps the same promises: durable writes per [`SyncMode`],
//! atomic batches, crash recovery, checksums on everything read back,
//! snapshots, iterators both ways, range deletes, compare-and-swap,
//! serializable transactions, and a typed [`Error`] for every failure.
//! They differ in what they are fast at (figures measured on this
//! project's 2-core test machine, in `docs/results/`):
//!
//! | engine | pick it for | measured |
//! |---|---|---|
//! | [`EngineKind::Btree`] | reads, and data that fits the cache | in cache: 1.09 M gets/s, 5.4× RocksDB's, on a par with LMDB; YCSB A 4.3× RocksDB (`btree.md`) |
//! | [`EngineKind::TurboIndex`] | random writes into data much larger than the cache | 5.5× the plain B+tree's uniform write throughput at a cache of a tenth of the data (`turboindex.md`) |
//! | [`EngineKind::Shortcut`] | point reads on deep trees on a fast SSD | median lookup 0.64× the plain B+tree's, 1.5× its throughput (`shortcut.md`) |
//! | [`EngineKind::Lsm`] | write-heavy loads, and reads of keys with learnable order | 2.5× RocksDB's reads in cache, 5.4× at 10% cache, index blocks 0.58× the size (`swiftkv.md`) |
//! | [`EngineKind::Zkv`] | small pairs on zoned (ZNS) storage | inserts 17× a copy-on-write B+tree's on the same zones, reads equal (`zkv.md`) |
//!
//! Random inserts through a cache much smaller than the data are the
//! plain B+tree's weak spot (every insert reads a leaf, `btree.md`):
//! choose the LSM-tree or TurboIndex there.
//!
//! ## The pieces
//!
//! - [`Config`] / [`ConfigBuilder`]: engine, shared options, and each
//!   engine's own ([`btree::BTreeOptions`], [`lsm::LsmOptions`],
//!   [`zkv::ZkvOptions`]), checked before anything opens.
//! - [`Store`]: reads, writes, [`Iter`] (double-ended, with seeks),
//!   [`Snapshot`], flush, sync, [`Stats`] (shared counters and each
//!   engine's own typed struct), verify, and [`Store::close`].
//! - [`Transaction`]: serializable read-write transactions
//!   ([`Store::transaction`], [`Store::transact`] with retries), on every
//!   engine.
//! - [`Keyspace`]: named key spaces in one store ([`Store::keyspace`]),
//!   sharing its log, cache and memory budget; [`KeyspaceBatch`] and
//!   [`Transaction::keyspace`] write several atomically, and
//!   [`Store::drop_keyspace`] drops one quickly whatever it holds.
//! - [`KvStore`]: the trait every engine implements, for code generic
//!   over stores.
//!
//! Engines are compiled in by cargo feature; [`available`] lists those in
//! this build. An engine that is compiled out is
//! [`Error::EngineUnavailable`], never a silent substitute. RASK, the
//! block-range index, has an API of its own (`ferrite-rask`).

mod catalog;
mod checkpoint;
mod config;
mod iter;
mod keyspace;
mod reclaimer;
mod region;
mod registry;
mod snapshot;
mod store;
mod transaction;

use std::path::Path;

pub use catalog::MAX_KEYSPACE_NAME;
pub use checkpoint::CheckpointStats;
pub use config::{Config, ConfigBuilder};
pub use ferrite_core::background;
pub use ferrite_core::{
    BatchOp, CacheCounts, CommitView, DeviceCounts, EngineKind, EngineStats, Error, Footprint,
    KeyRange, KvStore, KvStoreExt, OpCounts, Options, OwnedKeyRange, Result, ScanVisitor,
    SpaceKind, Stats, StoreIdentity, StoreSnapshot, SyncMode, WalRecovery, WriteBatch, WriteCheck,
    MAX_KEY_LEN, MAX_VALUE_LEN,
};
/// Device reads the calling thread has issued so far, on every store's
/// devices: the difference of two calls says whether the work between
/// them waited on the device (a cache miss) or not.
pub use ferrite_io::thread_reads as thread_device_reads;
pub use iter::{Iter, KvPair};
pub use keyspace::{DetachedKeyspace, Keyspace, KeyspaceBatch};
pub use snapshot::Snapshot;
pub use store::Store;
pub use transaction::{Retry, Transaction, TxKeyspace};

/// The B+tree family's options and statistics (`btree`, `shortcut`,
/// `turboindex`).
#[cfg(any(feature = "btree", feature = "shortcut", feature = "turboindex"))]
pub mod btree {
    pub use ferrite_btree::{
        BTreeOptions, BTreeStats, InsertBufferOptions, InsertBufferStats, LevelFill,
        ShortcutOptions, ShortcutReport, ShortcutVariant,
    };
}

/// The LSM-tree's options and statistics.
#[cfg(feature = "lsm")]
pub mod lsm {
    pub use ferrite_lsm::{
        Compression, IndexKind, LevelReport, LoadAware, LsmOptions, LsmReport, LsmStats,
    };
}

/// ZKV's options and statistics.
#[cfg(feature = "zkv")]
pub mod zkv {
    pub use ferrite_io::ZoneGeometry;
    pub use ferrite_zkv::{GcPolicy, Variant, ZkvOptions, ZkvStats};
}

/// What the benchmark harness needs beyond the user API: stores with
/// their benchmark hooks, and the helpers engines share.
#[cfg(feature = "bench-internals")]
pub mod internals {
    pub use ferrite_core::engine::*;

    /// Opens the store of `config` in `path` with its benchmark hooks.
    pub fn open_instrumented(
        path: &std::path::Path,
        config: &crate::Config,
    ) -> ferrite_core::Result<Box<dyn Instrumented>> {
        crate::registry::open(path, config)
    }
}

/// Key-value engines compiled into this build, in [`EngineKind::KEY_VALUE`]
/// order.
pub fn available() -> Vec<EngineKind> {
    EngineKind::KEY_VALUE
        .into_iter()
        .filter(|&k| registry::contains(k))
        .collect()
}

/// Opens the existing store in `path` with whichever engine made it, with
/// the default options (use [`Config`] for others).
pub fn open(path: impl AsRef<Path>) -> Result<Store> {
    let path = path.as_ref();
    let identity = detect(path)?;
    Config::builder(identity.engine)
        .create_if_missing(false)
        .open(path)
}

/// Opens the existing store in `path` with whichever engine made it and
/// the shared `options` (creating nothing).
pub fn open_existing(path: impl AsRef<Path>, options: &Options) -> Result<Store> {
    let path = path.as_ref();
    let identity = detect(path)?;
    Config::builder(identity.engine)
        .options(options.clone().create_if_missing(false))
        .open(path)
}

/// Which engine made the store in `path`, and its format.
pub fn detect(path: impl AsRef<Path>) -> Result<StoreIdentity> {
    let path = path.as_ref();
    StoreIdentity::read(path)?.ok_or_else(|| Error::NotAStore {
        path: path.to_path_buf(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unavailable_engines_are_named() {
        let dir = tempfile::tempdir().unwrap();
        for k in EngineKind::KEY_VALUE {
            if !available().contains(&k) {
                match Config::builder(k).open(dir.path()) {
                    Err(Error::EngineUnavailable(e)) => assert_eq!(e, k),
                    Err(e) => panic!("{k}: unexpected error {e}"),
                    Ok(_) => panic!("{k}: opened without being available"),
                }
            }
        }
    }

    #[test]
    fn detect_reads_the_identity() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(detect(dir.path()), Err(Error::NotAStore { .. })));
        StoreIdentity::new(EngineKind::Lsm, 4)
            .write(dir.path())
            .unwrap();
        let id = detect(dir.path()).unwrap();
        assert_eq!((id.engine, id.engine_format), (EngineKind::Lsm, 4));
    }

    #[cfg(feature = "btree")]
    #[test]
    fn opens_the_btree_by_name_and_detects_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let db = Config::builder(EngineKind::Btree).open(&path).unwrap();
        db.put(b"k", b"v").unwrap();
        db.close().unwrap();
        assert_eq!(detect(&path).unwrap().engine, EngineKind::Btree);
        let db = open(&path).unwrap();
        assert_eq!(db.engine(), EngineKind::Btree);
        assert_eq!(db.get(b"k").unwrap(), Some(b"v".to_vec()));
        drop(db);
        assert!(matches!(
            Config::builder(EngineKind::Lsm).open(&path),
            Err(Error::EngineUnavailable(_)) | Err(Error::WrongFormat { .. })
        ));
    }

    #[cfg(feature = "lsm")]
    #[test]
    fn opens_the_lsm_engine_by_name_and_reopens_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        {
            let db = Config::builder(EngineKind::Lsm).open(&path).unwrap();
            db.put(b"k", b"v").unwrap();
            db.flush().unwrap();
            db.put(b"k2", b"v2").unwrap();
        }
        assert_eq!(detect(&path).unwrap().engine, EngineKind::Lsm);
        let db = open(&path).unwrap();
        assert_eq!(db.get(b"k").unwrap(), Some(b"v".to_vec()));
        assert_eq!(db.get(b"k2").unwrap(), Some(b"v2".to_vec()));
        db.verify().unwrap();
    }

    #[cfg(feature = "zkv")]
    #[test]
    fn opens_zkv_by_name_and_recovers_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let opts = Options::default().sync(SyncMode::Always);
        {
            let db = Config::builder(EngineKind::Zkv)
                .options(opts.clone())
                .open(&path)
                .unwrap();
            db.put(b"k", b"v").unwrap();
            db.put(b"big", [7u8; 5000]).unwrap();
        }
        assert_eq!(detect(&path).unwrap().engine, EngineKind::Zkv);
        let db = open_existing(&path, &opts).unwrap();
        assert_eq!(db.get(b"k").unwrap(), Some(b"v".to_vec()));
        assert_eq!(db.get(b"big").unwrap(), Some(vec![7u8; 5000]));
        db.verify().unwrap();
    }

    /// A store whose identity names an older format the engine still
    /// reads opens, and its identity then names the current format; one
    /// older than that is refused as the wrong format.
    #[cfg(all(feature = "btree", feature = "zkv", feature = "lsm"))]
    #[test]
    fn older_formats_an_engine_reads_are_upgraded_and_older_ones_refused() {
        for (kind, older, current) in [
            (EngineKind::Btree, 2, ferrite_btree::FORMAT_VERSION),
            (EngineKind::Zkv, 4, ferrite_zkv::FORMAT_VERSION),
            (EngineKind::Lsm, 1, ferrite_lsm::FORMAT_VERSION),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("db");
            drop(Config::builder(kind).open(&path).unwrap());
            let mut id = detect(&path).unwrap();
            assert_eq!(id.engine_format, current);
            id.engine_format = older;
            id.write(&path).unwrap();
            {
                let db = open(&path).unwrap();
                db.put(b"k", b"v").unwrap();
            }
            assert_eq!(detect(&path).unwrap().engine_format, current, "{kind}");
            id.engine_format = older - 1;
            id.write(&path).unwrap();
            assert!(
                matches!(open(&path), Err(Error::WrongFormat { .. })),
                "{kind}"
            );
        }
    }

    #[test]
    fn invalid_options_are_refused_before_anything_is_opened() {
        let dir = tempfile::tempdir().unwrap();
        let e = Config::builder(EngineKind::Btree)
            .cache_bytes(1)
            .open(dir.path().join("db"));
        assert!(matches!(e, Err(Error::InvalidOptions(_))));
        assert!(!dir.path().join("db").exists());
    }
}
