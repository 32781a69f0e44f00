//! ZKV's own options, and the variants the experiment compares on the same
//! device, WAL and MetaLog.

use ferrite_io::ZoneGeometry;

use crate::gc_policy::GcPolicy;

/// Largest leaf page: cell offsets in a page are 16-bit.
pub const MAX_LEAF_SIZE: usize = 32 << 10;

/// Which write path the store runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// ZKV: merged filter, batch array, adaptive delta buffers, ZFlusher.
    Zkv,
    /// The paper's "B+-Tree": inner nodes in memory, an LRU buffer pool of
    /// leaf pages, dirty victims written copy-on-write to a zone's write
    /// pointer (leaf metadata is the log-structured mapping).
    BPlusTree,
    /// The paper's "BD-Tree": the B+-tree plus in-memory delta records per
    /// leaf (chains of at most `bd_chain`), consolidated into the page when
    /// a chain is full or delta memory runs short.
    BdTree,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::Zkv => "zkv",
            Variant::BPlusTree => "b+tree",
            Variant::BdTree => "bd-tree",
        }
    }
}

/// Options of the ZKV engine (and of its baselines, by `variant`).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ZkvOptions {
    pub variant: Variant,
    /// Geometry of a new device (an existing one keeps its own).
    pub geometry: ZoneGeometry,
    /// Zones in the WAL ring.
    pub wal_zones: u32,
    /// WAL instances: writers buffer records in them independently; each
    /// leaves in 4 KiB units to the one WAL ring.
    pub wal_instances: usize,
    /// Zones per MetaLog slot (there are two slots); a snapshot must fit one.
    pub meta_zones: u32,
    /// ZFlusher instances, each holding one open zone.
    pub flushers: usize,
    /// Bytes of a leaf page: 4 KiB by default, up to 32 KiB (a power of two,
    /// a multiple of the device block). A store keeps the size it was
    /// created with; its MetaLog records it.
    pub leaf_size: usize,
    /// Pages per ring-merger zone write.
    pub group_pages: usize,
    /// Bytes of pages a write sequencer holds before the merger writes
    /// (at least one group).
    pub sequencer_bytes: usize,
    /// Hits in the sequencer that send a page to the read cache on leaving.
    pub cache_threshold: u32,
    /// ADB pool instances (`M`).
    pub adb_instances: usize,
    /// Memory split merged filter : ADB : ZFlusher.
    pub split: [u32; 3],
    /// Ablation switches (ZKV variant only).
    pub merged_filter: bool,
    pub adb: bool,
    /// Insert a run of pairs per leaf per traversal (off: one pair each).
    pub batch_merge: bool,
    /// Join a nearly empty leaf with a neighbour when the two fit in one
    /// page (see `tree`); off, leaves only leave the tree once empty.
    pub leaf_joins: bool,
    /// Share an overflowing leaf's entries with a neighbour that has room
    /// instead of splitting it (see `tree`); off, every overflow splits.
    pub leaf_shares: bool,
    /// Baselines only: write evicted pages through the ZFlushers' sequencer
    /// and ring merger (the breakdown's "+ZFlusher" step) instead of one
    /// page per zone write.
    pub baseline_zflusher: bool,
    /// Pairs per merged-filter node.
    pub mf_node_pairs: usize,
    /// Values longer than this go to the value log.
    pub inline_value_max: usize,
    pub gc: GcPolicy,
    /// Free data zones kept in reserve; reclamation runs below this.
    pub gc_reserve_zones: usize,
    /// Once fewer than a quarter of the data zones are free, reclamation
    /// also runs while space amplification (bytes of data zones in use over
    /// live bytes) is above this bound.
    pub gc_space_amp: Option<f64>,
    /// WAL bytes between checkpoints (default: as much as the ring allows).
    pub checkpoint_wal_bytes: Option<u64>,
    /// BD-tree delta chain length.
    pub bd_chain: usize,
    /// Store a value-log value lz4-compressed when that makes it at least
    /// an eighth shorter (on by default); values in leaves stay as they
    /// are.
    pub compress_values: bool,
}

impl Default for ZkvOptions {
    fn default() -> Self {
        Self {
            variant: Variant::Zkv,
            geometry: ZoneGeometry::default(),
            wal_zones: 4,
            wal_instances: 4,
            meta_zones: 1,
            flushers: 2,
            leaf_size: 4096,
            group_pages: 4,
            sequencer_bytes: 256 << 10,
            cache_threshold: 1,
            adb_instances: 32,
            split: [1, 3, 4],
            merged_filter: true,
            adb: true,
            batch_merge: true,
            leaf_joins: true,
            leaf_shares: true,
            baseline_zflusher: false,
            mf_node_pairs: 64,
            inline_value_max: 256,
            gc: GcPolicy::CostBenefit,
            gc_reserve_zones: 4,
            gc_space_amp: Some(1.25),
            checkpoint_wal_bytes: None,
            bd_chain: 32,
            compress_values: true,
        }
    }
}

ferrite_core::option_setters!(ZkvOptions {
    variant: Variant,
    geometry: ZoneGeometry,
    wal_zones: u32,
    wal_instances: usize,
    meta_zones: u32,
    flushers: usize,
    leaf_size: usize,
    group_pages: usize,
    sequencer_bytes: usize,
    cache_threshold: u32,
    adb_instances: usize,
    split: [u32; 3],
    merged_filter: bool,
    adb: bool,
    batch_merge: bool,
    leaf_joins: bool,
    leaf_shares: bool,
    baseline_zflusher: bool,
    mf_node_pairs: usize,
    inline_value_max: usize,
    gc: GcPolicy,
    gc_reserve_zones: usize,
    gc_space_amp: Option<f64>,
    checkpoint_wal_bytes: Option<u64>,
    compress_values: bool,
    bd_chain: usize,
});

impl ZkvOptions {
    pub fn validate(&self) -> Result<(), String> {
        let g = &self.geometry;
        g.validate().map_err(|e| e.to_string())?;
        let ls = self.leaf_size as u64;
        if !ls.is_power_of_two()
            || !(4096..=MAX_LEAF_SIZE as u64).contains(&ls)
            || !ls.is_multiple_of(u64::from(g.block_size))
        {
            return Err(format!(
                "leaf size {ls} must be a power of two from 4 KiB to 32 KiB and a multiple of the {}-byte block",
                g.block_size
            ));
        }
        if !g.zone_size.is_multiple_of(ls) || !g.zone_capacity.is_multiple_of(ls) {
            return Err(format!(
                "zone size {} and capacity {} must be multiples of the {ls}-byte leaf",
                g.zone_size, g.zone_capacity
            ));
        }
        let open_needed = self.flushers as u32 + 3;
        if open_needed > g.max_open || open_needed > g.max_active {
            return Err(format!(
                "{} flushers need {open_needed} open zones (WAL, MetaLog, value log); the device allows {} open / {} active",
                self.flushers, g.max_open, g.max_active
            ));
        }
        let fixed = 2 + self.wal_zones;
        if self.wal_zones < 2
            || g.zone_count < fixed + self.gc_reserve_zones as u32 + self.flushers as u32 + 2
        {
            return Err(format!(
                "{} zones cannot hold 2 MetaLog zones, {} WAL zones (at least 2), a reserve of {} and {} flushers",
                g.zone_count, self.wal_zones, self.gc_reserve_zones, self.flushers
            ));
        }
        if !(1..=64).contains(&self.wal_instances) {
            return Err("between 1 and 64 WAL instances".into());
        }
        if self.flushers == 0 || self.group_pages == 0 {
            return Err("at least one flusher and one page per group".into());
        }
        if self.inline_value_max > 512 {
            return Err("inline values above 512 bytes would starve a leaf's fanout".into());
        }
        if self.gc_space_amp.is_some_and(|a| a.is_nan() || a <= 1.0) {
            return Err("the space-amplification bound must exceed 1".into());
        }
        if self.gc_reserve_zones < self.flushers + 1 {
            return Err("the reclamation reserve must exceed the flusher count".into());
        }
        Ok(())
    }

    /// Pages a write sequencer holds before the merger writes.
    pub fn sequencer_pages(&self) -> usize {
        (self.sequencer_bytes / self.leaf_size.max(1)).max(self.group_pages)
    }

    /// Writes go to the merged filter first (ZKV with its filter on); the
    /// other variants and ablations apply them to the tree directly.
    pub fn buffers_writes(&self) -> bool {
        self.variant == Variant::Zkv && self.merged_filter
    }

    /// WAL bytes between checkpoints.
    pub fn checkpoint_bytes(&self) -> u64 {
        self.checkpoint_wal_bytes.unwrap_or_else(|| {
            u64::from(self.wal_zones.saturating_sub(2).max(1)) * self.geometry.zone_capacity * 3 / 4
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaf_sizes_are_powers_of_two_within_the_page_format() {
        let with = |leaf_size| ZkvOptions::default().leaf_size(leaf_size);
        for ok in [4096, 8192, 16 << 10, 32 << 10] {
            assert_eq!(with(ok).validate(), Ok(()), "{ok}");
        }
        for bad in [0, 2048, 3 * 4096, 64 << 10] {
            assert!(with(bad).validate().is_err(), "{bad}");
        }
        // The sequencer holds bytes, so larger leaves mean fewer of them.
        assert_eq!(with(4096).sequencer_pages(), 64);
        assert_eq!(with(32 << 10).sequencer_pages(), 8);
    }
}
