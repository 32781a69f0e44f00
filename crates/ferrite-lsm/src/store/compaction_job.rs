//! The compaction thread: serves the most overdue (partition, level) by
//! the pure leveled policy (`crate::compaction`), moves a lone table down
//! without rewriting it, and under load-aware construction asks the pure
//! build policy (`crate::build_policy`) whether outputs get a model. When
//! nothing is due it compacts tables made mostly of deletes, and flushes
//! a memtable holding many deletes once writes have stopped for
//! [`IDLE_FLUSH`] (a few deletes: [`IDLE_FLUSH_FEW`]), so a store left
//! idle after a mass delete gives the space back.
//!
//! A job whose inputs left the version meanwhile (a dropped partition)
//! discards its outputs; closing abandons a job in flight, whose outputs
//! no manifest names.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrite_core::Result;

use super::publish::write_table;
use super::Inner;
use crate::build_policy::{self, Candidate};
use crate::compaction::{self, Beneath, LevelShape, Pick, Step, TableShape};
use crate::options::LsmOptions;
use crate::table::Table;
use crate::version::Version;

/// How long the memtable must go without writes before the deletes of a
/// mass delete are flushed to a table for the deletes trigger to find.
pub(super) const IDLE_FLUSH: Duration = Duration::from_secs(2);

/// Deletes that make a mass delete: fewer wait for [`IDLE_FLUSH_FEW`], so
/// a store taking a delete now and then does not flush a table of a few
/// records after each.
pub(super) const MASS_DELETES: u64 = 1024;

/// How long a memtable holding a few deletes must go without writes.
pub(super) const IDLE_FLUSH_FEW: Duration = Duration::from_secs(60);

/// What the policy sees of partition `p`'s levels (L0's tables counted as
/// sorted runs: a flush's pieces are one).
fn shape(v: &Version, p: usize) -> Vec<LevelShape> {
    v.levels(p)
        .iter()
        .enumerate()
        .map(|(l, ts)| LevelShape {
            tables: if l == 0 { v.l0_run_count(p) } else { ts.len() },
            bytes: v.level_bytes(p, l),
        })
        .collect()
}

/// Whether an idle memtable is flushed: it holds [`MASS_DELETES`] deletes
/// and no write has reached it for [`IDLE_FLUSH`], or any deletes and
/// none for [`IDLE_FLUSH_FEW`].
pub(super) fn idle_flush_due(deletes: u64, idle: Duration) -> bool {
    (deletes >= MASS_DELETES && idle >= IDLE_FLUSH) || (deletes > 0 && idle >= IDLE_FLUSH_FEW)
}

impl Inner {
    /// The (partition, level, table) the deletes trigger picks, if any.
    fn deletes_compaction(&self, v: &Version) -> Option<(usize, usize, usize)> {
        (0..v.parts.len()).find_map(|p| {
            let shape: Vec<Vec<TableShape>> = v
                .levels(p)
                .iter()
                .map(|ts| {
                    ts.iter()
                        .map(|t| TableShape {
                            entries: t.footer.entries,
                            deletes: u64::from(t.footer.deletes),
                        })
                        .collect()
                })
                .collect();
            compaction::pick_for_deletes(&shape).map(|(l, i)| (p, l, i))
        })
    }

    /// Rotates the memtable for a flush if [`idle_flush_due`]; `seen` is the (memtable, newest
    /// sequence number) last observed and when.
    fn flush_if_idle(&self, seen: &mut Option<(u64, u64, Instant)>) -> Result<()> {
        let mem = self.current.read().mem.clone();
        let now = (mem.id(), mem.max_seq());
        match *seen {
            Some((id, seq, since)) if (id, seq) == now => {
                if idle_flush_due(mem.deletes(), since.elapsed()) {
                    let mut w = self.writer.lock();
                    // Checked again under the writer lock: a write may
                    // have come meanwhile.
                    let room = self.current.read().imms.len() < self.opts.max_immutable;
                    if room && w.mem.id() == now.0 && w.mem.max_seq() == now.1 && !w.mem.is_empty()
                    {
                        self.rotate(&mut w)?;
                    }
                    *seen = None;
                }
            }
            _ => *seen = Some((now.0, now.1, Instant::now())),
        }
        Ok(())
    }

    /// The most overdue (partition, level), if any.
    pub(super) fn due_compaction(&self, v: &Version) -> Option<(usize, usize, f64)> {
        (0..v.parts.len())
            .filter_map(|p| {
                compaction::pick_level(&shape(v, p), &self.opts).map(|(l, score)| (p, l, score))
            })
            .max_by(|a, b| a.2.total_cmp(&b.2))
    }

    /// A clean close's last compactions: each partition's L0 merged into
    /// L1 where [`compaction::l0_due_at_close`] says so. Runs beside the
    /// background thread: whichever installs second finds its inputs gone
    /// and drops its outputs, so the loop looks again.
    pub(super) fn compact_l0_for_close(&self) -> Result<()> {
        for _ in 0..4 {
            let v = self.current.read().version.clone();
            let due: Vec<usize> = (0..v.parts.len())
                .filter(|&p| compaction::l0_due_at_close(&shape(&v, p), &self.opts))
                .collect();
            if due.is_empty() {
                break;
            }
            drop(v);
            for p in due {
                let v = self.current.read().version.clone();
                self.compact(v, p, 0, None)?;
            }
        }
        Ok(())
    }

    pub(super) fn compaction_loop(&self) {
        let mut seen = None;
        loop {
            if self.shutting_down() || self.poisoned.is_set() {
                return;
            }
            let v = self.current.read().version.clone();
            let (part, level, pick) = match self.due_compaction(&v) {
                Some((part, level, _)) => (part, level, None),
                None => match self.deletes_compaction(&v) {
                    Some((part, level, table)) => (part, level, Some(table)),
                    None => {
                        // Not held while asleep: a version pins its tables,
                        // and a compaction running meanwhile frees its
                        // inputs as it passes them.
                        drop(v);
                        if let Err(e) = self.flush_if_idle(&mut seen) {
                            log::error!("flushing an idle memtable failed: {e}");
                            self.poison(&e);
                            return;
                        }
                        let mut stop = self.bg.lock();
                        if !*stop {
                            self.bg_wake.wait_for(&mut stop, Duration::from_millis(100));
                        }
                        continue;
                    }
                },
            };
            if let Err(e) = self.compact(v, part, level, pick) {
                log::error!("compaction of level {level} failed: {e}");
                self.poison(&e);
                return;
            }
        }
    }

    /// Compacts `level` of `part`: the table after the level's cursor, or
    /// with `for_deletes`, that table.
    /// Takes `v` to let it go once the job is planned: held, it would keep
    /// every input alive to the end.
    pub(super) fn compact(
        &self,
        v: Arc<Version>,
        part: usize,
        level: usize,
        for_deletes: Option<usize>,
    ) -> Result<()> {
        let _work = ferrite_core::background::begin(ferrite_core::background::Work::Compaction);
        // One job at a time: a job installs as it goes, and two merging
        // the same inputs would each install half.
        let _one = self.compacting.lock();
        let slot = part * self.opts.levels + level;
        let cursor = self.meta.lock().cursors.get(slot).cloned().flatten();
        let pick = match for_deletes {
            Some(table) => Pick::Deletes(table),
            None => Pick::After(cursor.as_deref()),
        };
        let Some(job) = compaction::plan(&v, part, level, pick) else {
            return Ok(());
        };
        let ids: Vec<u64> = job.upper.iter().chain(&job.lower).map(|t| t.id).collect();
        if !self.current.read().version.contains_all(&ids) {
            // Planned on a version another job has since moved on from.
            return Ok(());
        }
        if let Some(last) = job.upper.iter().map(|t| t.largest()).max() {
            if let Some(c) = self.meta.lock().cursors.get_mut(slot) {
                *c = Some(last.to_vec());
            }
        }
        if job.is_move() {
            let t = job.upper[0].clone();
            // Same table, one level down: no bytes move.
            self.install_move(&t, part, level + 1)?;
            self.counters.moves.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let opts = self.output_options(&job);
        // What the end of the job reports, taken now: the job and the
        // version let go of the inputs before the merge starts.
        let uses: Vec<(usize, (f64, f64))> = [(level, &job.upper), (level + 1, &job.lower)]
            .into_iter()
            .filter(|(_, tables)| !tables.is_empty())
            .map(|(lvl, tables)| (lvl, mean_use(tables)))
            .collect();
        let input_bytes = job.input_bytes();
        let beneath = Beneath::of(&v, &job);
        drop(v);
        // Outputs not installed yet, and inputs not yet replaced.
        let mut pending: Vec<(usize, usize, Arc<Table>)> = Vec::new();
        let mut inputs: Vec<Arc<Table>> = job.upper.iter().chain(&job.lower).cloned().collect();
        let mut written = 0u64;
        let finished = compaction::merge(job, &beneath, &opts, &mut |step| {
            if self.shutting_down() {
                // Closing abandons the job; what it has not installed is
                // in no manifest.
                return Ok(false);
            }
            match step {
                Step::Table(built) => {
                    written += built.bytes.len() as u64;
                    self.count_build(&built);
                    if built.training_micros > 0 && built.entries > 0 {
                        let ns = built.training_micros as f64 * 1e3 / built.entries as f64;
                        let mut m = self.meta.lock();
                        m.train_ns_per_entry = 0.75 * m.train_ns_per_entry + 0.25 * ns;
                    }
                    let t = write_table(&self.space, &self.cache, self.next_table_id(), &built)?;
                    pending.push((part, level + 1, t));
                }
                Step::Through(cut) => {
                    let (done, rest): (Vec<Arc<Table>>, Vec<Arc<Table>>) =
                        inputs.iter().cloned().partition(|t| t.largest() <= cut);
                    if done.is_empty() {
                        return Ok(true);
                    }
                    self.space.sync()?;
                    if !self.install_checked(&done, &rest, &pending, None)? {
                        return Ok(false);
                    }
                    pending.clear();
                    inputs = rest;
                    self.counters
                        .partial_installs
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(true)
        })?;
        let installed = finished && {
            self.space.sync()?;
            self.install(&inputs, &pending, None)?
        };
        if !installed {
            // Abandoned (closing), or an input left the version meanwhile
            // (a dropped partition): what was not installed goes.
            for (_, _, t) in &pending {
                t.mark_obsolete();
            }
            return Ok(());
        }
        {
            // The consumed tables' lookups and lifetimes feed their levels.
            let mut m = self.meta.lock();
            for (lvl, (c, t)) in uses {
                if let Some(h) = m.history.get_mut(lvl) {
                    h.observe(c, t);
                }
            }
        }
        let c = &self.counters;
        c.compactions.fetch_add(1, Ordering::Relaxed);
        c.compaction_read.fetch_add(input_bytes, Ordering::Relaxed);
        c.compaction_written.fetch_add(written, Ordering::Relaxed);
        Ok(())
    }

    /// The options a compaction writes its outputs with: the configured
    /// index, or under load-aware construction the policy's choice.
    fn output_options(&self, job: &compaction::Job) -> LsmOptions {
        let mut opts = self.opts.clone();
        let Some(la) = opts.load_aware.filter(|_| opts.index.is_learned()) else {
            return opts;
        };
        let inputs: Vec<Arc<Table>> = job.upper.iter().chain(&job.lower).cloned().collect();
        let (c, t) = mean_use(&inputs);
        let entries: u64 = inputs.iter().map(|x| x.footer.entries).sum();
        let m = self.meta.lock();
        let cand = Candidate {
            lookups: c,
            lifetime_secs: t,
            saving_secs: la.saving_ns * 1e-9,
            training_secs: m.train_ns_per_entry * 1e-9 * entries as f64
                / inputs.len().max(1) as f64,
        };
        let level = m.history.get(job.level + 1).copied().unwrap_or_default();
        drop(m);
        if build_policy::should_learn(&cand, &level) {
            self.counters.learned_builds.fetch_add(1, Ordering::Relaxed);
        } else {
            self.counters.sparse_builds.fetch_add(1, Ordering::Relaxed);
            opts.index = crate::options::IndexKind::Sparse;
        }
        opts
    }

    fn install_move(&self, t: &Arc<Table>, part: usize, to: usize) -> Result<()> {
        let mut meta = self.meta.lock();
        let cur = self.current.read().clone();
        if !cur.version.contains_all(&[t.id]) {
            return Ok(());
        }
        self.publish(
            &mut meta,
            cur.version.edit(&[t.id], &[(part, to, t.clone())]),
            None,
        )
    }
}

/// Mean lookups and lifetime (seconds) of `tables`.
fn mean_use(tables: &[Arc<Table>]) -> (f64, f64) {
    let n = tables.len().max(1) as f64;
    let c = tables
        .iter()
        .map(|t| t.lookups.load(Ordering::Relaxed) as f64)
        .sum::<f64>()
        / n;
    let t = tables
        .iter()
        .map(|t| t.created.elapsed().as_secs_f64())
        .sum::<f64>()
        / n;
    (c, t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mass_delete_is_flushed_soon_a_few_deletes_late() {
        let s = Duration::from_secs;
        assert!(!idle_flush_due(0, s(3600)), "nothing to give back");
        assert!(!idle_flush_due(MASS_DELETES, s(1)));
        assert!(idle_flush_due(MASS_DELETES, s(2)));
        assert!(!idle_flush_due(10, s(59)));
        assert!(idle_flush_due(10, s(60)));
    }
}
