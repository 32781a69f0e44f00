//! SHORTCUT's background work: rebuilding the companion when splits have
//! made it stale, and physically re-laying out levels whose nodes have
//! scattered (see `crate::shortcut::relayout`).
//!
//! The worker walks the inner levels a few pages per hold of the shared
//! lock and moves nodes a chunk per hold of the write lock, so the
//! foreground waits for one chunk at most; SHORTCUT-SYNC runs the same
//! work inline, on the writer's critical path. A failed move poisons the
//! store (the tree may be half-changed); a failed walk only leaves the old
//! companion in place.

use std::sync::atomic::Ordering::Acquire;
use std::time::Duration;

use ferrite_core::Result;

use super::{Shared, State};
use crate::shortcut::relayout::{self, LevelMove};
use crate::shortcut::{Progress, Shortcut};

impl Shared {
    /// The background rebuilder of SHORTCUT's companion: waits for a
    /// poke (or checks every 100 ms), then walks the inner levels a few
    /// pages per hold of the shared lock, so writers are delayed by one
    /// chunk at most, and swaps the new companion in.
    pub(super) fn rebuild_loop(&self) {
        let Some(sc) = self.shortcut.as_ref() else {
            return;
        };
        while !self.stop.load(Acquire) {
            sc.wait(Duration::from_millis(100));
            if self.stop.load(Acquire) || self.poisoned.is_set() {
                continue;
            }
            if !sc.needs_rebuild(&self.state.read().shape) {
                continue;
            }
            let r = sc.rebuild_in_steps(&self.tree, &|step| {
                if self.stop.load(Acquire) {
                    return Ok(Progress::Stale);
                }
                let st = self.state.read();
                step(&st.shape)
            });
            match r {
                Ok(true) => {
                    if !sc.levels_to_relocate().is_empty() {
                        if let Err(e) = self.relayout_in_steps(sc) {
                            log::warn!("shortcut: background re-layout failed: {e}");
                        }
                    }
                }
                Ok(false) => {}
                Err(e) => log::warn!("shortcut: background rebuild failed: {e}"),
            }
        }
    }

    /// One walk step of a background rebuild or re-layout, under the
    /// shared lock.
    fn walk_step(&self, step: &mut crate::shortcut::WalkStep<'_>) -> Result<Progress> {
        if self.stop.load(Acquire) {
            return Ok(Progress::Stale);
        }
        let st = self.state.read();
        step(&st.shape)
    }

    /// Re-lays out, in the background, every level the policy picks: a
    /// fresh walk lists the level's nodes, which then move into their run
    /// a chunk at a time under the write lock (each chunk's pages read in
    /// beforehand under the shared lock); a last rebuild fits the
    /// companion to the new placement.
    fn relayout_in_steps(&self, sc: &Shortcut) -> Result<()> {
        let _work = ferrite_core::background::begin(ferrite_core::background::Work::Relayout);
        for level in sc.levels_to_relocate() {
            let started = std::time::Instant::now();
            // The list is taken under the write lock: a stepwise walk could
            // miss nodes that splits moved, and a re-layout must know every
            // node that holds an id in its run. Only the levels above are
            // read, mostly from the pool.
            let mut mv = {
                let mut st = self.state.write();
                let Some(nodes) = Shortcut::list_level_locked(&self.tree, &st.shape, level)? else {
                    continue;
                };
                LevelMove::plan(&self.tree, &mut st.shape, level, nodes)
            };
            while !mv.is_done() {
                if self.stop.load(Acquire) || self.poisoned.is_set() {
                    break;
                }
                {
                    let _st = self.state.read();
                    for id in mv.upcoming(relayout::CHUNK) {
                        drop(self.tree.pool.read(id));
                    }
                }
                let mut st = self.state.write();
                self.move_nodes(&mut st, &mut mv, relayout::CHUNK)
                    .inspect_err(|e| self.poison(e))?;
            }
            let (moved, skipped) = {
                let mut st = self.state.write();
                mv.finish(&self.tree, &mut st.shape)
            };
            sc.note_relayout(moved, skipped, started.elapsed());
        }
        sc.rebuild_in_steps(&self.tree, &|step| self.walk_step(step))
            .map(drop)
    }

    /// SHORTCUT-SYNC's re-layout: the same, all under the writer's lock.
    pub(super) fn relayout_locked(&self, st: &mut State, sc: &Shortcut) -> Result<()> {
        let _work = ferrite_core::background::begin(ferrite_core::background::Work::Relayout);
        for level in sc.levels_to_relocate() {
            let started = std::time::Instant::now();
            let Some(nodes) = Shortcut::list_level_locked(&self.tree, &st.shape, level)? else {
                continue;
            };
            let mut mv = LevelMove::plan(&self.tree, &mut st.shape, level, nodes);
            self.move_nodes(st, &mut mv, usize::MAX)?;
            let (moved, skipped) = mv.finish(&self.tree, &mut st.shape);
            sc.note_relayout(moved, skipped, started.elapsed());
        }
        sc.rebuild_locked(&self.tree, &st.shape)
    }

    /// Moves up to `count` nodes of `mv`, checkpointing whenever the pool
    /// needs room.
    fn move_nodes(&self, st: &mut State, mv: &mut LevelMove, count: usize) -> Result<()> {
        for _ in 0..count {
            if mv.is_done() {
                break;
            }
            if self.needs_checkpoint(st) {
                self.checkpoint(st, None)?;
            }
            mv.step(&self.tree, &mut st.shape)?;
        }
        Ok(())
    }
}
