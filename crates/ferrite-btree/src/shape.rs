//! [`Shape`]: the tree's mutable shape: its root and height, how many
//! page ids it has handed out, and which of them are free for reuse (and
//! under which rules). A plain value: the tree, the free-space chain, the
//! checkpoint and re-layouts read and change it under the store's state
//! lock.

use crate::page::PageId;

/// The mutable shape of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    pub root: PageId,
    pub height: u32,
    pub page_count: u64,
    /// Pages that can be reused for tree pages (freed overflow pages,
    /// scattered pages a re-layout left, the free-list chain's pages): the
    /// durable checkpoint may still use them, so they reach the page file
    /// only through the next checkpoint.
    pub free: Vec<PageId>,
    /// Free pages the durable checkpoint does not use either (free when
    /// it was taken, and not holding its free list): they may be written
    /// in place at once, so overflow chains take them. Sorted descending,
    /// so pops take the lowest ids and chains find runs of consecutive
    /// ids (see `overflow::take_ids`).
    pub clean: Vec<PageId>,
    /// Runs of free page ids `(first, len)` kept whole for re-layouts
    /// (see `shortcut::relayout`), so a level can move back and forth
    /// between two runs instead of growing the file each time.
    pub spare: Vec<(PageId, u64)>,
    /// Per level (0 = leaves), the run of page ids `(first, capacity)` a
    /// re-layout placed it in, if any: the next re-layout shifts the level
    /// within it while it fits.
    pub level_runs: Vec<Option<(PageId, u64)>>,
}
