//! The LSM engine's own options (what `ferrite_core::Options` does not
//! cover): memtable and table sizes, level shape, stall thresholds, and
//! which index block new tables get.

use ferrite_learned::FitKind;

pub use crate::table::packing::Compression;

/// The index block a table is written with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum IndexKind {
    /// One (last key, block position) pair per data block, searched by
    /// binary search (LevelDB / RocksDB).
    Sparse,
    /// A model predicting an entry's position within `eps` entries
    /// (SwiftKV's learned index block); a table caps `eps` at a quarter of
    /// its mean entries per block, so most predictions land in the right
    /// block.
    Learned { fit: FitKind, eps: f64 },
    /// Bourbon's placement of the model (Dai et al., OSDI 2020, as SwiftKV
    /// characterises it): a Greedy-PLR model within `eps` entries only
    /// picks the data block, and the lookup binary-searches that whole
    /// block, where [`IndexKind::Learned`] searches only the model's
    /// window inside it.
    Bourbon { eps: f64 },
}

impl IndexKind {
    /// SwiftKV's default: two-level Greedy-PLR + LR with ε = 32 entries
    /// (capped per table at a quarter block).
    pub const LEARNED: IndexKind = IndexKind::Learned {
        fit: FitKind::TwoLevel,
        eps: 32.0,
    };

    /// Bourbon's default error bound (its δ): 8 entries.
    pub const BOURBON: IndexKind = IndexKind::Bourbon { eps: 8.0 };

    /// Whether tables of this kind carry a model.
    pub fn is_learned(self) -> bool {
        !matches!(self, IndexKind::Sparse)
    }

    pub fn name(self) -> &'static str {
        match self {
            IndexKind::Sparse => "sparse",
            IndexKind::Bourbon { .. } => "bourbon",
            IndexKind::Learned { fit, .. } => match fit {
                FitKind::TwoLevel => "learned",
                FitKind::Piecewise => "learned-plr",
                FitKind::Linear => "learned-lr",
            },
        }
    }

    /// Parses `sparse`, `learned`, `learned-plr`, `learned-lr` or `bourbon`.
    pub fn parse(s: &str) -> Option<Self> {
        let learned = |fit| Some(IndexKind::Learned { fit, eps: 32.0 });
        match s {
            "sparse" => Some(IndexKind::Sparse),
            "bourbon" => Some(IndexKind::BOURBON),
            "learned" => learned(FitKind::TwoLevel),
            "learned-plr" => learned(FitKind::Piecewise),
            "learned-lr" => learned(FitKind::Linear),
            _ => None,
        }
    }
}

/// Load-aware construction (SwiftKV §3.4, `build_policy`): L0 tables get
/// sparse indexes, and a compaction's outputs get `index` only when the
/// lookups they can expect pay for fitting.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoadAware {
    /// Nanoseconds a learned lookup saves over a sparse one (this
    /// machine's in-cache measurement in `docs/results/swiftkv.md` is the
    /// default's source).
    pub saving_ns: f64,
}

impl Default for LoadAware {
    fn default() -> Self {
        Self { saving_ns: 100.0 }
    }
}

/// Options of the LSM engine.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LsmOptions {
    /// A memtable becomes immutable at this many bytes (keys, values and
    /// per-entry overhead). Memtables are not part of `cache_bytes`, as in
    /// RocksDB (`write_buffer_size`).
    pub memtable_bytes: usize,
    /// A memtable is also rotated once its log holds this share of the
    /// live tables' bytes (and at least a quarter of `memtable_bytes`), so
    /// a store that is small beside its memtable does not keep a log as
    /// large as a good part of its data on disk (RocksDB bounds its logs
    /// by `max_total_wal_size`, in bytes). 0 turns it off.
    pub log_share: f64,
    /// Immutable memtables waiting for flush before writers stall.
    pub max_immutable: usize,
    /// Target size of one table.
    pub table_bytes: usize,
    /// L0 tables that trigger an L0 → L1 compaction.
    pub l0_compaction_trigger: usize,
    /// L0 tables at which each write is delayed by a millisecond.
    pub l0_slowdown: usize,
    /// L0 tables at which writers wait for compaction.
    pub l0_stop: usize,
    /// Target bytes of L1; each deeper level is `level_multiplier` times larger.
    pub l1_bytes: u64,
    pub level_multiplier: u64,
    /// Levels, L0 included.
    pub levels: usize,
    /// Bloom filter bits per key (0: no filter).
    pub bloom_bits_per_key: usize,
    /// Index block of tables written from now on.
    pub index: IndexKind,
    /// With `Some`, `index` (if learned) is built only where it pays.
    pub load_aware: Option<LoadAware>,
    /// A table whose fitted model would take more bytes than its sparse
    /// index gets the sparse index (on by default, so a learned index never
    /// costs more than the one it replaces). Off, every table of a learned
    /// `index` keeps its model however large.
    pub smaller_index: bool,
    /// Partitions (SwiftKV's subtrees): a key belongs to partition
    /// `first 8 bytes (big-endian, zero-padded) mod partitions`; each has
    /// its own levels behind the one shared memtable. 1 (unpartitioned) by
    /// default: partitions speed point lookups but every scan merges all of
    /// them (`docs/results/swiftkv.md`); SwiftKV's 64 is this option.
    /// Fixed when the store is created: an existing store opens with its
    /// own count whatever this says.
    pub partitions: usize,
    /// Threads fitting one table's model (the table's points are split
    /// into this many pieces, SwiftKV §3.5).
    pub training_threads: usize,
    /// How data blocks of tables written from now on are stored: lz4 by
    /// default, as RocksDB's and fjall's are; tables already written keep
    /// theirs, so a store can change it between opens.
    pub compression: Compression,
    /// A flush puts the blocks it writes in the block cache (RocksDB's
    /// `prepopulate_block_cache = kFlushOnly`), so reads of what was just
    /// written do not go to the device once its memtable is gone. A flush
    /// whose blocks would take more than half the cache leaves it as it
    /// was. Off by default, as in RocksDB: a load that is not read back
    /// would push older blocks out for nothing. The server turns it on,
    /// because its type layer reads every key it writes.
    pub cache_flushed: bool,
}

ferrite_core::option_setters!(LsmOptions {
    memtable_bytes: usize,
    log_share: f64,
    max_immutable: usize,
    table_bytes: usize,
    l0_compaction_trigger: usize,
    l0_slowdown: usize,
    l0_stop: usize,
    l1_bytes: u64,
    level_multiplier: u64,
    levels: usize,
    bloom_bits_per_key: usize,
    index: IndexKind,
    load_aware: Option<LoadAware>,
    smaller_index: bool,
    partitions: usize,
    training_threads: usize,
    compression: Compression,
    cache_flushed: bool,
});

/// RocksDB's defaults where RocksDB has the same knob (64 MiB memtables,
/// two in memory at most, L0 triggers 4 / 20 / 36, 256 MiB L1, ×10 per
/// level, 10 bloom bits per key), so comparisons start from parity.
impl Default for LsmOptions {
    fn default() -> Self {
        Self {
            memtable_bytes: 64 << 20,
            log_share: 0.25,
            max_immutable: 1,
            table_bytes: 8 << 20,
            l0_compaction_trigger: 4,
            l0_slowdown: 20,
            l0_stop: 36,
            l1_bytes: 256 << 20,
            level_multiplier: 10,
            levels: 7,
            bloom_bits_per_key: 10,
            index: IndexKind::LEARNED,
            load_aware: None,
            smaller_index: true,
            partitions: 1,
            training_threads: 1,
            compression: Compression::default(),
            cache_flushed: false,
        }
    }
}

impl LsmOptions {
    /// About how many tables a flush is cut into: a memtable's worth of
    /// target-sized tables (see [`crate::version::Version::flush_cuts`]).
    pub fn flush_pieces(&self) -> usize {
        (self.memtable_bytes / self.table_bytes.max(1)).max(1)
    }

    /// Checks that the options can work together.
    pub fn validate(&self) -> Result<(), String> {
        if self.memtable_bytes < 4096 {
            return Err(format!(
                "memtable_bytes {} is below 4 KiB",
                self.memtable_bytes
            ));
        }
        if !(self.log_share.is_finite() && self.log_share >= 0.0) {
            return Err(format!("log_share {} is not a share >= 0", self.log_share));
        }
        if self.table_bytes < 4096 {
            return Err(format!("table_bytes {} is below 4 KiB", self.table_bytes));
        }
        if !(2..=16).contains(&self.levels) {
            return Err(format!("levels {} is not in 2..=16", self.levels));
        }
        if self.max_immutable == 0 || self.max_immutable > 8 {
            return Err(format!(
                "max_immutable {} is not in 1..=8",
                self.max_immutable
            ));
        }
        if self.l0_compaction_trigger == 0
            || self.l0_slowdown < self.l0_compaction_trigger
            || self.l0_stop < self.l0_slowdown
        {
            return Err("L0 thresholds must satisfy 0 < trigger <= slowdown <= stop".into());
        }
        if self.level_multiplier < 2 || self.l1_bytes == 0 {
            return Err("level_multiplier must be >= 2 and l1_bytes > 0".into());
        }
        if !(1..=1024).contains(&self.partitions) {
            return Err(format!("partitions {} is not in 1..=1024", self.partitions));
        }
        if self.training_threads == 0 {
            return Err("training_threads must be >= 1".into());
        }
        if let IndexKind::Learned { eps, .. } = self.index {
            if !(eps.is_finite() && (0.0..=4096.0).contains(&eps)) {
                return Err(format!("learned index eps {eps} is not in 0..=4096"));
            }
        }
        Ok(())
    }

    /// Target bytes of level `level` (≥ 1).
    pub fn level_target(&self, level: usize) -> u64 {
        let mut t = self.l1_bytes;
        for _ in 1..level {
            t = t.saturating_mul(self.level_multiplier);
        }
        t
    }

    /// The partition of `key`.
    pub fn partition_of(&self, key: &[u8]) -> usize {
        partition_of(key, self.partitions)
    }

    /// Whether the live memtable is rotated for a flush: it holds
    /// `memtable_bytes`, or its log holds `log_share` of the live tables'
    /// bytes and at least a quarter memtable (so a fresh store's first
    /// flushes are not tiny).
    pub fn rotation_due(&self, mem_bytes: usize, log_bytes: u64, table_bytes: u64) -> bool {
        if mem_bytes >= self.memtable_bytes {
            return true;
        }
        if self.log_share <= 0.0 {
            return false;
        }
        let cap = (table_bytes as f64 * self.log_share).max(self.memtable_bytes as f64 / 4.0);
        log_bytes as f64 >= cap
    }

    /// WAL devices: one per memtable that may be unflushed at once.
    pub fn wal_devices(&self) -> usize {
        self.max_immutable + 1
    }
}

/// The partition of `key` among `partitions`: its first 8 bytes
/// (big-endian, zero-padded) modulo the count. Every part of the engine
/// routes keys through this one function.
pub fn partition_of(key: &[u8], partitions: usize) -> usize {
    (ferrite_core::engine::key_to_u64(key) % partitions.max(1) as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memtable_rotates_when_full_or_when_its_log_rivals_the_tables() {
        let o = LsmOptions::default()
            .memtable_bytes(64 << 20)
            .log_share(0.25);
        assert!(o.rotation_due(64 << 20, 0, 0), "full");
        // A fresh store: at least a quarter memtable of log.
        assert!(!o.rotation_due(1 << 20, (16 << 20) - 1, 0));
        assert!(o.rotation_due(1 << 20, 16 << 20, 0));
        // 128 MiB of tables: a 32 MiB log is a quarter of them.
        assert!(!o.rotation_due(40 << 20, (32 << 20) - 1, 128 << 20));
        assert!(o.rotation_due(40 << 20, 32 << 20, 128 << 20));
        // A large store rotates on the memtable's size alone.
        assert!(!o.rotation_due(63 << 20, 80 << 20, 10 << 30));
        let off = o.log_share(0.0);
        assert!(!off.rotation_due(1 << 20, 1 << 30, 0));
        assert!(off.validate().is_ok());
        assert!(LsmOptions::default().log_share(-1.0).validate().is_err());
        assert!(LsmOptions::default()
            .log_share(f64::NAN)
            .validate()
            .is_err());
    }
}
