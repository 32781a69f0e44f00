//! In-order iteration over one table, block after block, upwards or (for
//! reverse scans) downwards.
//!
//! Lookups' and scans' iterators read through the block cache, a forward
//! scan in growing runs once it has read two blocks in a row; a
//! sequential iterator (compactions, checks) reads ahead in long device
//! reads and leaves the cache as it found it (see [`super::readahead`]).

use std::ops::Bound;
use std::sync::Arc;

use ferrite_core::Result;

use super::block::Block;
use super::readahead::{Readahead, ScanRuns};
use super::reader::Table;

/// A position in a table; `peek` borrows from the held block.
pub struct TableIter {
    table: Arc<Table>,
    at: Option<(usize, Arc<Block>, usize)>,
    /// `Some` for a sequential pass.
    ahead: Option<Readahead>,
    /// A forward scan's readahead.
    scan: ScanRuns,
    /// Walks downwards: `advance` moves to the previous entry.
    rev: bool,
}

impl TableIter {
    /// Positioned at the first entry `>= start` (or the first entry),
    /// reading through the block cache.
    pub fn new(table: Arc<Table>, start: Option<&[u8]>) -> Result<Self> {
        let at = match start {
            Some(k) => table.seek(k, true)?,
            None => table.first_of_block(0)?,
        };
        Ok(Self {
            table,
            at,
            ahead: None,
            scan: ScanRuns::default(),
            rev: false,
        })
    }

    /// Positioned at the last entry within `end` (or the last entry),
    /// walking downwards, reading through the block cache.
    pub fn new_rev(table: Arc<Table>, end: Bound<&[u8]>) -> Result<Self> {
        let last = |t: &Table| -> Result<Option<(usize, Arc<Block>, usize)>> {
            let Some(b) = t.block_count().checked_sub(1) else {
                return Ok(None);
            };
            let blk = t.block(b)?;
            Ok(blk.len().checked_sub(1).map(|slot| (b, blk, slot)))
        };
        let mut it = Self {
            table,
            at: None,
            ahead: None,
            scan: ScanRuns::default(),
            rev: true,
        };
        it.at = match end {
            Bound::Unbounded => last(&it.table)?,
            Bound::Included(k) | Bound::Excluded(k) => match it.table.seek(k, true)? {
                // The first entry at or above `k`: it, if `k` is included
                // and here, else the one before.
                Some(pos) => {
                    let here = pos.1.entry(pos.2).is_some_and(|(e, _)| e == k);
                    if here && matches!(end, Bound::Included(_)) {
                        Some(pos)
                    } else {
                        it.before(pos)?
                    }
                }
                None => last(&it.table)?,
            },
        };
        Ok(it)
    }

    /// The entry before `pos`, if any.
    fn before(
        &self,
        (b, blk, slot): (usize, Arc<Block>, usize),
    ) -> Result<Option<(usize, Arc<Block>, usize)>> {
        if slot > 0 {
            return Ok(Some((b, blk, slot - 1)));
        }
        let mut b = b;
        while let Some(prev) = b.checked_sub(1) {
            let blk = self.table.block(prev)?;
            if let Some(slot) = blk.len().checked_sub(1) {
                return Ok(Some((prev, blk, slot)));
            }
            b = prev;
        }
        Ok(None)
    }

    /// The table's largest sequence number: what its entries count as
    /// against range deletes.
    pub fn seq(&self) -> u64 {
        self.table.max_seq()
    }

    /// Positioned at the table's first entry, for one pass over all of
    /// it with readahead, around the block cache.
    pub fn sequential(table: Arc<Table>) -> Result<Self> {
        let mut it = Self {
            table,
            at: None,
            ahead: Some(Readahead::new()),
            scan: ScanRuns::default(),
            rev: false,
        };
        it.at = it.block_from(0)?;
        Ok(it)
    }

    pub fn peek(&self) -> Option<(&[u8], Option<&[u8]>)> {
        let (_, blk, slot) = self.at.as_ref()?;
        blk.entry(*slot)
    }

    pub fn advance(&mut self) -> Result<()> {
        let Some((b, blk, slot)) = self.at.take() else {
            return Ok(());
        };
        if self.rev {
            self.at = self.before((b, blk, slot))?;
            return Ok(());
        }
        self.at = if slot + 1 < blk.len() {
            Some((b, blk, slot + 1))
        } else {
            self.block_from(b + 1)?
        };
        Ok(())
    }

    /// The first entry of block `b`, or `None` past the last block.
    fn block_from(&mut self, b: usize) -> Result<Option<(usize, Arc<Block>, usize)>> {
        if b >= self.table.block_count() {
            return Ok(None);
        }
        match &mut self.ahead {
            None => match self.scan.next() {
                None => self.table.first_of_block(b),
                Some(run) => {
                    let (blk, read) = self.table.block_in_run(b, &mut self.scan.run, run, true)?;
                    if read {
                        self.scan.grow();
                    }
                    Ok(Some((b, blk, 0)))
                }
            },
            Some(ahead) => Ok(Some((b, self.table.block_ahead(b, ahead)?, 0))),
        }
    }
}
