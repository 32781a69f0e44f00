//! # The data model: Redis's types over one ordered store
//!
//! Every key has one metadata record (its type, expiry, and a string's
//! bytes or a collection's version and size); each element of a hash,
//! set, sorted set or list is a record of its own, ordered under the
//! collection's version. A point read is one lookup, a range one ordered
//! scan, and overwriting, deleting, flushing or expiring a collection of
//! any size writes its metadata only: its elements are left to the
//! sweeper, which removes them in bounded passes. Byte layouts:
//! `docs/format/redis-types.md`.
//!
//! | module | owns |
//! |---|---|
//! | `layout` | where each record lives in the store's key space (pure) |
//! | `meta` | the metadata record (pure) |
//! | `score` | doubles in an order-preserving encoding (pure) |
//! | `keyspace` | [`Keyspace`]: the lock, slots of databases, key counts, versions |
//! | `change` | [`Change`]: a commit's effect as bytes a replica applies (pure) |
//! | `tx` | [`Tx`]: reads under a transaction's writes, one batch at commit, savepoints |
//! | `object` | [`Found`]: a key as found; `Tx::set`, the one writer of metadata |
//! | `elements` | the element records of hashes, sets and sorted sets |
//! | `listpack` | Redis's listpack byte layout (pure) |
//! | `hash` | a hash packed in its metadata record or as field records |
//! | `list` | a list's items packed in one record or a record each |
//! | `hints` | where a collection's live elements begin, so pops skip past earlier pops |
//! | `expiry` | the active expiry cycle: one bounded pass over due keys |
//! | `sweeper` | removing dead collections' elements in bounded passes |
//! | `watch` | the `WATCH` registry |
//! | `stats` | the model's counters |
//!
//! Atomicity: every command runs in a [`Tx`] holding the keyspace lock,
//! exclusively if it writes, so no other command runs between its reads
//! and its writes, and its writes reach the store as one atomic batch.

pub mod change;
mod elements;
pub mod expiry;
mod hash;
mod hints;
mod keyspace;
pub mod layout;
mod list;
mod listpack;
mod meta;
mod object;
mod pop_queue;
mod score;
mod stats;
pub mod sweeper;
mod tx;
mod watch;

pub use change::Change;
pub use hash::{PackLimits, MAX_PACK_BYTES};
pub use keyspace::{ChangeFeed, Keyspace, EVENT_CLASSES};
pub use layout::{successor, DATABASES, MAX_MEMBER, MAX_USER_KEY};
pub use list::{ListEnd, ListLimits};
pub use listpack::{parse_int, Listpack};
pub use meta::{Body, Coll, Kind, Meta};
pub use object::Found;
pub use score::decode as decode_score;
pub use stats::ModelCounts;
pub use tx::{Committed, Event, Savepoint, Tx};

/// What a scan calls for each record (a key or member, and its value),
/// until it breaks.
pub type Visit<'a> = dyn FnMut(&[u8], &[u8]) -> std::ops::ControlFlow<()> + 'a;

/// Members (hash fields, set or sorted-set members) with their values.
pub type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// Why a data-model operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The key holds a value of another type than the command works on.
    #[error("WRONGTYPE Operation against a key holding the wrong kind of value")]
    WrongType,
    #[error("key is too long ({len} bytes; this server takes keys up to {max})")]
    KeyTooLong { len: usize, max: usize },
    #[error("member is too long ({len} bytes; this server takes members and fields up to {max})")]
    MemberTooLong { len: usize, max: usize },
    #[error(
        "string exceeds maximum allowed size ({len} bytes; this server takes values up to {max})"
    )]
    ValueTooLarge { len: usize, max: usize },
    /// A write in a read transaction: a command declared as reading wrote.
    #[error("a read-only command tried to write")]
    ReadOnly,
    /// A record read back from the store is not one the model writes.
    #[error("corrupt record: {0}")]
    Corrupt(String),
    #[error(transparent)]
    Store(#[from] ferrite::Error),
}

impl ModelError {
    /// Whether the failure is the store's (the whole unit of work must
    /// fail), not the command's.
    pub fn is_storage(&self) -> bool {
        matches!(self, ModelError::Store(_) | ModelError::Corrupt(_))
    }
}

/// Milliseconds since the Unix epoch, the model's clock.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
pub(crate) mod testing {
    //! A keyspace over a fresh store in a temporary directory.
    use std::ops::Deref;

    use super::Keyspace;

    pub struct TestKeyspace {
        ks: Keyspace,
        _dir: tempfile::TempDir,
    }

    impl Deref for TestKeyspace {
        type Target = Keyspace;
        fn deref(&self) -> &Keyspace {
            &self.ks
        }
    }

    pub fn keyspace() -> TestKeyspace {
        let dir = tempfile::tempdir().expect("temporary directory");
        let store = ferrite::Config::builder(ferrite::EngineKind::Lsm)
            .open(dir.path())
            .expect("open");
        TestKeyspace {
            ks: Keyspace::open(store).expect("keyspace"),
            _dir: dir,
        }
    }

    pub fn keyspace_on(store: ferrite::Store) -> Keyspace {
        Keyspace::open(store).expect("keyspace")
    }
}
