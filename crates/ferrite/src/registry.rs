//! Which engines this build contains, and opening one by kind. Each
//! engine is behind its cargo feature; an engine compiled out is
//! [`Error::EngineUnavailable`], never a substitute.

use std::path::Path;

use ferrite_core::engine::Instrumented;
use ferrite_core::{EngineKind, Error, Result};

use crate::config::{Config, EngineOptions};

/// The engines compiled into this build.
const BUILT: &[EngineKind] = &[
    #[cfg(feature = "btree")]
    EngineKind::Btree,
    #[cfg(feature = "shortcut")]
    EngineKind::Shortcut,
    #[cfg(feature = "turboindex")]
    EngineKind::TurboIndex,
    #[cfg(feature = "zkv")]
    EngineKind::Zkv,
    #[cfg(feature = "lsm")]
    EngineKind::Lsm,
];

/// Whether `kind` is compiled into this build.
pub(crate) fn contains(kind: EngineKind) -> bool {
    BUILT.contains(&kind)
}

/// Opens the store of `config` in `path`, with the hooks the benchmark
/// harness uses (the public [`crate::Store`] hides them).
pub(crate) fn open(path: &Path, config: &Config) -> Result<Box<dyn Instrumented>> {
    let kind = config.engine;
    if !contains(kind) {
        return Err(Error::EngineUnavailable(kind));
    }
    let options = &config.options;
    match (kind, &config.engine_options) {
        #[cfg(any(feature = "btree", feature = "shortcut", feature = "turboindex"))]
        (EngineKind::Btree | EngineKind::Shortcut | EngineKind::TurboIndex, o) => {
            use ferrite_btree::{BTreeOptions, BTreeStore, InsertBufferOptions, ShortcutOptions};
            let bt = match o {
                EngineOptions::BTree(bt) => *bt,
                _ => match kind {
                    EngineKind::Shortcut => {
                        BTreeOptions::default().shortcut(Some(ShortcutOptions::default()))
                    }
                    EngineKind::TurboIndex => {
                        BTreeOptions::default().insert_buffer(Some(InsertBufferOptions::default()))
                    }
                    _ => BTreeOptions::default(),
                },
            };
            Ok(Box::new(BTreeStore::open(path, options, bt)?))
        }
        #[cfg(feature = "lsm")]
        (EngineKind::Lsm, o) => {
            let lsm = match o {
                EngineOptions::Lsm(l) => l.clone(),
                _ => ferrite_lsm::LsmOptions::default(),
            };
            Ok(Box::new(ferrite_lsm::LsmStore::open(path, options, lsm)?))
        }
        #[cfg(feature = "zkv")]
        (EngineKind::Zkv, o) => {
            let zkv = match o {
                EngineOptions::Zkv(z) => z.clone(),
                _ => ferrite_zkv::ZkvOptions::default(),
            };
            Ok(Box::new(ferrite_zkv::ZkvStore::open(path, options, zkv)?))
        }
        _ => Err(Error::EngineUnavailable(kind)),
    }
}
