//! Sorted string tables: immutable, checksummed, one version per key.
//!
//! A table is data blocks (`block`), then a meta region with a bloom
//! filter (`bloom`), an index block (`index`: sparse or learned) and
//! properties, closed by a footer (`footer`); a learned index may carry
//! block-boundary `thresholds`. `builder` writes one, projecting keys
//! for the model as they come (`projected_keys`) and compressing its
//! blocks at the end (`packing`);
//! `reader` opens one and answers lookups; `iter` walks one in order,
//! through the block cache or, for compactions, with `readahead`.

pub mod block;
pub mod bloom;
pub mod builder;
pub mod footer;
pub mod index;
pub mod iter;
pub mod packing;
pub mod projected_keys;
pub mod readahead;
pub mod reader;
pub mod thresholds;

pub use builder::{BuiltTable, TableBuilder};
pub use iter::TableIter;
pub use reader::{Found, Table};
