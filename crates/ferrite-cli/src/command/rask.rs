//! `ferrite rask put|get|del|snapshot|load`: a durable block-address map
//! (a RASK index from logical block ranges to physical runs) in a store
//! directory, as a block server would keep one per virtual disk.
//!
//! Ranges are written `L-R` (blocks L to R inclusive), `L+N` (N blocks from
//! L) or `L` (one block). A value is `FILE:BLOCK`, the first physical block
//! of a run: logical block `L + i` lives at physical block `BLOCK + i` of
//! data file `FILE`. `get` prints one line per piece of the asked range,
//! `L-R<TAB>FILE:BLOCK`, or `L-R<TAB>-` where nothing is mapped (never
//! written, or trimmed).
//!
//! `load` replays a block trace's writes as puts of fresh runs (placed
//! after the highest physical block the map already uses in the chosen
//! file, as a log-structured backend appends), its reads as gets and its
//! trims as deletes, optionally through the segment-cache window that merges consecutive
//! writes first.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use ferrite::SyncMode;
use ferrite_rask::{BlockRange, DurableOptions, DurableRask, PhysicalRun};
use ferrite_trace::{compact_writes, ops_from_trace, RangeOp};

#[derive(Args, Clone)]
pub struct MapArgs {
    /// Index directory.
    #[arg(long)]
    path: PathBuf,
    /// Durability: always, never or batched:<ms>.
    #[arg(long, default_value = "always", value_parser = super::kv::parse_sync)]
    sync: SyncMode,
    /// Open an index whose redo log is damaged by cutting the log off at
    /// the damage: the changes logged after it are lost. Without it, such
    /// an index is refused and left as it is.
    #[arg(long)]
    salvage_wal: bool,
}

#[derive(Subcommand)]
pub enum RaskOp {
    /// Map a range of logical blocks to a run of physical blocks.
    Put {
        #[command(flatten)]
        map: MapArgs,
        /// L-R, L+N or L.
        #[arg(value_parser = parse_range)]
        range: BlockRange,
        /// FILE:BLOCK, where the run's first block lives.
        #[arg(value_parser = parse_run)]
        run: PhysicalRun,
    },
    /// Print where every block of a range lives, piece by piece.
    Get {
        #[command(flatten)]
        map: MapArgs,
        #[arg(value_parser = parse_range)]
        range: BlockRange,
    },
    /// Unmap a range (trim).
    Del {
        #[command(flatten)]
        map: MapArgs,
        #[arg(value_parser = parse_range)]
        range: BlockRange,
    },
    /// Write a snapshot of the whole map and empty the redo log.
    Snapshot {
        #[command(flatten)]
        map: MapArgs,
    },
    /// Replay a block trace into the map: writes as puts, reads as gets,
    /// trims as deletes.
    Load(LoadArgs),
}

#[derive(Args)]
pub struct LoadArgs {
    /// Index directory (created if missing).
    #[arg(long)]
    path: PathBuf,
    /// Trace format: cloudphysics, tectonic or fio.
    #[arg(long)]
    format: String,
    trace: PathBuf,
    /// Segment-cache window in blocks; 0 sends every write to the map as
    /// it arrives.
    #[arg(long, default_value_t = 128)]
    window: u64,
    /// Data file the new runs are placed in.
    #[arg(long, default_value_t = 0)]
    file: u16,
    /// Durability while loading (one sync follows the last write).
    #[arg(long, default_value = "never", value_parser = super::kv::parse_sync)]
    sync: SyncMode,
}

/// Parses `L-R`, `L+N` or `L`.
pub fn parse_range(s: &str) -> Result<BlockRange, String> {
    let num = |t: &str| {
        t.trim()
            .parse::<u64>()
            .map_err(|_| format!("{t:?} is not a block number"))
    };
    let r = if let Some((l, r)) = s.split_once('-') {
        BlockRange::new(num(l)?, num(r)?)
    } else if let Some((l, n)) = s.split_once('+') {
        BlockRange::with_len(num(l)?, num(n)?)
    } else {
        Ok(BlockRange::block(num(s)?))
    };
    r.map_err(|e| e.to_string())
}

/// Parses `FILE:BLOCK`.
pub fn parse_run(s: &str) -> Result<PhysicalRun, String> {
    let (file, block) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?} is not FILE:BLOCK"))?;
    let file: u16 = file
        .trim()
        .parse()
        .map_err(|_| format!("{file:?} is not a file id (0 to {})", PhysicalRun::MAX_FILE))?;
    let block: u64 = block
        .trim()
        .parse()
        .map_err(|_| format!("{block:?} is not a block number"))?;
    PhysicalRun::new(file, block).ok_or_else(|| {
        format!(
            "{s}: file ids go to {} and blocks below 2^48",
            PhysicalRun::MAX_FILE
        )
    })
}

fn open(
    path: &Path,
    sync: SyncMode,
    create: bool,
    salvage: bool,
) -> Result<DurableRask<PhysicalRun>> {
    let mut opts = DurableOptions::default();
    opts.store.sync = sync;
    opts.store.create_if_missing = create;
    opts.store.wal_recovery = super::kv::wal_recovery(salvage);
    DurableRask::open(path, opts).map_err(|e| {
        let hint = salvage_hint(&e);
        anyhow::Error::new(e).context(format!("opening the index {}{hint}", path.display()))
    })
}

/// [`super::kv::salvage_hint`] for an index's error.
pub fn salvage_hint(e: &ferrite_rask::RaskError) -> &'static str {
    match e {
        ferrite_rask::RaskError::Store(inner) => super::kv::salvage_hint(inner),
        _ => "",
    }
}

pub fn run(op: RaskOp) -> Result<()> {
    match op {
        RaskOp::Put { map, range, run } => {
            let db = open(&map.path, map.sync, true, map.salvage_wal)?;
            db.put(range, run)?;
            db.sync()?;
        }
        RaskOp::Get { map, range } => {
            let db = open(&map.path, map.sync, false, map.salvage_wal)?;
            for seg in db.get(range) {
                let (l, r) = (seg.range.l(), seg.range.r());
                match seg.value {
                    Some(v) => println!("{l}-{r}\t{}:{}", v.file(), v.block()),
                    None => println!("{l}-{r}\t-"),
                }
            }
        }
        RaskOp::Del { map, range } => {
            let db = open(&map.path, map.sync, false, map.salvage_wal)?;
            db.delete(range)?;
            db.sync()?;
        }
        RaskOp::Snapshot { map } => {
            let db = open(&map.path, map.sync, false, map.salvage_wal)?;
            let t = Instant::now();
            db.snapshot()?;
            let secs = t.elapsed().as_secs_f64();
            let (mut runs, mut blocks) = (0u64, 0u64);
            db.index().for_each_mapped(|range, _| {
                runs += 1;
                blocks += range.len();
            });
            println!("snapshot of {runs} runs ({blocks} blocks) written in {secs:.3} s");
        }
        RaskOp::Load(a) => load(a)?,
    }
    Ok(())
}

/// The first physical block of `file` that no mapped run uses.
fn free_block(db: &DurableRask<PhysicalRun>, file: u16) -> u64 {
    let mut next = 0;
    db.index().for_each_mapped(|range, v| {
        if v.file() == file {
            next = next.max(v.block() + range.len());
        }
    });
    next
}

/// What replaying a trace did.
#[derive(Debug, Default, PartialEq, Eq)]
struct Replayed {
    /// First physical block the new runs used.
    base: u64,
    puts: u64,
    deletes: u64,
    gets: u64,
    mapped_blocks: u64,
    unmapped_blocks: u64,
}

/// Applies `ops` to `db`, placing the runs of puts in `file` after every
/// run the map already holds there.
fn replay(db: &DurableRask<PhysicalRun>, ops: &[RangeOp], file: u16) -> Result<Replayed> {
    let base = free_block(db, file);
    let mut out = Replayed {
        base,
        ..Replayed::default()
    };
    for op in ops {
        match *op {
            RangeOp::Put(range, v) => {
                let Some(run) = PhysicalRun::new(file, base + v.block()) else {
                    bail!("data file {file} has no room past block {base} for {range}");
                };
                db.put(range, run)?;
                out.puts += 1;
            }
            RangeOp::Delete(range) => {
                db.delete(range)?;
                out.deletes += 1;
            }
            RangeOp::Get(range) => {
                for seg in db.get(range) {
                    if seg.value.is_some() {
                        out.mapped_blocks += seg.range.len();
                    } else {
                        out.unmapped_blocks += seg.range.len();
                    }
                }
                out.gets += 1;
            }
        }
    }
    Ok(out)
}

fn load(a: LoadArgs) -> Result<()> {
    if a.file > PhysicalRun::MAX_FILE {
        bail!("data file id {} is reserved", a.file);
    }
    let reqs = ferrite_trace::parse_named(&a.format, &a.trace)?;
    let writes_in = reqs
        .iter()
        .filter(|r| r.op == ferrite_trace::BlockOp::Write)
        .count();
    let mut ops = ops_from_trace(&reqs);
    if a.window > 0 {
        ops = compact_writes(&ops, a.window);
    }
    let db = open(&a.path, a.sync, true, false)?;
    let opened = db.recovery();
    let t = Instant::now();
    let done = replay(&db, &ops, a.file)?;
    db.sync()?;
    let secs = t.elapsed().as_secs_f64();
    let s = db.stats();
    println!(
        "opened     {} (snapshot {} with {} runs + {} log records, {:.3} s)",
        a.path.display(),
        opened.snapshot_epoch,
        opened.snapshot_runs,
        opened.replayed_records,
        opened.seconds
    );
    println!(
        "trace      {}: {} requests, {writes_in} writes",
        a.trace.display(),
        reqs.len()
    );
    match a.window {
        0 => println!("window     off: {} puts", done.puts),
        w => println!(
            "window     {w} blocks: {writes_in} writes became {} puts",
            done.puts
        ),
    }
    println!(
        "placed     data file {} from block {}; sync {}, then one sync",
        a.file, done.base, a.sync
    );
    println!(
        "reads      {} gets: {} blocks mapped, {} unmapped",
        done.gets, done.mapped_blocks, done.unmapped_blocks
    );
    if done.deletes > 0 {
        println!("trims      {} deletes", done.deletes);
    }
    println!(
        "time       {secs:.3} s: {:.0} operations/s, {:.0} puts/s",
        (done.puts + done.deletes + done.gets) as f64 / secs.max(1e-9),
        done.puts as f64 / secs.max(1e-9)
    );
    println!(
        "index      {} leaves, {} entries, {} bytes; {} splits, {} GC writes",
        s.leaves, s.entries, s.index_bytes, s.splits, s.gc_writes
    );
    println!("log        {} bytes", db.log_bytes());
    db.index()
        .verify()
        .map_err(|e| anyhow::anyhow!("index invariant broken after the load: {e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_trace::{BlockOp, BlockRequest};

    #[test]
    fn ranges_parse_in_all_three_forms() {
        assert_eq!(
            parse_range("10-19").unwrap(),
            BlockRange::new(10, 19).unwrap()
        );
        assert_eq!(
            parse_range("10+10").unwrap(),
            BlockRange::new(10, 19).unwrap()
        );
        assert_eq!(parse_range("7").unwrap(), BlockRange::block(7));
        assert_eq!(
            parse_range(" 3 - 4 ").unwrap(),
            BlockRange::new(3, 4).unwrap()
        );
    }

    #[test]
    fn bad_ranges_say_why() {
        assert!(parse_range("9-3").unwrap_err().contains("inverted"));
        assert!(parse_range("5+0").unwrap_err().contains("empty"));
        assert!(parse_range(&format!("{}+2", u64::MAX))
            .unwrap_err()
            .contains("past"));
        assert!(parse_range("x-3")
            .unwrap_err()
            .contains("not a block number"));
        assert!(parse_range("").is_err());
    }

    #[test]
    fn runs_parse_and_refuse_reserved_values() {
        let v = parse_run("3:4096").unwrap();
        assert_eq!((v.file(), v.block()), (3, 4096));
        assert!(parse_run("65535:0").unwrap_err().contains("file ids"));
        assert!(parse_run(&format!("0:{}", 1u64 << 48))
            .unwrap_err()
            .contains("2^48"));
        assert!(parse_run("12").unwrap_err().contains("FILE:BLOCK"));
        assert!(parse_run("a:1").unwrap_err().contains("file id"));
    }

    #[test]
    fn loads_put_runs_after_the_ones_already_mapped() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path(), SyncMode::Never, true, false).unwrap();
        assert_eq!(free_block(&db, 2), 0);
        db.put(
            BlockRange::new(100, 109).unwrap(),
            PhysicalRun::new(2, 50).unwrap(),
        )
        .unwrap();
        db.put(
            BlockRange::new(0, 3).unwrap(),
            PhysicalRun::new(1, 900).unwrap(),
        )
        .unwrap();
        assert_eq!(free_block(&db, 2), 60);
        assert_eq!(free_block(&db, 1), 904);
        // A later overwrite hides part of the run but not its end.
        db.put(BlockRange::block(105), PhysicalRun::new(2, 60).unwrap())
            .unwrap();
        assert_eq!(free_block(&db, 2), 61);
    }

    #[test]
    fn a_second_load_appends_and_trims_unmap() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path(), SyncMode::Never, true, false).unwrap();
        let w = |start, blocks| BlockRequest {
            time_us: 0,
            op: BlockOp::Write,
            start,
            blocks,
        };
        let r = |start, blocks| BlockRequest {
            op: BlockOp::Read,
            ..w(start, blocks)
        };
        let first = ops_from_trace(&[w(10, 4), w(20, 2), r(8, 16)]);
        let done = replay(&db, &first, 5).unwrap();
        assert_eq!(
            done,
            Replayed {
                base: 0,
                puts: 2,
                deletes: 0,
                gets: 1,
                mapped_blocks: 6,
                unmapped_blocks: 10,
            }
        );
        let t = |start, blocks| BlockRequest {
            op: BlockOp::Trim,
            ..w(start, blocks)
        };
        // Blocks 12..=13 are rewritten (the new run follows both old ones)
        // and block 20 is trimmed.
        let second = compact_writes(&ops_from_trace(&[w(12, 2), w(14, 1), t(20, 1)]), 128);
        let done = replay(&db, &second, 5).unwrap();
        assert_eq!((done.base, done.puts, done.deletes), (6, 1, 1));
        let pieces: Vec<_> = db
            .get(BlockRange::new(10, 21).unwrap())
            .into_iter()
            .map(|s| {
                (
                    s.range.l(),
                    s.range.r(),
                    s.value.map(|v| (v.file(), v.block())),
                )
            })
            .collect();
        assert_eq!(
            pieces,
            vec![
                (10, 11, Some((5, 0))),
                (12, 14, Some((5, 6))),
                (15, 20, None),
                (21, 21, Some((5, 5)))
            ]
        );
    }
}
