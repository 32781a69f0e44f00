//! RocksDB (Debian's librocksdb 7.8 through the `rocksdb` crate).
//!
//! Configured for memory parity: one LRU block cache of the byte budget,
//! with index and filter blocks charged to it (so they cannot grow outside
//! the budget), a 10-bit bloom filter, and O_DIRECT for reads, flushes and
//! compactions when asked. Memtables (64 MiB write buffer by default) are
//! outside the block cache, as in every RocksDB deployment; the report
//! states their size. Writes always go to the WAL; `SyncMode::Always`
//! syncs it on every write, `Batched` on a timer, `Never` only at `sync`.
//! Range deletes are RocksDB's `DeleteRange` (range tombstones); reverse
//! scans its `SeekForPrev`/`Prev`. Snapshots and compare-and-swap are not
//! offered through this adapter (`Error::Unsupported`): RocksDB's need a
//! borrowed handle or a transaction database.

use std::path::Path;
use std::sync::Arc;

use ferrite::internals::{check_key, check_value, Instrumented};
use ferrite::{
    BatchOp, Error, KeyRange, KvStore, Result, ScanVisitor, Stats, StoreSnapshot, SyncMode,
    WriteBatch,
};
use rocksdb::{BlockBasedOptions, Cache, Options, WriteOptions, DB};

use super::counted::Counted;
use super::PeerStats;
use super::{foreign, StoreConfig, TargetInfo};

struct Rocks {
    db: Arc<DB>,
    write_opts: WriteOptions,
    _cache: Cache,
    _ticker: Option<ferrite::internals::PeriodicSync>,
}

pub fn open(dir: &Path, cfg: &StoreConfig) -> Result<(Box<dyn Instrumented>, TargetInfo)> {
    let err = foreign("rocksdb");
    let cache = Cache::new_lru_cache(cfg.cache_bytes as usize).map_err(|e| err(&e))?;
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(&cache);
    table.set_cache_index_and_filter_blocks(true);
    table.set_pin_l0_filter_and_index_blocks_in_cache(true);
    table.set_bloom_filter(10.0, false);
    let mut opts = Options::default();
    opts.create_if_missing(true);
    match cfg.compression {
        super::Compression::None => opts.set_compression_type(rocksdb::DBCompressionType::None),
        super::Compression::Lz4 => opts.set_compression_type(rocksdb::DBCompressionType::Lz4),
        super::Compression::Zstd(level) => {
            opts.set_compression_type(rocksdb::DBCompressionType::Zstd);
            // window bits, level, strategy, max dictionary bytes.
            opts.set_compression_options(-14, level, 0, 0);
        }
    }
    opts.set_block_based_table_factory(&table);
    opts.set_use_direct_reads(cfg.direct_io);
    opts.set_use_direct_io_for_flush_and_compaction(cfg.direct_io);
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get()) as i32;
    opts.increase_parallelism(cores);
    let db = Arc::new(DB::open(&opts, dir).map_err(|e| err(&e))?);
    let mut write_opts = WriteOptions::default();
    write_opts.set_sync(cfg.sync == SyncMode::Always);
    let ticker = match cfg.sync {
        SyncMode::Batched(every) => {
            let db2 = db.clone();
            Some(
                ferrite::internals::PeriodicSync::start("rocksdb-sync", every, move || {
                    // A failed sync shows in the store's next write.
                    let _ = db2.flush_wal(true);
                    Ok(())
                })
                .map_err(|e| err(&e))?,
            )
        }
        _ => None,
    };
    let info = TargetInfo {
        name: "rocksdb".into(),
        cache_bytes: cfg.cache_bytes,
        o_direct: cfg.direct_io,
        durability: cfg.sync.to_string(),
        notes: format!("LRU block cache = budget, index and filter blocks charged to it; memtables (64 MiB) outside the budget; blocks {}", cfg.compression),
    };
    Ok((
        Box::new(Counted::new(Rocks {
            db,
            write_opts,
            _cache: cache,
            _ticker: ticker,
        })),
        info,
    ))
}

impl KvStore for Rocks {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        check_key(key)?;
        Ok(self
            .db
            .get_pinned(key)
            .map_err(|e| foreign("rocksdb")(&e))?
            .map(|v| v.to_vec()))
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        check_key(key)?;
        check_value(value)?;
        self.db
            .put_opt(key, value, &self.write_opts)
            .map_err(|e| foreign("rocksdb")(&e))
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        check_key(key)?;
        self.db
            .delete_opt(key, &self.write_opts)
            .map_err(|e| foreign("rocksdb")(&e))
    }

    fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        let mut it = self.db.raw_iterator();
        match range.start {
            std::ops::Bound::Included(s) | std::ops::Bound::Excluded(s) => it.seek(s),
            std::ops::Bound::Unbounded => it.seek_to_first(),
        }
        while it.valid() {
            let (Some(k), Some(v)) = (it.key(), it.value()) else {
                break;
            };
            if !range.before_end(k) {
                break;
            }
            if range.after_start(k) && visit(k, v).is_break() {
                break;
            }
            it.next();
        }
        it.status().map_err(|e| foreign("rocksdb")(&e))
    }

    fn scan_rev(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        let mut it = self.db.raw_iterator();
        match range.end {
            std::ops::Bound::Included(e) | std::ops::Bound::Excluded(e) => it.seek_for_prev(e),
            std::ops::Bound::Unbounded => it.seek_to_last(),
        }
        while it.valid() {
            let (Some(k), Some(v)) = (it.key(), it.value()) else {
                break;
            };
            if !range.after_start(k) {
                break;
            }
            if range.before_end(k) && visit(k, v).is_break() {
                break;
            }
            it.prev();
        }
        it.status().map_err(|e| foreign("rocksdb")(&e))
    }

    fn compare_and_swap(&self, _: &[u8], _: Option<&[u8]>, _: Option<&[u8]>) -> Result<bool> {
        Err(Error::Unsupported {
            store: "rocksdb",
            operation: "compare-and-swap",
        })
    }

    fn snapshot(&self) -> Result<Box<dyn StoreSnapshot>> {
        Err(Error::Unsupported {
            store: "rocksdb",
            operation: "snapshots",
        })
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.db.flush_wal(true).map_err(|e| foreign("rocksdb")(&e))
    }

    fn write_batch(&self, batch: &WriteBatch) -> Result<()> {
        let mut b = rocksdb::WriteBatch::default();
        for op in batch.ops() {
            match op {
                BatchOp::Put { key, value } => b.put(key, value),
                BatchOp::Delete { key } => b.delete(key),
                BatchOp::DeleteRange { start, end } => b.delete_range(start, end),
            }
        }
        self.db
            .write_opt(b, &self.write_opts)
            .map_err(|e| foreign("rocksdb")(&e))
    }

    fn flush(&self) -> Result<()> {
        self.db.flush().map_err(|e| foreign("rocksdb")(&e))
    }

    fn sync(&self) -> Result<()> {
        self.db.flush_wal(true).map_err(|e| foreign("rocksdb")(&e))
    }

    fn stats(&self) -> Stats {
        let prop = |name: &str| self.db.property_int_value(name).ok().flatten().unwrap_or(0);
        // The level shape, so a report can tell where reads found their keys.
        // (`num-files-at-level` is a string property; 7 is RocksDB's
        // default number of levels, which this adapter keeps.)
        let mut extra: Vec<(String, f64)> = (0..7)
            .map(|l| {
                let files = self
                    .db
                    .property_value(&format!("rocksdb.num-files-at-level{l}"))
                    .ok()
                    .flatten()
                    .and_then(|v| v.trim().parse::<f64>().ok())
                    .unwrap_or(0.0);
                (format!("l{l}_tables"), files)
            })
            .collect();
        extra.push((
            "sst_bytes".into(),
            prop("rocksdb.total-sst-files-size") as f64,
        ));
        Stats {
            memory_bytes: prop("rocksdb.block-cache-usage")
                + prop("rocksdb.cur-size-all-mem-tables"),
            detail: Some(Arc::new(PeerStats(extra))),
            ..Stats::default()
        }
    }

    fn verify(&self) -> Result<()> {
        super::verify_by_scan(self, "rocksdb")
    }
}

impl Instrumented for Rocks {
    /// Flushes, then polls RocksDB's own counters until no flush or
    /// compaction is pending or running.
    fn settle(&self) -> Result<()> {
        self.flush()?;
        let prop = |name: &str| self.db.property_int_value(name).ok().flatten().unwrap_or(0);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3600);
        while prop("rocksdb.compaction-pending") > 0
            || prop("rocksdb.num-running-compactions") > 0
            || prop("rocksdb.num-running-flushes") > 0
            || prop("rocksdb.mem-table-flush-pending") > 0
        {
            if std::time::Instant::now() > deadline {
                return Err(ferrite::Error::Foreign {
                    store: "rocksdb",
                    message: "background compactions did not finish within an hour".into(),
                });
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Ok(())
    }
}
