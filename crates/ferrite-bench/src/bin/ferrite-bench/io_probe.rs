//! `ferrite io-probe` (`ferrite-bench io-probe`): how much does reading four 4 KiB blocks at once
//! cost compared with reading them one after another?
//!
//! This is the premise of one-shot traversal: if a batch of N independent
//! reads costs about one read, a lookup that knows its whole path can pay
//! one device round trip instead of one per level. The probe measures, on a
//! file of real (written, not merely allocated) data with O_DIRECT:
//! - `serial4`: four dependent reads, each issued after the previous one
//!   returns (a B+tree descent);
//! - `batch4`: one io_uring submission of four reads;
//! - `batch4_pool`: the same batch through the pread thread-pool fallback;
//! - `read1`: a single read.
//!
//! Samples alternate between the variants so that drift on a shared
//! machine affects all alike; medians are reported.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use ferrite_io::{AlignedBuf, BatchMode, BlockDevice, DirectFile, DirectFileOptions, ReadReq};
use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use ferrite_bench::provenance;

const BLOCK: usize = 4096;

#[derive(Args)]
pub struct IoProbeArgs {
    /// Data file to read (created and filled if missing or too small).
    #[arg(long, default_value = "ferrite-io-probe.dat")]
    file: PathBuf,
    /// Size of the data file in GiB (at least 4 for the reference figure,
    /// so reads cannot be served from a device-side cache).
    #[arg(long, default_value_t = 4)]
    size_gib: u64,
    /// Measured samples per variant.
    #[arg(long, default_value_t = 3000)]
    samples: usize,
    /// Unmeasured samples per variant before measuring.
    #[arg(long, default_value_t = 300)]
    warmup: usize,
    /// Write the result as JSON to this path.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Keep the data file afterwards (it is removed by default).
    #[arg(long)]
    keep: bool,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Allow running a debug build (numbers are not comparable).
    #[arg(long)]
    allow_debug: bool,
}

/// Summary of one variant's latencies, in microseconds.
struct Summary {
    median: f64,
    p95: f64,
    p99: f64,
}

fn summarize(mut v: Vec<f64>) -> Summary {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let i = ((v.len() as f64 - 1.0) * q).round() as usize;
        v.get(i).copied().unwrap_or(f64::NAN)
    };
    Summary {
        median: at(0.5),
        p95: at(0.95),
        p99: at(0.99),
    }
}

fn open(path: &PathBuf, mode: BatchMode) -> Result<DirectFile> {
    DirectFile::open_with(
        path,
        DirectFileOptions {
            batch_mode: mode,
            ..DirectFileOptions::default()
        },
    )
    .with_context(|| format!("opening {}", path.display()))
}

/// Fills the file with pseudo-random bytes so every block is really on disk.
fn fill(dev: &DirectFile, size: u64, seed: u64) -> Result<()> {
    const CHUNK: usize = 4 << 20;
    let bar = ProgressBar::new(size).with_style(
        ProgressStyle::with_template("writing probe file {bar:40} {bytes}/{total_bytes} ({eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut buf = AlignedBuf::zeroed(CHUNK);
    let mut at = 0u64;
    while at < size {
        rng.fill(&mut buf[..]);
        dev.write_at(&buf, at)?;
        at += CHUNK as u64;
        bar.set_position(at);
    }
    dev.sync()?;
    bar.finish_and_clear();
    Ok(())
}

pub fn run(args: IoProbeArgs) -> Result<()> {
    if cfg!(debug_assertions) && !args.allow_debug {
        bail!("io-probe measures latency; run a release build (cargo run --release -- io-probe)");
    }
    if args.samples == 0 {
        bail!("--samples must be at least 1");
    }
    let size = args.size_gib.max(1) << 30;
    let serial = open(&args.file, BatchMode::Sequential)?;
    let filled_marker = args.file.with_extension("filled");
    if serial.len() < size || !filled_marker.exists() {
        fill(&serial, size, args.seed)?;
        std::fs::write(&filled_marker, size.to_string()).context("writing the fill marker")?;
    }
    let ring = open(&args.file, BatchMode::Auto)?;
    let pool = open(&args.file, BatchMode::ThreadPool)?;
    if !ring.is_direct() {
        log::warn!("the file system refused O_DIRECT: results include the page cache");
    }
    let blocks = size / BLOCK as u64;
    let mut rng = SmallRng::seed_from_u64(args.seed ^ 0x5eed);
    let mut bufs: Vec<AlignedBuf> = (0..4).map(|_| AlignedBuf::zeroed(BLOCK)).collect();
    let mut serial4 = Vec::with_capacity(args.samples);
    let mut batch4 = Vec::with_capacity(args.samples);
    let mut pool4 = Vec::with_capacity(args.samples);
    let mut read1 = Vec::with_capacity(args.samples);
    let total = args.warmup + args.samples;
    let bar = ProgressBar::new(total as u64).with_style(
        ProgressStyle::with_template("probing {bar:40} {pos}/{len} rounds")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    for round in 0..total {
        let mut offsets = [0u64; 4];
        for o in offsets.iter_mut() {
            *o = rng.gen_range(0..blocks) * BLOCK as u64;
        }
        // Rotate the order of the variants so none always runs first.
        let mut times = [0f64; 4];
        for step in 0..4 {
            let variant = (round + step) % 4;
            let t = Instant::now();
            match variant {
                0 => {
                    for (b, &o) in bufs.iter_mut().zip(&offsets) {
                        serial.read_at(b, o)?;
                    }
                }
                1 | 2 => {
                    let dev = if variant == 1 { &ring } else { &pool };
                    let mut reqs: Vec<ReadReq> = bufs
                        .iter_mut()
                        .zip(&offsets)
                        .map(|(b, &o)| ReadReq::new(o, b))
                        .collect();
                    dev.read_batch(&mut reqs)?;
                }
                _ => {
                    if let Some(b) = bufs.first_mut() {
                        serial.read_at(b, offsets[0])?;
                    }
                }
            }
            times[variant] = t.elapsed().as_secs_f64() * 1e6;
        }
        if round >= args.warmup {
            serial4.push(times[0]);
            batch4.push(times[1]);
            pool4.push(times[2]);
            read1.push(times[3]);
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    let (s, b, p, r) = (
        summarize(serial4),
        summarize(batch4),
        summarize(pool4),
        summarize(read1),
    );
    let ratio = b.median / s.median;
    println!(
        "4 KiB random reads over {} GiB, {} samples each (µs):",
        args.size_gib, args.samples
    );
    println!(
        "{:<28} {:>9} {:>9} {:>9}",
        "variant", "median", "p95", "p99"
    );
    for (name, x) in [
        ("one read", &r),
        ("four dependent reads", &s),
        ("batch of four (io_uring)", &b),
        ("batch of four (threads)", &p),
    ] {
        println!("{name:<28} {:>9.1} {:>9.1} {:>9.1}", x.median, x.p95, x.p99);
    }
    println!(
        "batch4 / serial4 = {ratio:.3}  (io_uring batches via {:?})",
        ring.batch_mode()
    );
    let prov = provenance::Provenance::capture();
    let report = json!({
        "experiment": "io-probe",
        "commit": prov.commit,
        "date": prov.date,
        "command": prov.command,
        "machine": prov.machine,
        "params": {
            "file_bytes": size,
            "block_bytes": BLOCK,
            "samples": args.samples,
            "warmup": args.warmup,
            "o_direct": ring.is_direct(),
            "batch_mode": format!("{:?}", ring.batch_mode()),
            "seed": args.seed,
        },
        "metrics": {
            "serial4_us": s.median,
            "batch4_us": b.median,
            "batch4_over_serial4": ratio,
            "read1_us": r.median,
            "batch4_pool_us": p.median,
            "batch4_pool_over_serial4": p.median / s.median,
            "serial4_p95_us": s.p95,
            "batch4_p95_us": b.p95,
            "serial4_p99_us": s.p99,
            "batch4_p99_us": b.p99,
        },
    });
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    if !args.keep {
        drop((serial, ring, pool));
        std::fs::remove_file(&args.file).ok();
        std::fs::remove_file(&filled_marker).ok();
    }
    Ok(())
}
