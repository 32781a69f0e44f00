//! # ferrite: open any engine by name
//!
//! The facade that tools, benchmarks and applications use: [`open`] a store
//! directory with an [`EngineKind`] and [`Options`], get a
//! `Box<dyn KvStore>`, and never name an engine type. [`detect`] tells which
//! engine made a directory. The API types are re-exported from
//! `ferrite-core`, so depending on this crate alone is enough.
//!
//! Engines are compiled in by cargo feature; [`available`] lists them. An
//! engine that exists in ferrite but not in this build is
//! [`Error::EngineUnavailable`], never a silent substitute.

use std::path::Path;

pub use ferrite_core::*;

/// Engines compiled into this build, in [`EngineKind::ALL`] order.
pub fn available() -> Vec<EngineKind> {
    EngineKind::ALL
        .into_iter()
        .filter(|&k| registry::opener(k).is_some())
        .collect()
}

/// Opens (or, with `create_if_missing`, creates) the store of engine
/// `kind` in directory `path`.
pub fn open(path: &Path, kind: EngineKind, options: &Options) -> Result<Box<dyn KvStore>> {
    options.validate()?;
    let open = registry::opener(kind).ok_or(Error::EngineUnavailable(kind))?;
    open(path, options)
}

/// Opens the existing store in `path` with whichever engine made it.
pub fn open_existing(path: &Path, options: &Options) -> Result<Box<dyn KvStore>> {
    let identity = detect(path)?;
    let options = Options {
        create_if_missing: false,
        ..options.clone()
    };
    open(path, identity.engine, &options)
}

/// Reads the identity of the store in `path`.
pub fn detect(path: &Path) -> Result<StoreIdentity> {
    StoreIdentity::read(path)?.ok_or_else(|| Error::NotAStore {
        path: path.to_path_buf(),
    })
}

mod registry {
    //! Which engines this build contains. Each engine issue adds its arm,
    //! behind the engine's cargo feature.

    use std::path::Path;

    use ferrite_core::{EngineKind, KvStore, Options, Result};

    pub type Opener = fn(&Path, &Options) -> Result<Box<dyn KvStore>>;

    pub fn opener(kind: EngineKind) -> Option<Opener> {
        match kind {
            #[cfg(feature = "btree")]
            EngineKind::Btree => Some(ferrite_btree::open_store),
            #[cfg(feature = "shortcut")]
            EngineKind::Shortcut => Some(ferrite_btree::open_shortcut_store),
            #[cfg(feature = "turboindex")]
            EngineKind::TurboIndex => Some(ferrite_btree::open_turbo_store),
            #[cfg(feature = "lsm")]
            EngineKind::Lsm => Some(ferrite_lsm::open_store),
            #[cfg(feature = "zkv")]
            EngineKind::Zkv => Some(ferrite_zkv::open_store),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unavailable_engines_are_named() {
        let dir = tempfile::tempdir().unwrap();
        for k in EngineKind::ALL {
            if !available().contains(&k) {
                match open(dir.path(), k, &Options::default()) {
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
        {
            let db = open(&path, EngineKind::Btree, &Options::default()).unwrap();
            db.put(b"k", b"v").unwrap();
        }
        assert_eq!(detect(&path).unwrap().engine, EngineKind::Btree);
        let db = open_existing(&path, &Options::default()).unwrap();
        assert_eq!(db.get(b"k").unwrap(), Some(b"v".to_vec()));
        drop(db);
        assert!(matches!(
            open(&path, EngineKind::Lsm, &Options::default()),
            Err(Error::EngineUnavailable(_)) | Err(Error::WrongFormat { .. })
        ));
    }

    #[cfg(feature = "lsm")]
    #[test]
    fn opens_the_lsm_engine_by_name_and_reopens_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        {
            let db = open(&path, EngineKind::Lsm, &Options::default()).unwrap();
            db.put(b"k", b"v").unwrap();
            db.flush().unwrap();
            db.put(b"k2", b"v2").unwrap();
        }
        assert_eq!(detect(&path).unwrap().engine, EngineKind::Lsm);
        let db = open_existing(&path, &Options::default()).unwrap();
        assert_eq!(db.get(b"k").unwrap(), Some(b"v".to_vec()));
        assert_eq!(db.get(b"k2").unwrap(), Some(b"v2".to_vec()));
        db.verify().unwrap();
    }

    #[cfg(feature = "zkv")]
    #[test]
    fn opens_zkv_by_name_and_recovers_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let opts = Options {
            sync: SyncMode::Always,
            ..Options::default()
        };
        {
            let db = open(&path, EngineKind::Zkv, &opts).unwrap();
            db.put(b"k", b"v").unwrap();
            db.put(b"big", &[7u8; 5000]).unwrap();
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
            drop(open(&path, kind, &Options::default()).unwrap());
            let mut id = detect(&path).unwrap();
            assert_eq!(id.engine_format, current);
            id.engine_format = older;
            id.write(&path).unwrap();
            {
                let db = open_existing(&path, &Options::default()).unwrap();
                db.put(b"k", b"v").unwrap();
            }
            assert_eq!(detect(&path).unwrap().engine_format, current, "{kind}");
            id.engine_format = older - 1;
            id.write(&path).unwrap();
            assert!(
                matches!(
                    open_existing(&path, &Options::default()),
                    Err(Error::WrongFormat { .. })
                ),
                "{kind}"
            );
        }
    }

    #[test]
    fn invalid_options_are_refused_before_anything_is_opened() {
        let dir = tempfile::tempdir().unwrap();
        let bad = Options {
            cache_bytes: 1,
            ..Options::default()
        };
        assert!(matches!(
            open(dir.path(), EngineKind::Btree, &bad),
            Err(Error::InvalidOptions(_))
        ));
    }
}
