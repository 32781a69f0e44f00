//! `ferrite volume`: create, serve over NBD, inspect and check a
//! log-structured virtual disk whose block map is RASK.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use ferrite_trace::RecordingMap;
use ferrite_volume::nbd::{NbdConfig, NbdServer};
use ferrite_volume::{CreateOptions, MapKind, SegmentState, Volume, VolumeOptions};

#[derive(Subcommand)]
pub enum VolumeOp {
    /// Lay out a new volume in an empty directory.
    Create {
        #[arg(long)]
        path: PathBuf,
        /// Logical size: bytes, or with a K, M, G or T suffix (powers of 1024).
        #[arg(long, value_parser = parse_size)]
        size: u64,
        /// Segment size of the data log.
        #[arg(long, default_value = "64M", value_parser = parse_size)]
        segment_size: u64,
        /// Spare space for the log's garbage, as a fraction of the size.
        #[arg(long, default_value_t = 0.25)]
        reserve: f64,
        /// Block map: rask, or per-block (a BTreeMap per block, a baseline).
        #[arg(long, default_value = "rask")]
        map: MapKind,
        /// Do not allocate the data log up front (a sparse file: a full
        /// file system then shows as ENOSPC on writes).
        #[arg(long)]
        sparse: bool,
    },
    /// Serve a volume over NBD until SIGINT or SIGTERM.
    Serve {
        #[arg(long)]
        path: PathBuf,
        /// TCP address (port 0: any free port, printed at start).
        #[arg(long, default_value = "127.0.0.1:10809")]
        listen: SocketAddr,
        /// Serve on this Unix socket instead of TCP.
        #[arg(long)]
        unix: Option<PathBuf>,
        /// The export's name (clients asking for "" get it too).
        #[arg(long, default_value = "ferrite")]
        export: String,
        /// Commands one connection runs at once.
        #[arg(long, default_value_t = 16)]
        queue_depth: usize,
        /// Buffered files instead of O_DIRECT.
        #[arg(long)]
        buffered: bool,
        /// Record every operation on the block map into FILE, for
        /// `ferrite repro rask --ops FILE` (format: ferrite-trace's
        /// `map_ops`).
        #[arg(long, value_name = "FILE")]
        record_map_ops: Option<PathBuf>,
        /// Count background work on a board mapped from this file (for
        /// `ferrite crashtest --volume`, which reads it after a kill).
        #[arg(long, hide = true)]
        board: Option<PathBuf>,
    },
    /// Print a volume's geometry, space and map statistics.
    Inspect {
        #[arg(long)]
        path: PathBuf,
    },
    /// Verify every map entry and the segments' live counts.
    Check {
        #[arg(long)]
        path: PathBuf,
    },
}

/// Parses `4096`, `64K`, `512M`, `64G`, `1T` (powers of 1024).
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m: u64 = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => return Err(format!("unknown size suffix in {s:?}: use K, M, G or T")),
            };
            (&t[..i], m)
        }
        _ => (t, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 4096, 512M, 64G)"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("{s:?} is too large"))
}

pub fn run(op: VolumeOp) -> Result<()> {
    match op {
        VolumeOp::Create {
            path,
            size,
            segment_size,
            reserve,
            map,
            sparse,
        } => {
            let opts = CreateOptions {
                logical_bytes: size,
                segment_bytes: segment_size,
                reserve,
                map,
                preallocate: !sparse,
            };
            let sb = ferrite_volume::create(&path, &opts)
                .with_context(|| format!("creating a volume in {}", path.display()))?;
            println!(
                "created {}: {} bytes in {} segments of {} bytes ({} map)",
                path.display(),
                sb.logical_bytes,
                sb.segments,
                sb.segment_bytes(),
                sb.map
            );
            Ok(())
        }
        VolumeOp::Serve {
            path,
            listen,
            unix,
            export,
            queue_depth,
            buffered,
            record_map_ops,
            board,
        } => {
            if let Some(b) = &board {
                ferrite::background::install_file(b)
                    .map_err(|e| anyhow::anyhow!("mapping the board {}: {e}", b.display()))?;
            }
            let opts = VolumeOptions {
                direct_io: !buffered,
                ..VolumeOptions::default()
            };
            serve(
                path,
                listen,
                unix,
                export,
                queue_depth,
                opts,
                record_map_ops,
            )
        }
        VolumeOp::Inspect { path } => inspect(&path),
        VolumeOp::Check { path } => check(&path),
    }
}

fn open(path: &std::path::Path) -> Result<Volume> {
    Volume::open(path, VolumeOptions::default())
        .with_context(|| format!("opening the volume in {}", path.display()))
}

fn serve(
    path: PathBuf,
    listen: SocketAddr,
    unix: Option<PathBuf>,
    export: String,
    queue_depth: usize,
    opts: VolumeOptions,
    record_map_ops: Option<PathBuf>,
) -> Result<()> {
    // A client that goes away must not take the server with it.
    // SAFETY: called before any thread starts; SIG_IGN is a valid
    // disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    let volume = Arc::new(
        Volume::open_wrapped(&path, opts, |map| match &record_map_ops {
            Some(file) => Ok(Box::new(RecordingMap::new(map, file)?)),
            None => Ok(map),
        })
        .with_context(|| format!("opening the volume in {}", path.display()))?,
    );
    let config = NbdConfig {
        listen: if unix.is_some() { None } else { Some(listen) },
        unix: unix.clone(),
        export: export.clone(),
        queue_depth,
        ..NbdConfig::default()
    };
    let server = NbdServer::start(volume.clone(), config)?;
    ferrite_volume::nbd::stop_on_signals(&server)?;
    let recovered = volume.stats().map_recovery_seconds;
    // Scripts and tests read the address from the first line.
    match (&unix, server.local_addr()) {
        (Some(sock), _) => println!(
            "ferrite volume serving {export:?} on nbd+unix:///{export}?socket={} (map recovered in {recovered:.3} s)",
            sock.display()
        ),
        (None, Some(addr)) => println!(
            "ferrite volume serving {export:?} on nbd://{addr}/{export} (map recovered in {recovered:.3} s)"
        ),
        (None, None) => bail!("the server has no address"),
    }
    server.wait().context("flushing the volume")?;
    match Arc::try_unwrap(volume) {
        Ok(v) => v.close().context("closing the volume")?,
        Err(v) => v.flush().context("flushing the volume")?,
    }
    eprintln!("ferrite: stopped; the volume is flushed");
    Ok(())
}

fn inspect(path: &std::path::Path) -> Result<()> {
    let v = open(path)?;
    let sb = v.superblock();
    let st = v.stats();
    let segs = v.segments();
    let count = |s: SegmentState| segs.iter().filter(|i| i.state == s).count();
    println!("volume        {}", path.display());
    println!(
        "size          {} bytes ({} blocks of {})",
        sb.logical_bytes,
        sb.logical_blocks(),
        sb.block_size
    );
    println!(
        "data log      {} segments of {} bytes ({} bytes)",
        sb.segments,
        sb.segment_bytes(),
        sb.physical_bytes()
    );
    println!(
        "segments      {} free, {} sealed, {} open, {} draining",
        count(SegmentState::Free),
        count(SegmentState::Sealed),
        count(SegmentState::Open),
        count(SegmentState::Draining)
    );
    println!(
        "live          {} blocks ({:.1}% of the size), space amplification {:.3}",
        st.live_blocks,
        100.0 * st.live_blocks as f64 / sb.logical_blocks() as f64,
        st.space_amplification()
    );
    println!(
        "map           {} ({} entries, {} log bytes, recovered in {:.3} s)",
        sb.map, st.map_entries, st.map_log_bytes, st.map_recovery_seconds
    );
    let mut hist = [0usize; 5];
    for s in segs.iter().filter(|s| s.state == SegmentState::Sealed) {
        let u = s.live as f64 / sb.segment_blocks as f64;
        hist[((u * 5.0) as usize).min(4)] += 1;
    }
    println!(
        "sealed by live fraction  0-20%: {}  20-40%: {}  40-60%: {}  60-80%: {}  80-100%: {}",
        hist[0], hist[1], hist[2], hist[3], hist[4]
    );
    v.close()?;
    Ok(())
}

fn check(path: &std::path::Path) -> Result<()> {
    let v = open(path)?;
    let r = v.check()?;
    println!(
        "{} map entries, {} mapped blocks, {} segments in use",
        r.entries, r.mapped_blocks, r.segments_in_use
    );
    v.close()?;
    if !r.problems.is_empty() {
        for p in &r.problems {
            eprintln!("problem: {p}");
        }
        bail!("{} problems in {}", r.problems.len(), path.display());
    }
    println!("ok");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64G"), Ok(64 << 30));
        assert_eq!(parse_size("512m"), Ok(512 << 20));
        assert!(parse_size("12X").is_err());
        assert!(parse_size("G").is_err());
        assert!(parse_size("99999999999T").is_err());
    }
}
