//! # ferrite-lsm: the LSM-tree engine (SwiftKV)
//!
//! Writes go to a WAL and a memtable; full memtables are flushed to L0
//! tables by a background thread, and a second thread compacts levels
//! (leveled, ten times per level). Tables are immutable, checksummed, and
//! carry either a classic sparse index block or a learned one: a bounded
//! piecewise linear model that predicts an entry's position within ε, so a
//! lookup reads the block the prediction falls in and searches a few
//! slots instead of binary-searching an index and then a block. Data
//! blocks are compressed (lz4 by default, zstd as an option) after the
//! index is built, so models predict positions among uncompressed blocks.
//!
//! With `partitions > 1` (SwiftKV's subtrees) the key space is split by
//! the first eight bytes modulo the partition count: one shared memtable
//! and WAL; at flush each partition's share joins its flush buffer, which
//! goes to L0 as one table once it holds a table's worth (or before the
//! WAL it needs is reused); each partition has its own levels and
//! compactions; a lookup searches one partition,
//! a scan merges all of them, and [`LsmStore::drop_partition`] deletes a
//! partition's keys by removing its tables, without tombstones.
//!
//! | module | owns |
//! |---|---|
//! | `options` | [`LsmOptions`], [`IndexKind`], [`Compression`] |
//! | `memtable` | the skip-list memtable, versions by sequence number |
//! | `table` | SSTables: `block`, `bloom`, `index` (sparse / learned), `footer`, `packing` (compressed blocks), `builder`, `reader`, `iter` |
//! | `table_space` | the one device holding all tables as page extents; the extent allocator |
//! | `block_cache` | parsed blocks under the byte budget, sharded CLOCK |
//! | `manifest` | the durable table list, two slots written in turn |
//! | `version` | an immutable set of live tables by partition and level; point lookups through it |
//! | `l0_index` | per partition, which overlapping L0 tables may hold a key (SwiftKV's L0 index) |
//! | `merge` | sources (memtable, table, level) merged newest-first |
//! | `partition_buffer` | partitions' flush buffers: flushed memtables whose share of a partition waits for a table's worth; when one goes to L0 (pure) |
//! | `compaction` | the leveled policy (pure) and the merge that rewrites tables |
//! | `build_policy` | load-aware construction: whether new tables get a model (pure) |
//! | `store` | [`LsmStore`]: write path, stalls, flush and compaction threads, recovery, `KvStore` |

mod block_cache;
mod build_policy;
mod compaction;
mod l0_index;
mod manifest;
mod memtable;
mod merge;
mod options;
mod partition_buffer;
mod range_del;
mod store;
mod table;
mod table_space;
mod version;

pub use options::{Compression, IndexKind, LoadAware, LsmOptions};
pub use store::{Devices, LevelReport, LsmReport, LsmStats, LsmStore, FORMAT_VERSION, WAL_DEVICES};

/// Table and manifest formats and the pure policies, for the fuzz
/// targets, the harness's table-build experiments and tests; not a
/// stable API.
#[cfg(feature = "bench-internals")]
pub mod internals {
    pub use crate::block_cache::{clock_victim, BlockCache};
    pub use crate::compaction::{pick_level, LevelShape};
    pub use crate::manifest::{ManifestState, TableRecord};
    pub use crate::table::block::Block;
    pub use crate::table::bloom::Bloom;
    pub use crate::table::footer::{Footer, Properties, FOOTER_LEN};
    pub use crate::table::index::Index;
    pub use crate::table::packing::{unpack, Packing};
    pub use crate::table::{BuiltTable, Table, TableBuilder};
    pub use crate::table_space::TableSpace;
}
