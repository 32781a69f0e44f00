//! The error type every engine returns.
//!
//! One `#[non_exhaustive]` enum for the whole API, so callers can match on
//! what they can act on (a key too large, a corrupt page, a poisoned store)
//! and engines can add detail without breaking them. Device failures keep
//! their own typed cause ([`ferrite_io::DeviceError`]), which carries the
//! path and offset.

use std::path::PathBuf;

use ferrite_io::DeviceError;

use crate::engine_kind::EngineKind;

/// Result alias for the key-value API.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error from a ferrite store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Keys must hold at least one byte.
    #[error("empty key: keys must be 1 to {} bytes", crate::MAX_KEY_LEN)]
    EmptyKey,

    #[error("key of {len} bytes exceeds the maximum of {max}")]
    KeyTooLarge { len: usize, max: usize },

    #[error("value of {len} bytes exceeds the maximum of {max}")]
    ValueTooLarge { len: usize, max: usize },

    /// A key range with no keys in it: its start is not below its end.
    #[error("empty key range: a range's start must be below its end")]
    EmptyRange,

    /// A write batch whose encoding is larger than one log record holds.
    #[error("write batch of {len} bytes exceeds the log's largest record, {max} bytes")]
    BatchTooLarge { len: usize, max: usize },

    /// A device or file operation failed; the cause names path and offset.
    #[error(transparent)]
    Device(#[from] DeviceError),

    /// Stored bytes failed a checksum or an invariant. `location` says where
    /// (file, page, offset); `reason` says what was wrong.
    #[error("corruption at {location}: {reason}")]
    Corruption { location: String, reason: String },

    /// The directory holds a store of another engine or another format version.
    #[error("{} holds {found}, not {expected}", path.display())]
    WrongFormat {
        path: PathBuf,
        expected: String,
        found: String,
    },

    /// The directory holds no ferrite store (and creation was not asked for).
    #[error("{} is not a ferrite store (no identity file); create it with create_if_missing", path.display())]
    NotAStore { path: PathBuf },

    /// A store already exists where a new one was demanded.
    #[error("{} already holds a ferrite store", path.display())]
    AlreadyExists { path: PathBuf },

    /// A write or sync failed earlier; the store can no longer promise
    /// durability and refuses every operation. Reopen it to recover from
    /// the log. `no_space` says the failure was a full device, so freeing
    /// space is what the reopen needs; `corruption` says it was bad bytes
    /// the store read (a background task met them), so a reopen will meet
    /// them too.
    #[error("store is poisoned after a failed write or sync ({cause}); reopen it to recover")]
    Poisoned {
        cause: String,
        no_space: bool,
        corruption: bool,
    },

    /// The store refused a write for want of space before changing
    /// anything: it keeps serving reads, and the writes that free space
    /// (deletes) still go through.
    #[error("store full: {reason}")]
    StoreFull { reason: String },

    /// Options that cannot work together.
    #[error("invalid options: {0}")]
    InvalidOptions(String),

    /// The operating system refused something the store needs to run (a
    /// thread, memory, a file handle); nothing about the store's data or
    /// the caller's input is wrong, and retrying later may work.
    #[error("could not get {what} from the operating system: {reason}")]
    Resource { what: String, reason: String },

    /// Bulk-load input whose keys are not strictly ascending; `index` is
    /// the first record out of order (0-based). Nothing was loaded past it.
    #[error("bulk-load input is not strictly ascending at record {index}")]
    NotAscending { index: u64 },

    /// A snapshot (or an iterator, which reads one) kept more old versions
    /// alive than the store allows while writes went on; it can no longer
    /// answer. Take a new one.
    #[error(
        "snapshot too old: it would need {needed} bytes of old versions, past the store's \
         bound of {limit}; take a new snapshot"
    )]
    SnapshotTooOld { needed: u64, limit: u64 },

    /// The store was closed before the call (a transaction that does not
    /// keep its store open, committed after the close).
    #[error("the store is closed")]
    Closed,

    /// A transaction's commit found that something it read (a key, or a
    /// range it scanned) holds other data than when it read it: another
    /// writer came between. Nothing of the transaction was written; run
    /// it again (`Store::transact` does).
    #[error("transaction conflict: {0} it read changed before it committed")]
    Conflict(String),

    /// A key of the default key space in the region a store with named
    /// keyspaces keeps for them (keys that start with `0xFF 0xFF`), or a
    /// store whose region already holds such keys asked for its first
    /// named keyspace. `key` shows the key.
    #[error(
        "key {key} lies in the region a store with named keyspaces keeps for them \
         (keys starting 0xFF 0xFF)"
    )]
    ReservedKey { key: String },

    /// A keyspace that was dropped (by this handle's store or through
    /// another handle) was used.
    #[error("keyspace {0:?} was dropped")]
    KeyspaceDropped(String),

    /// A keyspace name that is empty, too long (over 255 bytes) or the
    /// catalog cannot hold.
    #[error("invalid keyspace name {name:?}: {reason}")]
    InvalidKeyspaceName { name: String, reason: &'static str },

    /// The block-range index (RASK) refused an operation; the message says
    /// why (an inverted or overflowing range, a value it cannot store).
    #[error("rask: {0}")]
    Rask(String),

    /// A store implemented outside ferrite (a benchmark peer such as
    /// RocksDB) failed; `store` names it and `message` is its own error text.
    #[error("{store}: {message}")]
    Foreign {
        store: &'static str,
        message: String,
    },

    /// The store does not offer the operation (a benchmark peer whose
    /// adapter does not provide snapshots or compare-and-swap).
    #[error("{store} does not support {operation}")]
    Unsupported {
        store: &'static str,
        operation: &'static str,
    },

    /// The engine exists in ferrite but is not compiled into this build.
    #[error("engine {0} is not available in this build")]
    EngineUnavailable(EngineKind),

    /// The engine is not a key-value store (RASK maps block ranges; it has
    /// its own API, `ferrite_rask::DurableRask`).
    #[error("{0} is not a key-value engine; it has an API of its own")]
    NotKeyValue(EngineKind),
}

impl Error {
    /// An operating-system resource the store could not get.
    pub fn resource(what: impl Into<String>, e: impl std::fmt::Display) -> Self {
        Error::Resource {
            what: what.into(),
            reason: e.to_string(),
        }
    }

    /// Shorthand for a corruption error.
    pub fn corruption(location: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Corruption {
            location: location.into(),
            reason: reason.into(),
        }
    }

    /// True when the error comes from a lack of space: the device was full
    /// ([`DeviceError::NoSpace`]), the store refused a write
    /// ([`Error::StoreFull`]), or an earlier full device poisoned it.
    pub fn is_no_space(&self) -> bool {
        matches!(
            self,
            Error::Device(DeviceError::NoSpace { .. })
                | Error::StoreFull { .. }
                | Error::Poisoned { no_space: true, .. }
        )
    }

    /// True when the store met bad bytes: a checksum or an invariant of
    /// what it read failed ([`Error::Corruption`]), the device's own
    /// metadata is damaged, or such a failure poisoned the store earlier.
    pub fn is_corruption(&self) -> bool {
        matches!(
            self,
            Error::Corruption { .. }
                | Error::Device(DeviceError::CorruptMetadata { .. })
                | Error::Poisoned {
                    corruption: true,
                    ..
                }
        )
    }

    /// True for errors caused by the caller's input rather than the store.
    pub fn is_invalid_input(&self) -> bool {
        matches!(
            self,
            Error::EmptyKey
                | Error::EmptyRange
                | Error::KeyTooLarge { .. }
                | Error::ValueTooLarge { .. }
                | Error::BatchTooLarge { .. }
                | Error::InvalidOptions(_)
                | Error::NotAscending { .. }
                | Error::ReservedKey { .. }
                | Error::KeyspaceDropped(_)
                | Error::InvalidKeyspaceName { .. }
                | Error::Rask(_)
                | Error::NotKeyValue(_)
        )
    }
}
