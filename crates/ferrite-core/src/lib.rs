//! # ferrite-core: the API every ferrite engine implements
//!
//! This crate owns what engines have in common and nothing engine-specific.
//! Its root is the key-value API a user of any engine sees:
//!
//! - [`KvStore`]: get, put, delete, range delete, compare-and-swap, ordered
//!   scans both ways, atomic batches, snapshots ([`StoreSnapshot`]),
//!   flush, sync, stats, verify and close; object safe, `Send + Sync`.
//! - [`WriteBatch`] and its log encoding; [`KeyRange`] and
//!   [`OwnedKeyRange`] (with a prefix's exact range).
//! - [`Options`] and [`SyncMode`], named the same for every engine.
//! - [`Stats`]: engine-neutral counters, and each engine's own typed ones
//!   behind [`EngineStats`]; its [`Footprint`]: the store's bytes on its
//!   devices by [`SpaceKind`].
//! - [`Error`], one typed, non-exhaustive error enum.
//! - [`EngineKind`] and the [`StoreIdentity`] file that tells which engine
//!   made a directory.
//!
//! [`background`] says which background work (flushes, compactions,
//! checkpoints, rebuilds, reclamation) is running in the process.
//!
//! [`engine`] holds what engines share beyond that: key checks, the
//! poison flag, the periodic sync thread, persisted-counter bounds, the
//! snapshot chain of in-place stores, the benchmark hooks. With the
//! `testkit` feature, `testkit`: the oracle engines' tests use for stores
//! opened over damaged bytes.
//!
//! Engines depend on this crate and on `ferrite-io`; nothing here depends
//! on an engine.

pub mod background;
mod batch;
mod byte_reader;
mod counter;
mod engine_kind;
mod error;
mod footprint;
mod identity;
mod key;
mod option_setters;
mod options;
mod periodic_sync;
mod poison;
mod range;
mod snapshot_chain;
mod stats;
mod store;
#[cfg(feature = "testkit")]
pub mod testkit;
mod write_group;

pub use batch::{BatchOp, WriteBatch};
pub use engine_kind::EngineKind;
pub use error::{Error, Result};
pub use footprint::{Footprint, SpaceKind};
pub use identity::StoreIdentity;
pub use key::{MAX_KEY_LEN, MAX_VALUE_LEN};
pub use options::{Options, SyncMode, WalRecovery};
pub use range::{KeyRange, OwnedKeyRange};
pub use stats::{CacheCounts, DeviceCounts, EngineStats, OpCounts, Stats};
pub use store::{
    CommitView, FileCopy, KvStore, KvStoreExt, ScanVisitor, StoreSnapshot, WriteCheck,
};

/// What engines share beyond the user API: plumbing for implementing a
/// store, not for using one (the `ferrite` facade does not export it).
pub mod engine {
    pub use crate::byte_reader::ByteReader;
    pub use crate::counter::{check_counter, persistable_counter, COUNTER_LIMIT};
    pub use crate::identity::{Established, IDENTITY_FILE};
    pub use crate::key::{check_key, check_value, key_to_u64, u64_to_key};
    pub use crate::periodic_sync::PeriodicSync;
    pub use crate::poison::Poison;
    pub use crate::snapshot_chain::{ChainSnapshot, ChainStats, CurrentState, Pin, SnapshotChain};
    pub use crate::stats::ApiCounters;
    pub use crate::store::Instrumented;
    pub use crate::write_group::WriteGroup;
}
