//! [`BTreeOptions`]: what the B+tree engine takes beside the shared
//! [`ferrite_core::Options`], and which of its designs a store runs (the
//! plain tree, TurboIndex's insert buffer, or SHORTCUT's companion).

use crate::insert_buffer::InsertBufferOptions;
use crate::shortcut::ShortcutOptions;

/// Options specific to the B+tree.
#[derive(Debug, Clone, Copy, PartialEq)]
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
}

impl Default for BTreeOptions {
    fn default() -> Self {
        Self {
            page_size: 4096,
            checkpoint_wal_bytes: 64 << 20,
            insert_buffer: None,
            shortcut: None,
        }
    }
}

impl BTreeOptions {
    /// The SHORTCUT configuration with options `o`.
    pub fn shortcut(o: ShortcutOptions) -> Self {
        Self {
            shortcut: Some(o),
            ..Self::default()
        }
    }

    /// The TurboIndex configuration: the default insert buffer on.
    pub fn turbo() -> Self {
        Self {
            insert_buffer: Some(InsertBufferOptions::default()),
            ..Self::default()
        }
    }
}
