//! # ferrite-zkv: ZKV, a B+-tree key-value engine for zoned storage
//!
//! ZKV (Hu et al., "Co-design of B+-tree Index with Emerging Zone
//! Interfaces for Small-sized Key-value Pairs") keeps a B+-tree's read path
//! while turning small random updates into large zone appends, through
//! three in-memory buffers:
//!
//! - the **merged filter** (`merged_filter`): recent pairs, sorted, with
//!   per-node access counters; the coldest nodes leave as sorted batches
//!   (the `batch_array`) that writers insert cooperatively;
//! - **adaptive delta buffers** (`adb`): up to 16 unsorted pairs per leaf
//!   in 4/8/16-pair classes, merged into a new leaf page when full or when
//!   their memory runs short (fullest first);
//! - **ZFlushers** (`flusher`): per open zone, a FIFO write sequencer that
//!   hands out page ids at the write pointer, a ring merger writing groups
//!   of pages, and a SIEVE read cache (`read_cache`).
//!
//! The Z+-tree (`tree`) keeps inner nodes and leaf metadata in memory and
//! leaf pages (`page`) on zones. Durability comes from a WAL on its own
//! zones (`zone_wal`) and versioned MetaLog snapshots (`metalog`);
//! values above the inline limit live in a value log (`vlog`). Beyond
//! the paper, zones are reclaimed (`gc_policy`, `zone_space`): valid
//! pages are counted per zone, victims chosen by a pure policy, live leaves
//! migrated, and zones reset once a MetaLog no longer refers to them.
//!
//! The same crate runs the paper's baselines on the same device, WAL and
//! MetaLog ([`Variant`]): a B+-tree with an LRU buffer pool writing
//! copy-on-write leaves, and the BD-tree with delta chains.
//!
//! Everything touches the device through [`ferrite_io::ZonedDevice`], which
//! refuses any write that is not at a write pointer.

mod adb;
mod batch_array;
mod block_tail;
mod flusher;
mod gc_policy;
mod lru_pool;
mod merged_filter;
mod metalog;
mod options;
mod page;
mod page_io;
mod pair;
mod read_cache;
mod store;
mod tree;
mod vlog;
mod zone_space;
mod zone_wal;

pub use gc_policy::GcPolicy;
pub use options::{Variant, ZkvOptions};
pub use store::{ZkvStats, ZkvStore, FORMAT_VERSION};

/// On-zone formats and recovery pieces the fuzz targets, corruption
/// tests and the harness reach into; not a stable API.
#[cfg(feature = "bench-internals")]
pub mod internals {
    pub use crate::metalog::{encode_frame, Snapshot as MetaSnapshot};
    pub use crate::page::{encode as encode_page, LeafPage, MAGIC as PAGE_MAGIC};
    pub use crate::pair::{Bytes, Pair, Val};
    pub use crate::vlog::{loc_addr, loc_len, location, scan as scan_vlog};
    pub use crate::zone_space::Role;
    pub use crate::zone_wal::{mark as wal_mark, WalPosition};
}
