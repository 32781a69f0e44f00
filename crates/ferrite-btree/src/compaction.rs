//! When an idle tree is rebuilt smaller: the policy, as pure functions of
//! what the store observes.
//!
//! Deletes never merge pages (see `tree`), so a tree that lost most of its
//! pairs — a mass expiry in the server, a dropped prefix — keeps every leaf
//! it ever had. Compaction gives that space back: once the store has been
//! quiet for [`QUIET`] after at least [`MIN_DELETES`] deletes, it reads the
//! live pairs (at most [`MAX_LIVE_BYTES`]), and if they fill less than
//! [`MAX_FILL`] of the tree's pages it bulk-loads them into a fresh tree
//! and frees every old page (`store::compactor` does the work).
//!
//! Invariants: a store that is writing is never compacted (the live
//! pairs are read a megabyte per hold of the shared lock, and a write
//! between two reads abandons the attempt; the rebuild holds the write
//! lock for as long as it copies); a tree is only rebuilt
//! when the rebuild needs under a quarter of its pages, so compaction
//! cannot repeat on a tree it just built.

use std::time::Duration;

/// How long without a write before an idle store looks at its tree.
pub const QUIET: Duration = Duration::from_secs(2);

/// Deletes since the last look that make another look worth its walk.
pub const MIN_DELETES: u64 = 1024;

/// The most pairs' bytes a compaction copies (the copy is held in memory
/// and the rebuild under the write lock); a larger tree is left as it is.
pub const MAX_LIVE_BYTES: u64 = 64 << 20;

/// The live bytes over the tree's page bytes below which it is rebuilt.
pub const MAX_FILL: f64 = 0.25;

/// Tree pages below which a rebuild is not worth a checkpoint.
pub const MIN_PAGES: u64 = 64;

/// Leaf fill of the rebuilt tree: room for inserts before pages split.
pub const REBUILD_FILL: f64 = 0.8;

/// Whether an idle store should read its tree to judge it: quiet for
/// `quiet` after `deletes` deletes since its last look.
pub fn worth_a_look(quiet: Duration, deletes: u64) -> bool {
    quiet >= QUIET && deletes >= MIN_DELETES
}

/// Whether a tree of `tree_pages` pages of `page_size` bytes holding
/// `live_bytes` of keys and values should be rebuilt.
pub fn worth_rebuilding(live_bytes: u64, tree_pages: u64, page_size: u64) -> bool {
    tree_pages >= MIN_PAGES
        && live_bytes <= MAX_LIVE_BYTES
        && (live_bytes as f64) < MAX_FILL * (tree_pages * page_size) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_quiet_store_after_many_deletes_looks() {
        assert!(worth_a_look(QUIET, MIN_DELETES));
        assert!(!worth_a_look(QUIET / 2, MIN_DELETES * 10));
        assert!(!worth_a_look(QUIET * 10, MIN_DELETES - 1));
    }

    #[test]
    fn only_a_mostly_empty_tree_of_some_size_is_rebuilt() {
        let ps = 4096;
        // A mass expiry: 40k leaves, a few MB left.
        assert!(worth_rebuilding(3 << 20, 40_000, ps));
        // A tree as inserts leave it (about two thirds full).
        assert!(!worth_rebuilding(2 * 40_000 * ps / 3, 40_000, ps));
        // Too small to bother, or too much to copy.
        assert!(!worth_rebuilding(0, MIN_PAGES - 1, ps));
        assert!(!worth_rebuilding(MAX_LIVE_BYTES + 1, 10_000_000, ps));
    }

    #[test]
    fn a_rebuilt_tree_is_never_due_again() {
        // The rebuild fills leaves to REBUILD_FILL; what it writes can be
        // due only if the rebuild's pages held under MAX_FILL.
        let ps = 4096u64;
        for live in [1u64 << 10, 1 << 20, 1 << 26] {
            let pages = ((live as f64 / (REBUILD_FILL * ps as f64)).ceil() as u64).max(1);
            assert!(!worth_rebuilding(live, pages, ps), "{live} bytes");
        }
    }
}
