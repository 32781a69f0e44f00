//! [`BTreeOptions`]: what the B+tree engine takes beside the shared
//! [`ferrite_core::Options`], and which of its designs a store runs (the
//! plain tree, TurboIndex's insert buffer, or SHORTCUT's companion).

use ferrite_core::EngineKind;

use crate::insert_buffer::InsertBufferOptions;
use crate::shortcut::ShortcutOptions;

/// Options specific to the B+tree.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct BTreeOptions {
    /// Page size in bytes: a power of two from 1 KiB to 16 KiB.
    pub page_size: usize,
    /// Checkpoint when the WAL grows past this many bytes (bounds recovery time).
    pub checkpoint_wal_bytes: u64,
    /// The TurboIndex insert buffer, or `None` for the plain B+tree. Its
    /// share of `Options::cache_bytes` is taken out of the buffer pool's.
    pub insert_buffer: Option<InsertBufferOptions>,
    /// SHORTCUT's one-shot traversal, or `None` for dependent descents.
    /// Its companion is reported beside the pool, not taken out of it, so
    /// every variant runs with the same pool.
    pub shortcut: Option<ShortcutOptions>,
    /// Store a value too long for a leaf (an overflow chain) lz4-compressed
    /// when that takes at least one page fewer (on by default). Values
    /// in leaves stay as they are: pages are read and searched in place.
    pub compress_values: bool,
    /// Relieve an overflowing leaf by laying its cells out over it and a
    /// sibling (the right one, else the left) under the same parent, when
    /// both then fit with a sixteenth of a page to spare, before splitting
    /// it (a B*-tree's redistribution; on by default).
    /// Applies to the plain B+tree: SHORTCUT's models and TurboIndex's
    /// buffered records follow keys to pages as splits place them.
    pub share_leaves: bool,
}

impl Default for BTreeOptions {
    fn default() -> Self {
        Self {
            page_size: 4096,
            checkpoint_wal_bytes: 64 << 20,
            insert_buffer: None,
            shortcut: None,
            compress_values: true,
            share_leaves: true,
        }
    }
}

ferrite_core::option_setters!(BTreeOptions {
    page_size: usize,
    checkpoint_wal_bytes: u64,
    insert_buffer: Option<InsertBufferOptions>,
    shortcut: Option<ShortcutOptions>,
    compress_values: bool,
    share_leaves: bool,
});

impl BTreeOptions {
    /// The SHORTCUT configuration with options `o`.
    pub fn with_shortcut(o: ShortcutOptions) -> Self {
        Self::default().shortcut(Some(o))
    }

    /// Which of the B+tree's designs these options run.
    pub fn engine_kind(&self) -> Result<EngineKind, String> {
        match (&self.insert_buffer, &self.shortcut) {
            (Some(_), Some(_)) => Err("the insert buffer and SHORTCUT cannot both be on".into()),
            (Some(_), None) => Ok(EngineKind::TurboIndex),
            (None, Some(_)) => Ok(EngineKind::Shortcut),
            (None, None) => Ok(EngineKind::Btree),
        }
    }

    /// Checks that the options can work together.
    pub fn validate(&self) -> Result<(), String> {
        let ps = self.page_size;
        if !ps.is_power_of_two() || !(1024..=16384).contains(&ps) {
            return Err(format!(
                "page size {ps} is not a power of two in 1 KiB..16 KiB"
            ));
        }
        if self.checkpoint_wal_bytes < 4096 {
            return Err(format!(
                "checkpoint_wal_bytes {} is below 4 KiB",
                self.checkpoint_wal_bytes
            ));
        }
        self.engine_kind()?;
        if let Some(ib) = &self.insert_buffer {
            ib.validate()?;
        }
        if let Some(sc) = &self.shortcut {
            sc.validate()?;
        }
        Ok(())
    }

    /// The TurboIndex configuration: the default insert buffer on.
    pub fn turbo() -> Self {
        Self {
            insert_buffer: Some(InsertBufferOptions::default()),
            ..Self::default()
        }
    }
}
