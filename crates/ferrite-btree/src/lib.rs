//! # ferrite-btree: the disk B+tree engine
//!
//! A B+tree of slotted pages (4 KiB by default) on an O_DIRECT page file,
//! cached in a buffer pool that never exceeds its byte budget, made durable
//! by a write-ahead log and atomic checkpoints. It is the base that
//! SHORTCUT, TurboIndex and ZKV extend.
//!
//! | module | owns |
//! |---|---|
//! | `page` | the page layout and in-page operations (no I/O) |
//! | `clock` | buffer-pool victim choice and the cold dirty frames cleaned beside a dirty one, pure policies |
//! | `buffer_pool` | frames, page table, pins, free list, spilling dirty victims in batches |
//! | `spill_log` | which slot of the spill file holds each spilled page; slots handed out in address order |
//! | `tree` | search, insert with splits, delete, scan, verify |
//! | `overflow` | chains of overflow pages for long values: contiguous allocation, batched reads |
//! | `bulk_load` | bottom-up construction from sorted input |
//! | `compaction` | when an idle, mostly emptied tree is rebuilt smaller, a pure policy |
//! | `meta` | the two meta pages naming the durable root |
//! | `checkpoint` | installing a checkpoint through the double-write file; its recovery |
//! | `options` | [`BTreeOptions`]: page size, checkpoint interval, which design runs |
//! | `store` | [`BTreeStore`]: opening and recovery, the write path, checkpoints, compaction, SHORTCUT's background work, stats, `KvStore` |
//! | `insert_buffer` | TurboIndex: buffered records of non-resident leaves, the LIRS-style hot-page detector, the write-miss hook |
//! | `carry_over` | what a checkpoint carries over: buffered records, a batch in flight |
//! | `page_map` | hash maps keyed by page id |
//! | `shortcut` | SHORTCUT: per-level keyless models, phantom maps, one-shot prefetching descent, stash and rebuilds |

mod buffer_pool;
mod bulk_load;
mod carry_over;
mod checkpoint;
mod clock;
mod compaction;
mod free_space;
mod insert_buffer;
mod meta;
mod options;
mod overflow;
mod page;
mod page_map;
#[cfg(test)]
mod probe_device;
mod shape;
mod shortcut;
mod spill_log;
mod store;
mod structure_version;
mod tree;

pub use insert_buffer::{BufferCounters, InsertBufferOptions};
pub use options::BTreeOptions;
pub use shortcut::{ShortcutOptions, ShortcutReport, Variant as ShortcutVariant};
pub use store::{BTreeStats, BTreeStore, Devices, FileCounts, InsertBufferStats, FORMAT_VERSION};
pub use tree::{max_key_len, LevelFill};

/// Page, meta-page and carry-over formats and the insert buffer's parts,
/// for the fuzz targets, corruption tests and the harness; not a stable
/// API.
#[cfg(feature = "bench-internals")]
pub mod internals {
    pub use crate::carry_over::decode as decode_carry_over;
    pub use crate::free_space::{ChainRef, FreeSpace};
    pub use crate::insert_buffer::{InsertBuffer, Offer};
    pub use crate::meta::{Carried, Meta as MetaPage};
    pub use crate::page::{decode as decode_page, search as search_page, DecodedCell, DecodedPage};
    pub use crate::store::HitPath;
}
