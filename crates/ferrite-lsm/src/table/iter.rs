//! In-order iteration over one table, block after block.

use std::sync::Arc;

use ferrite_core::Result;

use super::block::Block;
use super::reader::Table;

/// A position in a table; `peek` borrows from the held block.
pub struct TableIter {
    table: Arc<Table>,
    at: Option<(usize, Arc<Block>, usize)>,
}

impl TableIter {
    /// Positioned at the first entry `>= start` (or the first entry).
    pub fn new(table: Arc<Table>, start: Option<&[u8]>) -> Result<Self> {
        let at = match start {
            Some(k) => table.seek(k, true)?,
            None => table.first_of_block(0)?,
        };
        Ok(Self { table, at })
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
            self.table.first_of_block(b + 1)?
        };
        Ok(())
    }
}
