//! `ferrite demo`: a guided tour of what this build contains, run in a
//! temporary directory that is removed afterwards.
//!
//! It shows the device layer doing real work: batched O_DIRECT reads timed
//! against dependent ones, a zoned device refusing writes that break its
//! rules and keeping its state across a reopen, and a crash that keeps
//! exactly the synced data. It then lists the engines and opens every one
//! this build contains for a round trip, and ends with a block-address map
//! (RASK) dividing a run on overwrite and recovering it from its log.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use ferrite::{Config, EngineKind, KeyRange, KvStore, KvStoreExt};
use ferrite_io::{
    AlignedBuf, BatchMode, BlockDevice, CrashMode, DirectFile, DirectFileOptions,
    EmulatedZonedDevice, FaultyDevice, MemDevice, ReadReq, ZoneGeometry, ZonedDevice,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn heading(n: u32, title: &str) {
    println!("\n{n}. {title}\n{}", "-".repeat(title.len() + 3));
}

fn filled(len: usize, byte: u8) -> AlignedBuf {
    let mut b = AlignedBuf::zeroed(len);
    b.fill(byte);
    b
}

/// Batched versus dependent reads on a small file.
fn devices(dir: &std::path::Path) -> Result<()> {
    heading(1, "Block devices: one batch of reads costs about one read");
    const SIZE: u64 = 256 << 20;
    let path = dir.join("blocks.dat");
    let dev = DirectFile::open_with(
        &path,
        DirectFileOptions {
            batch_mode: BatchMode::Auto,
            ..Default::default()
        },
    )?;
    let mut rng = SmallRng::seed_from_u64(7);
    let mut chunk = AlignedBuf::zeroed(4 << 20);
    for at in (0..SIZE).step_by(chunk.len()) {
        rng.fill(&mut chunk[..]);
        dev.write_at(&chunk, at)?;
    }
    dev.sync()?;
    println!("device: {}", dev.describe());
    let mut bufs: Vec<AlignedBuf> = (0..4).map(|_| AlignedBuf::zeroed(4096)).collect();
    let (mut serial, mut batch) = (Vec::new(), Vec::new());
    for _ in 0..400 {
        let offs: Vec<u64> = (0..4)
            .map(|_| rng.gen_range(0..SIZE / 4096) * 4096)
            .collect();
        let t = Instant::now();
        for (b, &o) in bufs.iter_mut().zip(&offs) {
            dev.read_at(b, o)?;
        }
        serial.push(t.elapsed().as_secs_f64() * 1e6);
        let t = Instant::now();
        let mut reqs: Vec<ReadReq> = bufs
            .iter_mut()
            .zip(&offs)
            .map(|(b, &o)| ReadReq::new(o, b))
            .collect();
        dev.read_batch(&mut reqs)?;
        batch.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    let (s, b) = (median(&mut serial), median(&mut batch));
    println!("four dependent 4 KiB reads: median {s:.0} µs");
    println!(
        "one batch of the same four: median {b:.0} µs  ({:.2}× the time)",
        b / s
    );
    println!("(`ferrite io-probe` measures this properly on a 4 GiB file)");
    let misaligned = dev.read_at(&mut bufs[0][..], 100);
    if let Err(e) = misaligned {
        println!("a misaligned read is refused: {e}");
    }
    drop(dev);
    std::fs::remove_file(&path).ok();
    Ok(())
}

/// Zone rules and zone state persistence.
fn zones(dir: &std::path::Path) -> Result<()> {
    heading(
        2,
        "Zoned storage: every rule enforced, state kept across reopen",
    );
    let path = dir.join("zns.img");
    let geo = ZoneGeometry::default();
    let dev = EmulatedZonedDevice::open_or_create(&path, geo)?;
    println!("{}", dev.describe());
    let a = dev.append(0, &filled(64 << 10, 1))?;
    let b = dev.append(0, &filled(16 << 10, 2))?;
    println!("zone append placed 64 KiB at {a} and 16 KiB at {b}");
    if let Err(e) = dev.write_at(&filled(4096, 3), 0) {
        println!("overwriting written data:   {e}");
    }
    if let Err(e) = dev.write_at(&filled(4096, 3), geo.zone_size + 8192) {
        println!("writing off the pointer:    {e}");
    }
    // Zone 0 is already active (implicitly open), so this fills every slot.
    for z in 1..geo.max_active {
        dev.open_zone(z)?;
    }
    if let Err(e) = dev.open_zone(geo.max_active) {
        println!("one active zone too many:   {e}");
    }
    dev.finish_zone(1)?;
    dev.sync()?;
    drop(dev);
    let dev = EmulatedZonedDevice::open(&path)?;
    println!("after reopen:");
    for z in dev.report_zones(0, 3) {
        println!(
            "  zone {}: {:<15} write pointer {:>10} (start {})",
            z.zone,
            z.condition.name(),
            z.write_pointer,
            z.start
        );
    }
    dev.reset_zone(0)?;
    println!(
        "zone 0 reset: {:?}",
        dev.report_zones(0, 1).first().map(|z| z.condition.name())
    );
    drop(dev);
    std::fs::remove_file(&path).ok();
    Ok(())
}

/// A simulated power cut on the fault-injecting device.
fn crash() -> Result<()> {
    heading(
        3,
        "Crash injection: synced data survives, unsynced does not",
    );
    let dev = Arc::new(FaultyDevice::new(MemDevice::new()));
    dev.write_at(&filled(4096, b'A'), 0)?;
    dev.sync()?;
    dev.write_at(&filled(4096, b'B'), 0)?;
    dev.write_at(&filled(4096, b'C'), 4096)?;
    println!("wrote A, synced, then overwrote with B and appended C (unsynced)");
    dev.crash(CrashMode::DropAll)?;
    if let Err(e) = dev.read_at(&mut AlignedBuf::zeroed(4096), 0) {
        println!("while crashed: {e}");
    }
    dev.restart();
    let mut b = AlignedBuf::zeroed(4096);
    dev.read_at(&mut b, 0)?;
    println!(
        "after restart: block 0 holds {:?}, device length {} bytes",
        b.first().map(|&c| c as char),
        dev.len()
    );
    Ok(())
}

/// The engines, and a round trip through each one built in.
fn engines(dir: &std::path::Path) -> Result<()> {
    heading(4, "Engines");
    super::engines::print();
    for kind in ferrite::available() {
        let path = dir.join(kind.name());
        let db = Config::builder(kind).open(&path)?;
        round_trip(kind, db.as_kv())?;
        db.close()?;
    }
    if ferrite::available().is_empty() {
        println!("\nNo engine is compiled into this build yet; `ferrite kv` reports that by name.");
    }
    Ok(())
}

/// A durable block-address map: ranges in, divided runs out, recovered.
fn block_map(dir: &std::path::Path) -> Result<()> {
    use ferrite_rask::{BlockRange, DurableOptions, DurableRask, PhysicalRun};
    heading(5, "A block-address map (RASK): one entry per written range");
    let path = dir.join("rask");
    let run = |file, block| PhysicalRun::new(file, block).context("run out of range");
    let show = |db: &DurableRask<PhysicalRun>| -> Result<Vec<_>> {
        let answer = db.get(BlockRange::new(0, 1199)?);
        for seg in &answer {
            let range = seg.range.to_string();
            match seg.value {
                Some(v) => println!("  {range:<13} file {} block {}", v.file(), v.block()),
                None => println!("  {range:<13} never written"),
            }
        }
        Ok(answer)
    };
    let db = DurableRask::<PhysicalRun>::open(&path, DurableOptions::default())?;
    db.put(BlockRange::new(0, 1023)?, run(0, 0)?)?;
    db.put(BlockRange::new(256, 511)?, run(0, 1024)?)?;
    db.delete(BlockRange::new(900, 949)?)?;
    println!("mapped blocks 0-1023, rewrote 256-511 elsewhere, trimmed 900-949:");
    let before = show(&db)?;
    let s = db.stats();
    let mut blocks = 0;
    db.index().for_each_mapped(|range, _| blocks += range.len());
    println!(
        "{} entries in {} leaf, {} index bytes (a per-block map holds {blocks} entries)",
        s.entries, s.leaves, s.index_bytes
    );
    drop(db);
    let db = DurableRask::<PhysicalRun>::open(&path, DurableOptions::default())?;
    let r = db.recovery();
    println!(
        "reopened: {} redo-log records replayed in {:.1} ms:",
        r.replayed_records,
        r.seconds * 1e3
    );
    if show(&db)? != before {
        anyhow::bail!("the reopened map answers differently");
    }
    db.index().verify().map_err(anyhow::Error::msg)?;
    Ok(())
}

fn round_trip(kind: EngineKind, db: &dyn KvStore) -> Result<()> {
    for i in 0..1000u32 {
        db.put(format!("key{i:05}").as_bytes(), &i.to_le_bytes())?;
    }
    db.sync()?;
    let some = db.scan_collect(KeyRange::from_bounds(&b"key00100"[..]..), 3)?;
    println!(
        "{kind}: 1000 puts, first three from key00100: {:?}",
        some.iter()
            .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
            .collect::<Vec<_>>()
    );
    db.verify()?;
    Ok(())
}

pub fn run(dir: Option<PathBuf>) -> Result<()> {
    let temp;
    let dir = match dir {
        Some(d) => {
            std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
            d
        }
        None => {
            temp = tempfile::Builder::new()
                .prefix("ferrite-demo-")
                .tempdir_in(std::env::current_dir()?)
                .or_else(|_| tempfile::tempdir())?;
            temp.path().to_path_buf()
        }
    };
    println!("ferrite demo in {}", dir.display());
    println!(
        "io_uring: {}",
        if ferrite_io::io_uring_available() {
            "available"
        } else {
            "unavailable (thread-pool fallback)"
        }
    );
    devices(&dir)?;
    zones(&dir)?;
    crash()?;
    engines(&dir)?;
    block_map(&dir)?;
    println!("\ndone; the demo directory is removed.");
    Ok(())
}
