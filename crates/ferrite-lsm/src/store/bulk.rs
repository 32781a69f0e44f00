//! Bulk loading: sorted pairs written as tables straight into the bottom
//! level of an empty store, with no write-ahead log, memtable, flush or
//! compaction on the way (the copy of a checkpoint or a restore writes
//! each byte once instead of once per level).
//!
//! Invariants: the store is empty when the load starts (no memtable
//! entry, no table, no range delete) and the writer lock is held until
//! the tables are installed, so no other write interleaves; every loaded
//! pair carries one sequence number, taken from the writer, which the
//! manifest records as its last; tables written but not installed (bad
//! input, a failed write) are marked obsolete, so their extents return.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use ferrite_core::engine::{check_key, check_value, persistable_counter};
use ferrite_core::{Error, Result};

use super::publish::write_table;
use super::Inner;
use crate::table::{Table, TableBuilder};

impl Inner {
    /// Loads strictly ascending `pairs` into this empty store and returns
    /// how many; writers wait until it ends.
    pub(super) fn bulk_load(
        &self,
        pairs: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>,
    ) -> Result<u64> {
        self.check()?;
        let mut w = self.writer.lock();
        let empty = {
            let sv = self.current.read();
            w.mem.is_empty()
                && sv.imms.is_empty()
                && sv.buffers.memtables().iter().all(|m| m.is_empty())
                && sv.version.range_dels.is_empty()
                && sv.version.parts.iter().flatten().all(Vec::is_empty)
        };
        if !empty {
            return Err(Error::InvalidOptions(
                "bulk loading needs an empty store".into(),
            ));
        }
        let seq = w.next_seq;
        persistable_counter(seq + 1, "lsm sequence")?;
        let mut written: Vec<(usize, usize, Arc<Table>)> = Vec::new();
        let loaded = self.build_bottom(pairs, seq, &mut written);
        let installed = loaded.and_then(|n| {
            let mut meta = self.meta.lock();
            meta.state.last_seq = meta.state.last_seq.max(seq);
            let v = self.current.read().version.edit(&[], &written);
            self.publish(&mut meta, v, None)?;
            Ok(n)
        });
        let n = match installed {
            Ok(n) => n,
            Err(e) => {
                for (_, _, t) in &written {
                    t.mark_obsolete();
                }
                return Err(e);
            }
        };
        if n > 0 {
            w.next_seq = seq + 1;
            self.visible.store(seq, Ordering::Release);
        }
        drop(w);
        self.counters.api.count_puts(n);
        // Deeper levels may now be over their size; the compaction
        // thread judges.
        self.wake();
        Ok(n)
    }

    /// Builds and writes the tables of `pairs`, each partition's in key
    /// order at the bottom level, into `written`; the count loaded.
    fn build_bottom(
        &self,
        pairs: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>,
        seq: u64,
        written: &mut Vec<(usize, usize, Arc<Table>)>,
    ) -> Result<u64> {
        let opts = &self.opts;
        let bottom = opts.levels.saturating_sub(1);
        let mut builders: Vec<Option<TableBuilder>> = (0..opts.partitions).map(|_| None).collect();
        let mut prev: Option<Vec<u8>> = None;
        let mut n = 0u64;
        for (k, v) in pairs {
            if prev.as_ref().is_some_and(|p| *p >= k) {
                return Err(Error::NotAscending { index: n });
            }
            check_key(&k)?;
            check_value(&v)?;
            let part = opts.partition_of(&k);
            let Some(slot) = builders.get_mut(part) else {
                return Err(Error::InvalidOptions(format!(
                    "partition {part} of {} partitions",
                    opts.partitions
                )));
            };
            let b = slot.get_or_insert_with(|| {
                TableBuilder::new(opts.index, opts.bloom_bits_per_key, opts.training_threads)
                    .smaller_index(opts.smaller_index)
                    .compression(opts.compression)
            });
            b.note_seq(seq);
            b.add(&k, Some(&v));
            if b.estimated_bytes() >= opts.table_bytes {
                self.write_built(b, part, bottom, written)?;
            }
            prev = Some(k);
            n += 1;
        }
        for (part, slot) in builders.iter_mut().enumerate() {
            if let Some(b) = slot {
                self.write_built(b, part, bottom, written)?;
            }
        }
        Ok(n)
    }

    /// Finishes `b`'s table, if it holds any entry, and writes it.
    fn write_built(
        &self,
        b: &mut TableBuilder,
        part: usize,
        level: usize,
        written: &mut Vec<(usize, usize, Arc<Table>)>,
    ) -> Result<()> {
        let Some(built) = b.finish() else {
            return Ok(());
        };
        if self.shutting_down() {
            return Err(Error::InvalidOptions("store is closing".into()));
        }
        self.count_build(&built);
        let t = write_table(&self.space, &self.cache, self.next_table_id(), &built)?;
        written.push((part, level, t));
        Ok(())
    }
}
