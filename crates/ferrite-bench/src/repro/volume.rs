//! `volume`: the NBD volume on RASK against the same volume on a
//! per-block map and against `nbdkit file` on a plain file, driven by
//! `fio --ioengine=nbd` over loopback, side by side in one run.
//!
//! For each write shape (4 KiB, 64 KiB, and a `bssplit` made from the
//! CloudPhysics trace's write sizes) every target starts fresh, is filled
//! sequentially to 80% (1 MiB writes, then a flush), takes random writes
//! over the filled part at QD 16 from 2 jobs (a flush every 16 writes per
//! job), then, after the page cache is dropped, random reads of the same
//! shape at QD 16 (the 4 KiB shape also at QD 1). The ferrite volumes run
//! in this process, so their map's heap is counted exactly (the counting
//! allocator) after each write phase, at rest (reclamation finished).
//! Then the trace itself is replayed through fio (an iolog of its writes
//! and reads, QD 16) on a fresh, sparse target of each kind. Then, in
//! process, a RASK volume at 80% full is overwritten three times over
//! with the trace's write sizes, for the space and write amplification
//! that reclamation leaves, and reopened after a clean stop; the same
//! pass runs again on a larger volume, where the reclaimer's fixed slack
//! of a few segments weighs less (the claim is judged there). Last, a
//! volume written in full by fio, served by its own `ferrite volume serve`
//! process, is killed with SIGKILL under writes, reopened and checked:
//! the recovery time.
//!
//! Fairness: the same fio jobs and flush schedule for every target;
//! ferrite's data log is O_DIRECT, `nbdkit file` runs with its defaults
//! (page cache), with `cache=none`, and with its defaults inside a memory
//! cgroup that caps its page cache far below the read working set (where
//! this host lets the benchmark create one); reads follow a page-cache
//! drop.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrite_trace::{BlockOp, BlockRequest};
use ferrite_volume::nbd::{NbdConfig, NbdServer};
use ferrite_volume::{CreateOptions, MapKind, Volume, VolumeOptions};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::driver::{
    ferrite_binary, free_port, fresh_dir, made_dir, need, wait_for_port, Metrics, Report, Study,
    Table,
};
use super::ReproContext;
use crate::error::{BenchError, Result};
use crate::memory_cgroup::MemoryCgroup;

pub struct VolumeRepro;

const TARGET: &str = "volume target (issue: NBD volume)";

sizes! {
    struct Sizes {
        volume_bytes: u64 = (64 << 20, 1 << 30, 4 << 30),
        segment_bytes: u64 = (4 << 20, 64 << 20, 64 << 20),
        phase_secs: u64 = (1, 12, 30),
        qd1_secs: u64 = (1, 6, 15),
        /// Bytes overwritten in the space-amplification pass, as a multiple of
        /// the volume.
        overwrite_factor: f64 = (3.0, 3.0, 3.0),
        /// Trace requests replayed (a prefix at smoke scale).
        trace_requests: usize = (2_000, usize::MAX, usize::MAX),
        /// The memory cgroup limit of the capped `nbdkit file` (its page
        /// cache and its own memory).
        #[serde(default)]
        page_cache_cap: u64 = (32 << 20, 64 << 20, 256 << 20),
        /// The volume written in full, then killed under writes, for the
        /// recovery time.
        #[serde(default)]
        crash_volume_bytes: u64 = (256 << 20, 64 << 30, 64 << 30),
        /// Seconds of overwrites between the full write and the kill.
        #[serde(default)]
        crash_after_secs: u64 = (2, 10, 10),
        /// A second, larger reclamation pass: the reclaimer's slack is a few
        /// segments whatever the size, so a 1 GiB volume overstates what it
        /// leaves on volumes of the sizes clients use.
        #[serde(default)]
        gc_volume_bytes: u64 = (64 << 20, 8 << 30, 16 << 30),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Rask,
    PerBlock,
    Nbdkit,
    NbdkitNoCache,
    /// `nbdkit file` with its defaults in a memory cgroup of
    /// `Sizes::page_cache_cap` bytes.
    NbdkitCapped,
}

const TARGETS: [Target; 5] = [
    Target::Rask,
    Target::PerBlock,
    Target::Nbdkit,
    Target::NbdkitNoCache,
    Target::NbdkitCapped,
];

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Rask => "ferrite volume (rask)",
            Target::PerBlock => "ferrite volume (per-block map)",
            Target::Nbdkit => "nbdkit file",
            Target::NbdkitNoCache => "nbdkit file cache=none",
            Target::NbdkitCapped => "nbdkit file, page cache capped",
        }
    }

    fn map(self) -> Option<MapKind> {
        match self {
            Target::Rask => Some(MapKind::Rask),
            Target::PerBlock => Some(MapKind::PerBlock),
            _ => None,
        }
    }
}

/// One fio phase on one target.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Row {
    target: String,
    shape: String,
    phase: String,
    iodepth: u32,
    jobs: u32,
    iops: f64,
    mib_s: f64,
    p50_us: f64,
    p99_us: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Results {
    sizes: Option<Sizes>,
    rows: Vec<Row>,
    /// Heap bytes of the map after each write phase: "target / shape".
    map_bytes: BTreeMap<String, u64>,
    map_entries: BTreeMap<String, u64>,
    /// Seconds to replay the trace, by target.
    trace_seconds: BTreeMap<String, f64>,
    trace_requests: u64,
    bssplit: String,
    space_amp: Option<f64>,
    write_amp: Option<f64>,
    overwritten_bytes: u64,
    /// The reopen of the reclamation pass's volume after a clean stop.
    recovery_seconds: Option<f64>,
    recovery_map_entries: u64,
    #[serde(default)]
    crash: Option<CrashRecovery>,
    /// The reclamation pass on a `gc_volume_bytes` volume.
    #[serde(default)]
    space_large: Option<SpacePass>,
    tools: BTreeMap<String, String>,
    notes: Vec<String>,
}

/// One reclamation pass: a RASK volume at 80% full overwritten three
/// times over with the trace's write sizes, then reopened.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct SpacePass {
    volume_bytes: u64,
    space_amp: f64,
    write_amp: f64,
    overwritten_bytes: u64,
    map_entries: u64,
    /// The reopen after a clean stop.
    reopen_seconds: f64,
}

/// A fully written volume served by a `ferrite volume serve` process
/// that is killed (SIGKILL) under random writes, then reopened.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct CrashRecovery {
    volume_bytes: u64,
    /// fio's random writes over the whole volume, every block once.
    fill_seconds: f64,
    fill_mib_s: f64,
    /// Seconds of overwrites (2 jobs, QD 16, a flush every 16 writes per
    /// job) before the kill.
    killed_after_secs: u64,
    /// The map's files as the kill left them: name and bytes.
    map_files: BTreeMap<String, u64>,
    /// Whether the page cache was dropped before the reopen.
    cold: bool,
    /// The whole reopen: superblock, map (snapshot, then its log), and
    /// the walk that rebuilds the segments' live counts.
    recovery_seconds: f64,
    /// The map's part of it.
    map_recovery_seconds: f64,
    map_entries: u64,
    live_bytes: u64,
    /// What `ferrite volume check` finds after the reopen.
    check_problems: Vec<String>,
}

fn verr(e: ferrite_volume::VolumeError) -> BenchError {
    BenchError::Config(format!("volume: {e}"))
}

/// A target being served.
enum Running {
    InProcess {
        server: NbdServer,
        volume: Arc<Volume>,
    },
    Process(Child),
    Stopped,
}

struct Served {
    running: Running,
    uri: String,
    /// The capped target's group, removed after its process stops.
    cgroup: Option<MemoryCgroup>,
}

impl Served {
    fn volume(&self) -> Option<&Arc<Volume>> {
        match &self.running {
            Running::InProcess { volume, .. } => Some(volume),
            Running::Process(_) | Running::Stopped => None,
        }
    }

    fn stop(mut self) -> Result<()> {
        match std::mem::replace(&mut self.running, Running::Stopped) {
            Running::InProcess { server, volume } => {
                server.shutdown();
                server.wait().map_err(verr)?;
                match Arc::try_unwrap(volume) {
                    Ok(v) => v.close().map_err(verr),
                    Err(v) => v.flush().map_err(verr),
                }
            }
            Running::Process(mut c) => {
                let _ = c.kill();
                let _ = c.wait();
                Ok(())
            }
            Running::Stopped => Ok(()),
        }
    }
}

impl Drop for Served {
    /// A server process stops with its target, also on an error path, so
    /// its cgroup (dropped after this) is empty and can be removed.
    fn drop(&mut self) {
        if let Running::Process(c) = &mut self.running {
            let _ = c.kill();
            let _ = c.wait();
        }
        drop(self.cgroup.take());
    }
}

/// Where the RASK volume's map operations of `phase` are recorded, if
/// `--record-map-ops DIR` asked for them.
fn recording(ctx: &ReproContext, t: Target, phase: &str) -> Result<Option<PathBuf>> {
    match &ctx.record_map_ops {
        Some(dir) if t == Target::Rask => Ok(Some(made_dir(dir)?.join(format!("{phase}.ops")))),
        _ => Ok(None),
    }
}

fn serve(
    t: Target,
    dir: &Path,
    bytes: u64,
    s: &Sizes,
    sparse: bool,
    record: Option<PathBuf>,
) -> Result<Served> {
    made_dir(dir)?;
    let port = free_port()?;
    match t.map() {
        Some(map) => {
            let vdir = dir.join("volume");
            let mut o = CreateOptions::new(bytes);
            o.segment_bytes = s.segment_bytes;
            o.map = map;
            o.preallocate = !sparse;
            ferrite_volume::create(&vdir, &o).map_err(verr)?;
            let volume = Volume::open_wrapped(&vdir, VolumeOptions::default(), |m| match &record {
                Some(file) => Ok(Box::new(ferrite_trace::RecordingMap::new(m, file)?)),
                None => Ok(m),
            })
            .map_err(verr)?;
            let volume = Arc::new(volume);
            let config = NbdConfig {
                listen: Some(([127, 0, 0, 1], port).into()),
                ..NbdConfig::default()
            };
            let server = NbdServer::start(volume.clone(), config).map_err(verr)?;
            Ok(Served {
                running: Running::InProcess { server, volume },
                uri: format!("nbd://127.0.0.1:{port}/ferrite"),
                cgroup: None,
            })
        }
        None => {
            let file = dir.join("disk.img");
            let opts = ferrite_io::DirectFileOptions {
                direct: false,
                ..ferrite_io::DirectFileOptions::default()
            };
            let f = ferrite_io::DirectFile::open_with(&file, opts)
                .map_err(|e| BenchError::Config(e.to_string()))?;
            let sized = ferrite_io::BlockDevice::set_len(&f, bytes).and_then(|()| {
                if sparse {
                    Ok(())
                } else {
                    f.allocate(0, bytes)
                }
            });
            sized.map_err(|e| BenchError::Config(e.to_string()))?;
            drop(f);
            let mut cmd = Command::new("nbdkit");
            cmd.args(["-f", "--exit-with-parent", "-i", "127.0.0.1", "-p"])
                .arg(port.to_string())
                .arg("file")
                .arg(&file);
            if t == Target::NbdkitNoCache {
                cmd.arg("cache=none");
            }
            let cgroup = match t {
                Target::NbdkitCapped => Some(capped_group(s.page_cache_cap)?),
                _ => None,
            };
            let mut child = cmd
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| BenchError::Config(format!("nbdkit: {e}")))?;
            // Moved in before it serves a request, so every page it reads
            // or writes is charged to the group.
            let joined = cgroup.as_ref().map_or(Ok(()), |g| g.add(child.id()));
            let up = joined
                .map_err(BenchError::Config)
                .and_then(|()| wait_for_port(port, &mut child, "nbdkit"));
            if let Err(e) = up {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
            Ok(Served {
                running: Running::Process(child),
                uri: format!("nbd://127.0.0.1:{port}/"),
                cgroup,
            })
        }
    }
}

/// A fresh memory cgroup for one capped target.
fn capped_group(limit: u64) -> Result<MemoryCgroup> {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!("ferrite-volume-{}-{n}", std::process::id());
    MemoryCgroup::create(&name, limit).map_err(BenchError::Config)
}

/// The targets this host can serve: all but the capped `nbdkit file`
/// where no memory cgroup can be made (the reason goes in `notes`).
fn available_targets(s: &Sizes, notes: &mut Vec<String>) -> Vec<Target> {
    match capped_group(s.page_cache_cap) {
        Ok(_) => TARGETS.to_vec(),
        Err(why) => {
            notes.push(format!(
                "no capped nbdkit target: {why} (a memory cgroup needs root or a delegated subtree)"
            ));
            TARGETS
                .into_iter()
                .filter(|&t| t != Target::NbdkitCapped)
                .collect()
        }
    }
}

/// Runs fio and returns (iops, MiB/s, p50 µs, p99 µs) of its one
/// direction with I/O.
fn fio(uri: &str, args: &[String]) -> Result<(f64, f64, f64, f64)> {
    let out = Command::new("fio")
        .args([
            "--name=job".to_string(),
            "--ioengine=nbd".to_string(),
            format!("--uri={uri}"),
            "--output-format=json".to_string(),
            "--group_reporting".to_string(),
        ])
        .args(args)
        .output()
        .map_err(|e| BenchError::Config(format!("fio: {e}")))?;
    if !out.status.success() {
        return Err(BenchError::Config(format!(
            "fio {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    // fio may print notes before the JSON.
    let start = text.find('{').unwrap_or(0);
    let v: serde_json::Value = serde_json::from_str(&text[start..])
        .map_err(|e| BenchError::Config(format!("fio output: {e}")))?;
    let job = &v["jobs"][0];
    if job["error"].as_i64().unwrap_or(0) != 0 {
        return Err(BenchError::Config(format!(
            "fio reported error {}",
            job["error"]
        )));
    }
    let dir = if job["write"]["io_bytes"].as_f64().unwrap_or(0.0) > 0.0 {
        &job["write"]
    } else {
        &job["read"]
    };
    let pct = |p: &str| dir["clat_ns"]["percentile"][p].as_f64().unwrap_or(0.0) / 1000.0;
    Ok((
        dir["iops"].as_f64().unwrap_or(0.0),
        dir["bw_bytes"].as_f64().unwrap_or(0.0) / (1 << 20) as f64,
        pct("50.000000"),
        pct("99.000000"),
    ))
}

fn drop_caches() -> bool {
    let _ = Command::new("sync").status();
    std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

/// The trace's write sizes as a fio `bssplit` (power-of-two buckets of
/// 4 KiB blocks, percentages of writes).
fn bssplit(trace: &[BlockRequest]) -> String {
    let mut buckets: BTreeMap<u64, u64> = BTreeMap::new();
    let writes: Vec<_> = trace.iter().filter(|r| r.op == BlockOp::Write).collect();
    for w in &writes {
        let b = w.blocks.next_power_of_two().min(256);
        *buckets.entry(b).or_default() += 1;
    }
    let total = writes.len().max(1) as f64;
    let mut parts: Vec<(u64, u64)> = buckets
        .iter()
        .map(|(&b, &n)| (b, (100.0 * n as f64 / total).round() as u64))
        .filter(|&(_, p)| p > 0)
        .collect();
    let sum: u64 = parts.iter().map(|p| p.1).sum();
    if let Some(largest) = parts.iter_mut().max_by_key(|p| p.1) {
        largest.1 = (largest.1 + 100).saturating_sub(sum);
    }
    parts
        .iter()
        .map(|(b, p)| format!("{}k/{p}", b * 4))
        .collect::<Vec<_>>()
        .join(":")
}

fn heap() -> Option<u64> {
    crate::counting_alloc::live_bytes()
}

/// Heap in use once a freshly opened volume's map has freed what earlier
/// ones retired: the base its growth is measured from.
fn baseline(served: &Served) -> Option<u64> {
    if let Some(v) = served.volume() {
        v.settle_map();
    }
    heap()
}

/// Brings a volume to rest before its map's heap is measured: a
/// reclamation pass still running holds its copy buffer and its victims'
/// live pieces (for a per-block map, one per block: megabytes) in the
/// heap, which would be counted as the map's. So the reclaimer finishes
/// first (as it would within moments of the writes stopping), then the
/// map frees what it retired.
fn at_rest(v: &Volume) -> Result<()> {
    v.reclaim_now().map_err(verr)?;
    v.settle_map();
    Ok(())
}

claims! {
    struct Claims {
        randwrite4k_qd16_vs_nbdkit >= 1.0, TARGET;
        randread4k_qd16_vs_nbdkit >= 0.8, TARGET;
        randread4k_qd16_vs_nbdkit_capped >= 0.8, TARGET;
        map_memory_vs_perblock <= 0.1, TARGET;
        map_memory_4k_vs_perblock <= 1.0, TARGET;
        space_amp_gc <= 1.3, TARGET;
        recovery_check_problems == 0, "(correctness)";
    }
}

impl Study for VolumeRepro {
    type Results = Results;
    type Claims = Claims;
    const NAME: &'static str = "volume";
    const SUMMARY: &'static str =
        "NBD volume on RASK vs a per-block map vs nbdkit file, fio over loopback, plus GC and recovery";
    type Sizes = Sizes;

    fn measure(&self, ctx: &ReproContext, s: Sizes) -> Result<Results> {
        let mut r = Results {
            sizes: Some(s),
            ..Results::default()
        };
        for tool in ["fio", "nbdkit"] {
            let version = need(tool, "scripts/install-nbd-tools.sh")?;
            r.tools.insert(tool.into(), version);
        }
        if !crate::counting_alloc::installed() {
            r.notes
                .push("no counting allocator in this process: map memory not measured".into());
        }
        let trace_path = ctx.data_dir.join("traces/cloudphysics.csv");
        let trace = if trace_path.exists() {
            ferrite_trace::parse_cloudphysics(&trace_path)
                .map_err(|e| BenchError::Config(format!("trace: {e}")))?
        } else {
            r.notes.push(format!(
                "{} is missing: the bssplit shape falls back to 4k-64k and no trace is replayed",
                trace_path.display()
            ));
            Vec::new()
        };
        r.bssplit = if trace.is_empty() {
            "4k/50:16k/25:64k/25".into()
        } else {
            bssplit(&trace)
        };
        let targets = available_targets(&s, &mut r.notes);
        let fill = (s.volume_bytes as f64 * 0.8) as u64 / (1 << 20) * (1 << 20);
        if drop_caches() {
            r.notes
                .push("random reads follow a page-cache drop (/proc/sys/vm/drop_caches)".into());
        } else {
            r.notes.push(
                "the page cache could not be dropped (not root): nbdkit's reads may hit it".into(),
            );
        }
        let shapes: [(&str, String); 3] = [
            ("4k", "--bs=4k".into()),
            ("64k", "--bs=64k".into()),
            ("bssplit", format!("--bssplit={}", r.bssplit)),
        ];
        for (shape, bs_arg) in &shapes {
            for &t in &targets {
                let dir = fresh_dir(&ctx.work_dir.join(format!("volume-{shape}")))?;
                let record = recording(ctx, t, shape)?;
                let served = serve(t, &dir, s.volume_bytes, &s, false, record)?;
                let heap0 = baseline(&served);
                progress!(ctx, "volume: {shape} on {}", t.name());
                let uri = served.uri.clone();
                fio(
                    &uri,
                    &[
                        "--rw=write".into(),
                        "--bs=1M".into(),
                        format!("--size={fill}"),
                        "--iodepth=16".into(),
                        "--end_fsync=1".into(),
                    ],
                )?;
                let mut phase = |phase: &str,
                                 rw: &str,
                                 bs: &str,
                                 qd: u32,
                                 jobs: u32,
                                 secs: u64|
                 -> Result<()> {
                    let mut args = vec![
                        format!("--rw={rw}"),
                        bs.to_string(),
                        format!("--size={fill}"),
                        format!("--iodepth={qd}"),
                        format!("--numjobs={jobs}"),
                        "--time_based".into(),
                        format!("--runtime={secs}"),
                        "--ramp_time=1".into(),
                        "--randrepeat=0".into(),
                    ];
                    if rw == "randwrite" {
                        args.push("--fsync=16".into());
                    }
                    let (iops, mib_s, p50, p99) = fio(&uri, &args)?;
                    r.rows.push(Row {
                        target: t.name().into(),
                        shape: shape.to_string(),
                        phase: phase.into(),
                        iodepth: qd,
                        jobs,
                        iops,
                        mib_s,
                        p50_us: p50,
                        p99_us: p99,
                    });
                    Ok(())
                };
                phase("randwrite", "randwrite", bs_arg, 16, 2, s.phase_secs)?;
                if let Some(v) = served.volume() {
                    at_rest(v)?;
                    let key = format!("{} / {shape}", t.name());
                    if let (Some(h0), Some(h1)) = (heap0, heap()) {
                        r.map_bytes.insert(key.clone(), h1.saturating_sub(h0));
                    }
                    r.map_entries.insert(key, v.stats().map_entries);
                }
                if *shape == "4k" {
                    phase("randwrite", "randwrite", bs_arg, 1, 1, s.qd1_secs)?;
                }
                drop_caches();
                phase("randread", "randread", bs_arg, 16, 2, s.phase_secs)?;
                if *shape == "4k" {
                    drop_caches();
                    phase("randread", "randread", bs_arg, 1, 1, s.qd1_secs)?;
                }
                served.stop()?;
                let _ = std::fs::remove_dir_all(&dir);
            }
        }
        if !trace.is_empty() {
            let n = trace.len().min(s.trace_requests);
            replay_trace(ctx, &trace[..n], &targets, &s, &mut r)?;
        }
        let pass = space_pass(ctx, &s, s.volume_bytes, &trace)?;
        r.space_amp = Some(pass.space_amp);
        r.write_amp = Some(pass.write_amp);
        r.overwritten_bytes = pass.overwritten_bytes;
        r.recovery_map_entries = pass.map_entries;
        r.recovery_seconds = Some(pass.reopen_seconds);
        if s.gc_volume_bytes > s.volume_bytes {
            let need = s.gc_volume_bytes + s.gc_volume_bytes / 4;
            match space_shortfall(&ctx.work_dir, need) {
                None => r.space_large = Some(space_pass(ctx, &s, s.gc_volume_bytes, &trace)?),
                Some(short) => r.notes.push(format!(
                    "no reclamation pass on {} GiB: it {short}",
                    s.gc_volume_bytes >> 30
                )),
            }
        }
        crash_recovery(ctx, &s, &r.bssplit.clone(), &mut r)?;
        Ok(r)
    }

    fn params(&self, r: &Results) -> serde_json::Value {
        json!({
            "fill": "80% sequential 1 MiB writes, then a flush",
            "fio": "ioengine=nbd over loopback, 2 jobs x QD 16 (and 1 job x QD 1 for 4k), fsync=16 on writes, time_based with 1 s ramp",
            "bssplit": r.bssplit,
            "durability": "every target flushes every 16 writes per job (NBD_CMD_FLUSH): ferrite syncs its data log then its map; nbdkit file fdatasyncs",
            "tools": r.tools,
        })
    }

    fn metrics(&self, r: &Results, c: &mut Claims) -> Metrics {
        let mut m = Metrics::new();
        let iops = |t: Target, shape: &str, phase: &str, qd: u32| {
            r.rows
                .iter()
                .find(|x| {
                    x.target == t.name() && x.shape == shape && x.phase == phase && x.iodepth == qd
                })
                .map(|x| x.iops)
        };
        let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b);
        // The RASK volume's 4 KiB QD 16 IOPS over each `nbdkit file`
        // variant's; the claims take three of the six.
        let vs = |phase: &str, t: Target| {
            ratio(
                iops(Target::Rask, "4k", phase, 16),
                iops(t, "4k", phase, 16),
            )
        };
        c.randwrite4k_qd16_vs_nbdkit
            .set_some(vs("randwrite", Target::Nbdkit));
        c.randread4k_qd16_vs_nbdkit
            .set_some(vs("randread", Target::Nbdkit));
        c.randread4k_qd16_vs_nbdkit_capped
            .set_some(vs("randread", Target::NbdkitCapped));
        m.set_some(
            "randwrite4k_qd16_vs_nbdkit_capped",
            vs("randwrite", Target::NbdkitCapped),
        );
        for phase in ["randwrite", "randread"] {
            m.set_some(
                format!("{phase}4k_qd16_vs_nbdkit_nocache"),
                vs(phase, Target::NbdkitNoCache),
            );
        }
        for shape in ["4k", "64k", "bssplit"] {
            for phase in ["randwrite", "randread"] {
                m.set_some(
                    format!("{phase}_{shape}_qd16_vs_perblock"),
                    ratio(
                        iops(Target::Rask, shape, phase, 16),
                        iops(Target::PerBlock, shape, phase, 16),
                    ),
                );
            }
        }
        let mem = |t: Target, shape: &str| {
            r.map_bytes
                .get(&format!("{} / {shape}", t.name()))
                .map(|&b| b as f64)
        };
        let mem_ratio = |shape: &str| ratio(mem(Target::Rask, shape), mem(Target::PerBlock, shape));
        c.map_memory_4k_vs_perblock.set_some(mem_ratio("4k"));
        m.set_some("map_memory_64k_vs_perblock", mem_ratio("64k"));
        m.set_some("map_memory_bssplit_vs_perblock", mem_ratio("bssplit"));
        m.set_some("map_memory_trace_vs_perblock", mem_ratio("trace"));
        let worst = ["64k", "bssplit", "trace"]
            .iter()
            .filter_map(|s| mem_ratio(s))
            .fold(None, |a: Option<f64>, b| Some(a.map_or(b, |a| a.max(b))));
        c.map_memory_vs_perblock.set_some(worst);
        // The claim is judged on the larger pass where there is one: on
        // the fio volume the reclaimer's fixed slack is a tenth of it.
        match &r.space_large {
            Some(p) => {
                c.space_amp_gc.set(p.space_amp);
                m.set("write_amp_gc", p.write_amp);
                m.set_some("space_amp_gc_fio_volume", r.space_amp);
                m.set_some("write_amp_gc_fio_volume", r.write_amp);
            }
            None => {
                c.space_amp_gc.set_some(r.space_amp);
                m.set_some("write_amp_gc", r.write_amp);
            }
        }
        m.set_some("reopen_seconds_after_gc", r.recovery_seconds);
        if let Some(crash) = &r.crash {
            m.set("recovery_seconds", crash.recovery_seconds);
            m.set("recovery_map_entries", crash.map_entries as f64);
            c.recovery_check_problems
                .set(crash.check_problems.len() as f64);
        }
        m.set_some(
            "trace_replay_vs_nbdkit",
            ratio(
                r.trace_seconds.get(Target::Nbdkit.name()).copied(),
                r.trace_seconds.get(Target::Rask.name()).copied(),
            ),
        );
        m
    }

    fn render(&self, r: &Results, m: &Metrics, doc: &mut Report) -> Result<()> {
        doc.h1("ferrite volume over NBD");
        doc.text(
            "Each target is served on loopback and driven by `fio --ioengine=nbd`. The two ferrite volumes \
             (RASK map, per-block `BTreeMap` map) run in the benchmark process with O_DIRECT data logs; \
             `nbdkit file` runs on a preallocated file, with its defaults (page cache), with `cache=none`, \
             and with its defaults in a memory cgroup that caps its page cache (and its own memory) far below \
             the 80% of the volume that reads cover, so its reads reach the device as the volumes' do. \
             Every write phase flushes every 16 writes per job.",
        );
        let s = r.sizes;
        if let Some(s) = s {
            doc.text(format!(
                "Volume {} MiB, segments {} MiB, filled to 80% first; write and read phases {} s (QD 1 phases {} s); the capped nbdkit's cgroup limit {} MiB. bssplit from the CloudPhysics trace: `{}`.",
                s.volume_bytes >> 20,
                s.segment_bytes >> 20,
                s.phase_secs,
                s.qd1_secs,
                s.page_cache_cap >> 20,
                r.bssplit
            ));
        }
        let mut t = Table::new([
            "target",
            "shape",
            "phase",
            "QD x jobs",
            "IOPS",
            "MiB/s",
            "p50 µs",
            "p99 µs",
        ]);
        for x in &r.rows {
            t.row([
                x.target.clone(),
                x.shape.clone(),
                x.phase.clone(),
                format!("{} x {}", x.iodepth, x.jobs),
                format!("{:.0}", x.iops),
                format!("{:.1}", x.mib_s),
                format!("{:.0}", x.p50_us),
                format!("{:.0}", x.p99_us),
            ]);
        }
        doc.table(&t);
        let mut t = Table::new(["map / write phase", "map heap (KiB)", "entries"]);
        for (k, v) in &r.map_bytes {
            t.row([
                k.clone(),
                format!("{:.0}", *v as f64 / 1024.0),
                r.map_entries.get(k).map_or("-".into(), |e| e.to_string()),
            ]);
        }
        doc.table(&t);
        if !r.trace_seconds.is_empty() {
            let mut t = Table::new(["target", "CloudPhysics replay (s)"]);
            for (k, v) in &r.trace_seconds {
                t.row([k.clone(), format!("{v:.2}")]);
            }
            doc.text(format!(
                "Trace replay: {} requests (writes and reads, their sizes and offsets) as a fio iolog at QD 16.",
                r.trace_requests
            ));
            doc.table(&t);
        }
        doc.text(format!(
            "Reclamation: a RASK volume filled to 80% and overwritten with {:.1} GiB of random writes of the trace's sizes \
             (in process, 2 threads, a flush every 64 writes): space amplification {}, write amplification {}. \
             Reopen after a clean stop (map snapshot plus log, then the live-count walk) over {} map entries: {} s.",
            r.overwritten_bytes as f64 / (1u64 << 30) as f64,
            r.space_amp.map_or("-".into(), |v| format!("{v:.3}")),
            r.write_amp.map_or("-".into(), |v| format!("{v:.3}")),
            r.recovery_map_entries,
            r.recovery_seconds.map_or("-".into(), |v| format!("{v:.3}")),
        ));
        if let Some(p) = &r.space_large {
            doc.text(format!(
                "The same pass on a {} GiB volume ({:.1} GiB overwritten): space amplification {:.3}, write amplification {:.3}; \
                 reopen over {} map entries: {:.3} s.",
                p.volume_bytes >> 30,
                p.overwritten_bytes as f64 / (1u64 << 30) as f64,
                p.space_amp,
                p.write_amp,
                p.map_entries,
                p.reopen_seconds,
            ));
        }
        if let Some(c) = &r.crash {
            let map: u64 = c.map_files.values().sum();
            doc.text(format!(
                "Recovery after kill -9: a {:.2} GiB volume served by `ferrite volume serve` in its own process, written in full \
                 by fio (random offsets, the bssplit sizes, QD 16, a flush every 256 writes: {:.0} s, {:.0} MiB/s), then killed \
                 with SIGKILL {} s into overwrites from 2 jobs (QD 16, a flush every 16 writes per job). The map's files at the \
                 kill: {} MiB ({}). Reopen{}: {:.3} s, of which the map {:.3} s; {} map entries, {:.1} GiB live; \
                 `check` after it: {}.",
                c.volume_bytes as f64 / (1u64 << 30) as f64,
                c.fill_seconds,
                c.fill_mib_s,
                c.killed_after_secs,
                map >> 20,
                c.map_files
                    .iter()
                    .map(|(k, v)| format!("{k} {:.1} MiB", *v as f64 / (1u64 << 20) as f64))
                    .collect::<Vec<_>>()
                    .join(", "),
                if c.cold { " after a page-cache drop" } else { " (page cache not dropped)" },
                c.recovery_seconds,
                c.map_recovery_seconds,
                c.map_entries,
                c.live_bytes as f64 / (1u64 << 30) as f64,
                if c.check_problems.is_empty() {
                    "clean".to_string()
                } else {
                    c.check_problems.join("; ")
                },
            ));
        }
        for n in &r.notes {
            doc.text(format!("- {n}"));
        }
        doc.metrics(m);
        Ok(())
    }
}

/// Replays `trace` through fio (an iolog at QD 16) on a fresh, sparse
/// target of each kind in `targets`, timing each.
fn replay_trace(
    ctx: &ReproContext,
    trace: &[BlockRequest],
    targets: &[Target],
    s: &Sizes,
    r: &mut Results,
) -> Result<()> {
    let end = trace
        .iter()
        .map(|q| (q.start + q.blocks) * 4096)
        .max()
        .unwrap_or(0);
    let bytes = end.div_ceil(s.segment_bytes) * s.segment_bytes;
    let log: PathBuf = ctx.work_dir.join("volume-trace.iolog");
    let data = |e: std::io::Error| BenchError::Data {
        path: log.clone(),
        reason: e.to_string(),
    };
    let file = std::fs::File::create(&log).map_err(data)?;
    r.trace_requests = ferrite_trace::write_fio_iolog(file, "nbd", trace).map_err(data)?;
    for &t in targets {
        let dir = fresh_dir(&ctx.work_dir.join("volume-trace"))?;
        // Sparse: the trace's address space is far larger than what it writes.
        let served = serve(t, &dir, bytes, s, true, recording(ctx, t, "trace")?)?;
        let heap0 = baseline(&served);
        let started = Instant::now();
        fio(
            &served.uri,
            &[
                format!("--read_iolog={}", log.display()),
                "--filename=nbd".into(),
                "--iodepth=16".into(),
                "--replay_no_stall=1".into(),
            ],
        )?;
        if let Some(v) = served.volume() {
            v.flush().map_err(verr)?;
        }
        r.trace_seconds
            .insert(t.name().into(), started.elapsed().as_secs_f64());
        if let Some(v) = served.volume() {
            at_rest(v)?;
            let key = format!("{} / trace", t.name());
            if let (Some(h0), Some(h1)) = (heap0, heap()) {
                r.map_bytes.insert(key.clone(), h1.saturating_sub(h0));
            }
            r.map_entries.insert(key, v.stats().map_entries);
        }
        served.stop()?;
        let _ = std::fs::remove_dir_all(&dir);
    }
    let _ = std::fs::remove_file(&log);
    Ok(())
}

/// Overwrites a RASK volume of `bytes` at 80% full three times over with
/// random writes of the trace's sizes, then reopens it.
fn space_pass(
    ctx: &ReproContext,
    s: &Sizes,
    bytes: u64,
    trace: &[BlockRequest],
) -> Result<SpacePass> {
    let sizes: Vec<u64> = trace
        .iter()
        .filter(|q| q.op == BlockOp::Write)
        .map(|q| q.blocks.min(256))
        .collect();
    let sizes = if sizes.is_empty() {
        vec![1, 4, 16]
    } else {
        sizes
    };
    let dir = fresh_dir(&ctx.work_dir.join("volume-gc"))?;
    let vdir = dir.join("volume");
    let mut o = CreateOptions::new(bytes);
    o.segment_bytes = s.segment_bytes;
    ferrite_volume::create(&vdir, &o).map_err(verr)?;
    let v = Arc::new(Volume::open(&vdir, VolumeOptions::default()).map_err(verr)?);
    let fill_blocks = bytes / 4096 * 8 / 10;
    let chunk = vec![0x5au8; 1 << 20];
    let mut at = 0;
    while at < fill_blocks * 4096 {
        v.write(at, &chunk, false).map_err(verr)?;
        at += chunk.len() as u64;
    }
    v.flush().map_err(verr)?;
    let target = (bytes as f64 * s.overwrite_factor) as u64;
    let threads: Vec<_> = (0..2u64)
        .map(|t| {
            let (v, sizes) = (v.clone(), sizes.clone());
            std::thread::spawn(
                move || -> std::result::Result<u64, ferrite_volume::VolumeError> {
                    let mut rng = rand::rngs::SmallRng::seed_from_u64(t);
                    let mut written = 0u64;
                    let buf = vec![t as u8 + 1; 256 * 4096];
                    let mut i = 0u64;
                    while written < target / 2 {
                        let n = sizes[rng.gen_range(0..sizes.len())];
                        let b = rng.gen_range(0..fill_blocks - n);
                        v.write(b * 4096, &buf[..(n * 4096) as usize], false)?;
                        written += n * 4096;
                        i += 1;
                        if i.is_multiple_of(64) {
                            v.flush()?;
                        }
                    }
                    Ok(written)
                },
            )
        })
        .collect();
    let mut written = 0;
    for h in threads {
        written += h
            .join()
            .map_err(|_| BenchError::Config("an overwrite thread panicked".into()))?
            .map_err(verr)?;
    }
    v.flush().map_err(verr)?;
    // Let the reclaimer finish what it has started.
    v.reclaim_now().map_err(verr)?;
    let st = v.stats();
    let mut pass = SpacePass {
        volume_bytes: bytes,
        space_amp: st.space_amplification(),
        write_amp: st.write_amplification(),
        overwritten_bytes: written,
        map_entries: st.map_entries,
        reopen_seconds: 0.0,
    };
    drop(v);
    let started = Instant::now();
    let v = Volume::open(&vdir, VolumeOptions::default()).map_err(verr)?;
    pass.reopen_seconds = started.elapsed().as_secs_f64();
    v.close().map_err(verr)?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(pass)
}

/// `None` when the file system holding `dir` has `need` bytes free,
/// else what is missing, worded for a skip note ("needs 72 GiB free, …").
fn space_shortfall(dir: &Path, need: u64) -> Option<String> {
    match free_bytes(dir) {
        Some(free) if free >= need => None,
        free => Some(format!(
            "needs {} GiB free, {} has {}",
            need >> 30,
            dir.display(),
            free.map_or("an unknown amount".into(), |f| format!("{} GiB", f >> 30)),
        )),
    }
}

/// Bytes free to unprivileged users on the file system holding `dir`.
fn free_bytes(dir: &Path) -> Option<u64> {
    let out = Command::new("df")
        .args(["--output=avail", "-B1"])
        .arg(dir)
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)?
        .trim()
        .parse()
        .ok()
}

/// The map's files as they are on disk: name and bytes.
fn map_files(vdir: &Path) -> BTreeMap<String, u64> {
    let mut files = BTreeMap::new();
    if let Ok(dir) = std::fs::read_dir(vdir.join("map")) {
        for e in dir.flatten() {
            if let Ok(m) = e.metadata() {
                files.insert(e.file_name().to_string_lossy().into_owned(), m.len());
            }
        }
    }
    files
}

/// Writes every block of a volume served by its own `ferrite volume
/// serve` process (random offsets, the bssplit sizes, a flush every 256
/// writes), kills the server with SIGKILL while two fio jobs overwrite
/// it, then times the reopen (after a page-cache drop, where allowed) and
/// checks the map it recovered. Skipped, with a note, without the
/// `ferrite` binary or the disk space.
fn crash_recovery(ctx: &ReproContext, s: &Sizes, bssplit: &str, r: &mut Results) -> Result<()> {
    let bytes = s.crash_volume_bytes;
    if bytes == 0 {
        return Ok(());
    }
    let bin = match ferrite_binary("the recovery after kill -9") {
        Ok(b) => b,
        Err(e) => {
            r.notes.push(format!("no recovery after kill -9: {e}"));
            return Ok(());
        }
    };
    let dir = fresh_dir(&ctx.work_dir.join("volume-crash"))?;
    // The data log is sparse: it takes the bytes written, the volume's
    // size and what the overwrites add before the kill.
    let need = bytes + bytes / 8;
    if let Some(short) = space_shortfall(&dir, need) {
        r.notes.push(format!(
            "no recovery after kill -9: a {} GiB volume written in full {short}",
            bytes >> 30
        ));
        let _ = std::fs::remove_dir_all(&dir);
        return Ok(());
    }
    let vdir = dir.join("volume");
    let mut o = CreateOptions::new(bytes);
    o.segment_bytes = s.segment_bytes;
    o.preallocate = false;
    ferrite_volume::create(&vdir, &o).map_err(verr)?;
    let mut cmd = Command::new(&bin);
    cmd.args(["volume", "serve", "--path"])
        .arg(&vdir)
        .args(["--listen", "127.0.0.1:0"])
        .stderr(Stdio::null());
    let mut server = ferrite_process::Server::start(
        cmd,
        "ferrite volume serve",
        ferrite_process::Ready::FirstLine,
        Duration::from_secs(300),
    )
    .map_err(|e| BenchError::Config(e.to_string()))?;
    let killed = (|| -> Result<(f64, f64)> {
        let port = server.announced_addr().map(|a| a.port()).ok_or_else(|| {
            BenchError::Config(format!("no address in {:?}", server.first_line()))
        })?;
        let uri = format!("nbd://127.0.0.1:{port}/ferrite");
        progress!(
            ctx,
            "volume: writing {} MiB in full for the kill -9",
            bytes >> 20
        );
        let started = Instant::now();
        let (_, fill_mib_s, _, _) = fio(
            &uri,
            &[
                "--rw=randwrite".into(),
                format!("--bssplit={bssplit}"),
                format!("--size={bytes}"),
                "--iodepth=16".into(),
                "--fsync=256".into(),
                "--end_fsync=1".into(),
            ],
        )?;
        let fill_seconds = started.elapsed().as_secs_f64();
        let mut writer = Command::new("fio")
            .args([
                "--name=overwrite",
                "--ioengine=nbd",
                &format!("--uri={uri}"),
                "--rw=randwrite",
                &format!("--bssplit={bssplit}"),
                &format!("--size={bytes}"),
                "--iodepth=16",
                "--numjobs=2",
                "--fsync=16",
                "--time_based",
                "--runtime=3600",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| BenchError::Config(format!("fio: {e}")))?;
        std::thread::sleep(Duration::from_secs(s.crash_after_secs));
        server.kill();
        // fio fails on the lost connection; stop it if it has not.
        let _ = writer.kill();
        let _ = writer.wait();
        Ok((fill_seconds, fill_mib_s))
    })();
    server.kill();
    let (fill_seconds, fill_mib_s) = killed?;
    let files = map_files(&vdir);
    let cold = drop_caches();
    let started = Instant::now();
    let v = Volume::open(&vdir, VolumeOptions::default()).map_err(verr)?;
    let recovery_seconds = started.elapsed().as_secs_f64();
    let st = v.stats();
    let check = v.check().map_err(verr)?;
    v.close().map_err(verr)?;
    r.crash = Some(CrashRecovery {
        volume_bytes: bytes,
        fill_seconds,
        fill_mib_s,
        killed_after_secs: s.crash_after_secs,
        map_files: files,
        cold,
        recovery_seconds,
        map_recovery_seconds: st.map_recovery_seconds,
        map_entries: st.map_entries,
        live_bytes: st.live_blocks * 4096,
        check_problems: check.problems,
    });
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
