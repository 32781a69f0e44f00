//! [`Config`]: which engine a store runs and every option it takes,
//! checked as a whole before anything is opened.
//!
//! Invariants:
//! - a built `Config` names a key-value engine compiled into this build,
//!   and its common and engine options passed the engines' own validation;
//! - engine options are those of the chosen engine's family (B+tree
//!   options for `btree`, `shortcut` and `turboindex`), and they run the
//!   design the engine names: `shortcut` has SHORTCUT's companion on,
//!   `turboindex` its insert buffer, `btree` neither.

use ferrite_core::{EngineKind, Error, Options, Result, SyncMode, WalRecovery};

/// An engine's own options, as the builder was given them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum EngineOptions {
    /// The engine's defaults.
    Default,
    #[cfg(any(feature = "btree", feature = "shortcut", feature = "turboindex"))]
    BTree(ferrite_btree::BTreeOptions),
    #[cfg(feature = "lsm")]
    Lsm(ferrite_lsm::LsmOptions),
    #[cfg(feature = "zkv")]
    Zkv(ferrite_zkv::ZkvOptions),
}

/// A store's engine and options. Build one with [`Config::builder`]:
///
/// ```
/// use ferrite::{Config, EngineKind, SyncMode};
/// # let dir = tempfile::tempdir().unwrap();
/// let store = Config::builder(EngineKind::Lsm)
///     .cache_bytes(32 << 20)
///     .sync(SyncMode::Always)
///     .open(dir.path().join("db"))?;
/// store.put("k", "v")?;
/// store.close()?;
/// # Ok::<(), ferrite::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub(crate) engine: EngineKind,
    pub(crate) options: Options,
    pub(crate) engine_options: EngineOptions,
}

impl Config {
    /// A builder for a store of `engine`, starting from the defaults.
    pub fn builder(engine: EngineKind) -> ConfigBuilder {
        ConfigBuilder {
            engine,
            options: Options::default(),
            engine_options: EngineOptions::Default,
        }
    }

    /// The engine a store opened with this configuration runs.
    pub fn engine(&self) -> EngineKind {
        self.engine
    }

    /// The options every engine shares.
    pub fn options(&self) -> &Options {
        &self.options
    }
}

/// Builds a [`Config`]; [`ConfigBuilder::build`] checks it.
#[derive(Debug, Clone)]
#[must_use]
pub struct ConfigBuilder {
    engine: EngineKind,
    options: Options,
    engine_options: EngineOptions,
}

impl ConfigBuilder {
    /// When writes become durable (default: batched every 10 ms).
    pub fn sync(mut self, sync: SyncMode) -> Self {
        self.options.sync = sync;
        self
    }

    /// Memory for the engine's caches, in bytes (default: 64 MiB).
    pub fn cache_bytes(mut self, bytes: u64) -> Self {
        self.options.cache_bytes = bytes;
        self
    }

    /// Create the store when the directory holds none (default: yes).
    pub fn create_if_missing(mut self, yes: bool) -> Self {
        self.options.create_if_missing = yes;
        self
    }

    /// Refuse to open a directory that already holds a store (default: no).
    pub fn error_if_exists(mut self, yes: bool) -> Self {
        self.options.error_if_exists = yes;
        self
    }

    /// Bypass the OS page cache (default: yes).
    pub fn direct_io(mut self, yes: bool) -> Self {
        self.options.direct_io = yes;
        self
    }

    /// What opening does with a damaged write-ahead log (default: refuse).
    pub fn wal_recovery(mut self, how: WalRecovery) -> Self {
        self.options.wal_recovery = how;
        self
    }

    /// Every shared option at once.
    pub fn options(mut self, options: Options) -> Self {
        self.options = options;
        self
    }

    /// The B+tree's own options, for `btree`, `shortcut` and `turboindex`.
    /// For `shortcut` (`turboindex`) without SHORTCUT (insert-buffer)
    /// options, the defaults are switched on.
    #[cfg(any(feature = "btree", feature = "shortcut", feature = "turboindex"))]
    pub fn btree(mut self, options: ferrite_btree::BTreeOptions) -> Self {
        self.engine_options = EngineOptions::BTree(options);
        self
    }

    /// The LSM-tree's own options, for `lsm`.
    #[cfg(feature = "lsm")]
    pub fn lsm(mut self, options: ferrite_lsm::LsmOptions) -> Self {
        self.engine_options = EngineOptions::Lsm(options);
        self
    }

    /// ZKV's own options, for `zkv`.
    #[cfg(feature = "zkv")]
    pub fn zkv(mut self, options: ferrite_zkv::ZkvOptions) -> Self {
        self.engine_options = EngineOptions::Zkv(options);
        self
    }

    /// Checks the configuration. Errors: [`Error::NotKeyValue`] for RASK,
    /// [`Error::EngineUnavailable`] for an engine not in this build,
    /// [`Error::InvalidOptions`] for options that cannot work (with the
    /// reason) or another engine's options.
    pub fn build(self) -> Result<Config> {
        let engine = self.engine;
        if !engine.is_key_value() {
            return Err(Error::NotKeyValue(engine));
        }
        if !crate::available().contains(&engine) {
            return Err(Error::EngineUnavailable(engine));
        }
        self.options.validate()?;
        let engine_options = settle_engine_options(engine, self.engine_options)?;
        Ok(Config {
            engine,
            options: self.options,
            engine_options,
        })
    }
}

/// Checks engine options against the engine, switching on the design
/// the engine names where the options leave it off.
fn settle_engine_options(engine: EngineKind, given: EngineOptions) -> Result<EngineOptions> {
    let invalid = |why: String| Error::InvalidOptions(format!("{engine}: {why}"));
    match given {
        EngineOptions::Default => Ok(EngineOptions::Default),
        #[cfg(any(feature = "btree", feature = "shortcut", feature = "turboindex"))]
        EngineOptions::BTree(mut bt) => {
            match engine {
                EngineKind::Shortcut if bt.shortcut.is_none() => {
                    bt.shortcut = Some(ferrite_btree::ShortcutOptions::default());
                }
                EngineKind::TurboIndex if bt.insert_buffer.is_none() => {
                    bt.insert_buffer = Some(ferrite_btree::InsertBufferOptions::default());
                }
                EngineKind::Btree | EngineKind::Shortcut | EngineKind::TurboIndex => {}
                _ => return Err(invalid("B+tree options given to another engine".into())),
            }
            bt.validate().map_err(invalid)?;
            let runs = bt.engine_kind().map_err(invalid)?;
            if runs != engine {
                return Err(invalid(format!("these B+tree options run {runs}")));
            }
            Ok(EngineOptions::BTree(bt))
        }
        #[cfg(feature = "lsm")]
        EngineOptions::Lsm(o) => {
            if engine != EngineKind::Lsm {
                return Err(invalid("LSM options given to another engine".into()));
            }
            o.validate().map_err(invalid)?;
            Ok(EngineOptions::Lsm(o))
        }
        #[cfg(feature = "zkv")]
        EngineOptions::Zkv(o) => {
            if engine != EngineKind::Zkv {
                return Err(invalid("ZKV options given to another engine".into()));
            }
            o.validate().map_err(invalid)?;
            Ok(EngineOptions::Zkv(o))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rask_is_not_a_key_value_engine() {
        assert!(matches!(
            Config::builder(EngineKind::Rask).build(),
            Err(Error::NotKeyValue(EngineKind::Rask))
        ));
    }

    #[test]
    fn shared_options_are_validated_at_build() {
        let e = Config::builder(EngineKind::Btree).cache_bytes(1).build();
        assert!(matches!(e, Err(Error::InvalidOptions(_))), "{e:?}");
    }

    #[cfg(all(feature = "btree", feature = "lsm"))]
    #[test]
    fn engine_options_must_fit_the_engine() {
        let e = Config::builder(EngineKind::Lsm)
            .btree(ferrite_btree::BTreeOptions::default())
            .build();
        assert!(matches!(e, Err(Error::InvalidOptions(_))), "{e:?}");
        let e = Config::builder(EngineKind::Btree)
            .btree(ferrite_btree::BTreeOptions::default().page_size(3000))
            .build();
        assert!(matches!(e, Err(Error::InvalidOptions(_))), "{e:?}");
        let e = Config::builder(EngineKind::Btree)
            .btree(ferrite_btree::BTreeOptions::turbo())
            .build();
        assert!(matches!(e, Err(Error::InvalidOptions(_))), "{e:?}");
        let e = Config::builder(EngineKind::Lsm)
            .lsm(ferrite_lsm::LsmOptions::default().levels(1))
            .build();
        assert!(matches!(e, Err(Error::InvalidOptions(_))), "{e:?}");
    }

    #[cfg(feature = "turboindex")]
    #[test]
    fn the_engine_switches_its_design_on() {
        let c = Config::builder(EngineKind::TurboIndex)
            .btree(ferrite_btree::BTreeOptions::default().page_size(8192))
            .build()
            .unwrap();
        match c.engine_options {
            EngineOptions::BTree(bt) => {
                assert!(bt.insert_buffer.is_some());
                assert_eq!(bt.page_size, 8192);
            }
            other => panic!("{other:?}"),
        }
    }
}
