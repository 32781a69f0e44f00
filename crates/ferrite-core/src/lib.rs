//! # ferrite-core: the API every ferrite engine implements
//!
//! This crate owns what engines have in common and nothing engine-specific:
//!
//! - [`KvStore`]: get, put, delete, ordered scan, atomic batches, flush,
//!   sync, stats and verify; object safe, `Send + Sync`.
//! - Limits on keys (1..=1024 bytes) and values (0..=4 MiB), enforced with
//!   typed errors, and [`key_to_u64`], the order-preserving key → u64 map
//!   that learned models use.
//! - [`WriteBatch`] and its log encoding.
//! - [`Options`] and [`SyncMode`], named the same for every engine, and
//!   [`PeriodicSync`], the thread that keeps `SyncMode::Batched`'s bound
//!   when writes stop.
//! - [`Stats`], engine-neutral counters for amplification and caching.
//! - [`Error`], one typed, non-exhaustive error enum.
//! - [`EngineKind`] and the [`StoreIdentity`] file that tells which engine
//!   made a directory.
//! - [`COUNTER_LIMIT`], the bound decoders hold persisted epochs, sequence
//!   numbers and ids to.
//! - With the `testkit` feature, `testkit`: the oracle engines' tests use
//!   for stores opened over damaged bytes.
//!
//! Engines depend on this crate and on `ferrite-io`; nothing here depends
//! on an engine.

mod batch;
mod byte_reader;
mod counter;
mod engine_kind;
mod error;
mod identity;
mod key;
mod options;
mod periodic_sync;
mod poison;
mod range;
mod stats;
mod store;
#[cfg(feature = "testkit")]
pub mod testkit;

pub use batch::{BatchOp, WriteBatch};
pub use byte_reader::ByteReader;
pub use counter::{check_counter, persistable_counter, COUNTER_LIMIT};
pub use engine_kind::EngineKind;
pub use error::{Error, Result};
pub use identity::{Established, StoreIdentity, IDENTITY_FILE};
pub use key::{check_key, check_value, key_to_u64, u64_to_key, MAX_KEY_LEN, MAX_VALUE_LEN};
pub use options::{Options, SyncMode, WalRecovery};
pub use periodic_sync::PeriodicSync;
pub use poison::Poison;
pub use range::KeyRange;
pub use stats::{ApiCounters, CacheCounts, DeviceCounts, OpCounts, Stats};
pub use store::{KvStore, KvStoreExt, ScanVisitor};
