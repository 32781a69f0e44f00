//! Physical re-layout: putting a level's nodes back into one run of page
//! ids in key order.
//!
//! Splits place new nodes past the end of the page file, so every split
//! leaves the level's phantom map with up to two more runs. A re-layout
//! moves every node of a level, in key order, to a fresh range of
//! consecutive page ids (copy, point the parent at the new id, and for a
//! leaf its left sibling; see `Tree::relocate`), after which the map is a
//! single run again: its memory follows the discontinuities created since
//! the last re-layout. The moves are made a chunk at a time under the
//! tree's write lock, so a reader or writer waits for one chunk at most;
//! a node that changed since the walk that listed it is left where it is
//! (it stays a discontinuity until the next re-layout). Moved pages reach
//! the page file through ordinary checkpoints, so a crash before the next
//! one simply recovers the old layout.
//!
//! Where a level moves ([`LevelMove::plan`]): a level keeps a *run* of page
//! ids with half as much room again as it had nodes when the run was made.
//! While the level fits its run, a re-layout shifts it in place: node `i`
//! goes to `first + i`, processed from the last node down, so a node only
//! ever moves up into an id that its later neighbours have already left
//! (the tree never merges nodes, so no node's ordinal falls) — the
//! file-system INSERT_RANGE of the paper, done by copying. When the level
//! outgrows its run, it moves to a new run (the smallest spare run that
//! holds it, else fresh ids at the end of the file) and the old run's ids
//! become spare. Ids a level leaves outside its run are freed: long runs
//! stay spare for later re-layouts, scattered ids go to the free list for
//! splits. Runs and spare ids are kept by every checkpoint (see
//! `free_space`), so a restart keeps each level's run.
//!
//! Which levels to move is [`levels_due`], a pure policy.

use std::collections::HashSet;

use ferrite_core::Result;

use super::training::LevelNodes;
use crate::page::PageId;
use crate::shape::Shape;
use crate::tree::Tree;

/// Nodes moved per hold of the write lock.
pub const CHUNK: usize = 4;

/// Freed runs at least this long are kept whole for later re-layouts.
pub const MIN_SPARE_RUN: u64 = 16;

/// The levels (indexes into `layout`, 0 = leaves) whose discontinuities
/// exceed `threshold` × their nodes. `layout[l]` is (discontinuities,
/// nodes) of level `l`.
pub fn levels_due(layout: &[(usize, u64)], threshold: f64) -> Vec<usize> {
    layout
        .iter()
        .enumerate()
        .filter(|(_, &(d, n))| d > 0 && d as f64 > threshold * n as f64)
        .map(|(l, _)| l)
        .collect()
}

/// One level's re-layout in progress.
pub struct LevelMove {
    level: usize,
    nodes: LevelNodes,
    first: PageId,
    cap: u64,
    /// Where each listed node is now.
    cur: Vec<PageId>,
    /// Run ids holding a listed node.
    occupied: HashSet<PageId>,
    /// The run the level leaves, if it moves to a new one.
    old_run: Option<(PageId, u64)>,
    /// Ids left outside the run.
    left_behind: Vec<PageId>,
    /// Nodes still to visit are `0..next`.
    next: usize,
    moved: u64,
    skipped: u64,
}

impl LevelMove {
    /// Chooses the level's run for `nodes` (its nodes in key order) and
    /// reserves it if new. The caller holds the tree's write lock.
    pub fn plan(tree: &Tree, shape: &mut Shape, level: usize, nodes: LevelNodes) -> Self {
        let n = nodes.len() as u64;
        if shape.level_runs.len() <= level {
            shape.level_runs.resize(level + 1, None);
        }
        let current = shape.level_runs.get(level).copied().flatten();
        let (first, cap, old_run) = match current {
            Some((first, cap)) if n <= cap => (first, cap, None),
            prev => {
                let cap = n + n / 2;
                let first = tree.reserve_run(shape, cap);
                (first, cap, prev)
            }
        };
        shape.level_runs[level] = Some((first, cap));
        let cur = nodes.pages.clone();
        let occupied = cur
            .iter()
            .copied()
            .filter(|&p| (first..first + cap).contains(&p))
            .collect();
        Self {
            level,
            next: nodes.len(),
            nodes,
            first,
            cap,
            cur,
            occupied,
            old_run,
            left_behind: Vec::new(),
            moved: 0,
            skipped: 0,
        }
    }

    pub fn is_done(&self) -> bool {
        self.next == 0
    }

    /// The current pages of the next `k` nodes to visit.
    pub fn upcoming(&self, k: usize) -> Vec<PageId> {
        let lo = self.next.saturating_sub(k);
        self.cur.get(lo..self.next).unwrap_or_default().to_vec()
    }

    fn in_run(&self, p: PageId) -> bool {
        (self.first..self.first + self.cap).contains(&p)
    }

    /// Visits the next node (from the last down): moves it to its place in
    /// the run if that place is free and the tree still matches the list.
    /// The caller holds the tree's write lock.
    pub fn step(&mut self, tree: &Tree, shape: &mut Shape) -> Result<()> {
        let Some(i) = self.next.checked_sub(1) else {
            return Ok(());
        };
        self.next = i;
        let target = self.first + i as u64;
        let Some(&old) = self.cur.get(i) else {
            return Ok(());
        };
        if old == target {
            return Ok(());
        }
        if self.occupied.contains(&target) {
            self.skipped += 1;
            return Ok(());
        }
        let left = match (self.level, i.checked_sub(1)) {
            (0, Some(j)) => self.cur.get(j).copied(),
            _ => None,
        };
        let low = self.nodes.key(i).to_vec();
        if tree.relocate(shape, self.level as u32, &low, old, target, left)? {
            if self.in_run(old) {
                self.occupied.remove(&old);
            } else {
                self.left_behind.push(old);
            }
            self.occupied.insert(target);
            self.cur[i] = target;
            self.moved += 1;
        } else {
            self.skipped += 1;
        }
        Ok(())
    }

    /// Frees what the level left: ids outside its run, and the old run's
    /// ids no listed node still holds. Returns (moved, skipped).
    pub fn finish(self, tree: &Tree, shape: &mut Shape) -> (u64, u64) {
        let mut ids = self.left_behind;
        if let Some((f, c)) = self.old_run {
            let held: HashSet<PageId> = self.cur.iter().copied().collect();
            ids.extend((f..f + c).filter(|p| !held.contains(p)));
        }
        tree.release_ids(shape, ids, MIN_SPARE_RUN);
        (self.moved, self.skipped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_fragmented_levels_are_due() {
        let layout = [(120, 1000), (4, 100), (0, 3)];
        assert_eq!(levels_due(&layout, 0.05), vec![0]);
        assert_eq!(levels_due(&layout, 0.01), vec![0, 1]);
        assert!(levels_due(&layout, 0.5).is_empty());
        assert!(levels_due(&[(0, 0)], 0.0).is_empty());
    }
}
