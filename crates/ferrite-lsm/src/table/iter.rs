//! In-order iteration over one table, block after block.
//!
//! Lookups' and scans' iterators read through the block cache; a
//! sequential iterator (compactions, checks) reads ahead in long device
//! reads and leaves the cache as it found it (see [`super::readahead`]).

use std::sync::Arc;

use ferrite_core::Result;

use super::block::Block;
use super::readahead::Readahead;
use super::reader::Table;

/// A position in a table; `peek` borrows from the held block.
pub struct TableIter {
    table: Arc<Table>,
    at: Option<(usize, Arc<Block>, usize)>,
    /// `Some` for a sequential pass.
    ahead: Option<Readahead>,
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
        })
    }

    /// Positioned at the table's first entry, for one pass over all of
    /// it with readahead, around the block cache.
    pub fn sequential(table: Arc<Table>) -> Result<Self> {
        let mut it = Self {
            table,
            at: None,
            ahead: Some(Readahead::new()),
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
        self.at = if slot + 1 < blk.len() {
            Some((b, blk, slot + 1))
        } else {
            self.block_from(b + 1)?
        };
        Ok(())
    }

    /// The first entry of block `b`, or `None` past the last block.
    fn block_from(&mut self, b: usize) -> Result<Option<(usize, Arc<Block>, usize)>> {
        match &mut self.ahead {
            None => self.table.first_of_block(b),
            Some(_) if b >= self.table.block_count() => Ok(None),
            Some(ahead) => Ok(Some((b, self.table.block_ahead(b, ahead)?, 0))),
        }
    }
}
