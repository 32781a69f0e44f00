//! `replication`: what replicas cost a `ferrite serve` master, how far
//! behind they run, and how long a full sync takes beside Redis's.
//!
//! Throughput: on btree and lsm (`--sync batched:1000`, in cache), two
//! masters side by side, one alone and one with two replicas attached
//! (each replica a `ferrite serve --replicaof` on the same engine), get
//! `redis-benchmark -t set -P 16 -c 50` in alternating rounds; the ratio
//! of the medians is the cost of replication. Two cores serve five
//! processes here, so the replicas' own work is in that cost.
//!
//! Lag, during the replicated rounds: every 10 ms the master's and each
//! replica's `master_repl_offset` (their difference in bytes), and every
//! 20 ms a probe key written on the master and read on a replica until it
//! shows (the time a write takes to become visible there).
//!
//! Full sync: a store of distinct 1 KiB values (4 MiB at smoke scale,
//! 1 GiB at default, 4 GiB at full) is loaded into a ferrite master (lsm) and, the same
//! keys and values, into redis-server (AOF everysec); then a replica of
//! each is started while `redis-benchmark` writes to the master, and the
//! time until the replica reports its link up with no sync in progress
//! is taken (Redis: RDB fork, transfer and load, with
//! `repl-diskless-sync-delay 0` so it does not wait 5 s for more
//! replicas, and its replica buffer limit set to ferrite's, since its
//! default drops a replica whose copy takes minutes under writes;
//! ferrite: snapshot stream and load).
//!
//! The master's CPU time per SET, alone and with replicas, separates
//! what replication costs the master from the cores its replicas take.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrite::{EngineKind, SyncMode};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::driver::{ferrite_binary, fresh_dir, have, Metrics, Report, Study, Table};
use super::resp::Resp;
use super::serve::{bench, need_redis_benchmark, start_ferrite_with, start_redis_with, Server};
use super::ReproContext;
use crate::error::{BenchError, Result};

pub struct ReplicationRepro;

const TARGET: &str = "replication target";

/// redis-server's master settings for the full sync: no 5 s wait for
/// more replicas before a diskless sync (the sync itself is measured),
/// and ferrite's replica buffer limit (256 MiB, no soft limit) in place
/// of Redis's 64 MB for 60 s, which drops a replica whose copy takes
/// minutes under writes, again and again.
const REDIS_SYNC_SETTINGS: [&str; 4] = [
    "--repl-diskless-sync-delay",
    "0",
    "--client-output-buffer-limit",
    "replica 256mb 0 0",
];

const ENGINES: [EngineKind; 2] = [EngineKind::Btree, EngineKind::Lsm];

/// Alternating rounds per engine.
const ROUNDS: usize = 3;

sizes! {
    struct Sizes {
        requests: u64 = (20_000, 1_000_000, 2_000_000),
        clients: u32 = (10, 50, 50),
        /// Bytes loaded before the full sync.
        sync_bytes: u64 = (4 << 20, 1 << 30, 4 << 30),
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Results {
    sizes: Option<Sizes>,
    /// SET P16 requests per second by engine and condition (`alone`,
    /// `two replicas`), one per round.
    rates: std::collections::BTreeMap<String, Vec<f64>>,
    /// The master's CPU microseconds per SET, by engine and condition,
    /// one per round (what replication costs the master itself, apart
    /// from the cores the replicas take).
    #[serde(default)]
    cpu_us: std::collections::BTreeMap<String, Vec<f64>>,
    /// Samples of master offset minus replica offset, bytes, by engine.
    lag_bytes: std::collections::BTreeMap<String, Vec<f64>>,
    /// Probe writes' time to show on a replica, ms, by engine.
    lag_ms: std::collections::BTreeMap<String, Vec<f64>>,
    /// Full syncs: by server, (seconds, bytes loaded).
    full_sync: std::collections::BTreeMap<String, (f64, u64)>,
    redis_version: String,
    notes: Vec<String>,
}

/// `INFO replication` through a [`Resp`] connection.
trait ReplicationInfo {
    fn info_field(&mut self, field: &str) -> Result<Option<String>>;
    fn offset(&mut self) -> Result<u64>;
}

impl ReplicationInfo for Resp {
    fn info_field(&mut self, field: &str) -> Result<Option<String>> {
        let text = self.call(&[b"INFO", b"replication"])?.unwrap_or_default();
        Ok(String::from_utf8_lossy(&text).lines().find_map(|l| {
            l.strip_prefix(field)
                .and_then(|r| r.strip_prefix(':'))
                .map(|v| v.trim().to_string())
        }))
    }

    fn offset(&mut self) -> Result<u64> {
        Ok(self
            .info_field("master_repl_offset")?
            .and_then(|v| v.parse().ok())
            .unwrap_or(0))
    }
}

fn io(e: std::io::Error) -> BenchError {
    BenchError::Config(format!("replication repro: {e}"))
}

/// The 1 KiB value of key `i` (distinct per key, the same for every
/// server).
fn value(i: u64) -> Vec<u8> {
    let mut v = format!("{i:016}").into_bytes();
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    while v.len() < 1024 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.push(b'a' + (x % 26) as u8);
    }
    v
}

/// Loads `bytes` of values under `sync:<i>`, pipelined 1000 at a time.
fn load(port: u16, bytes: u64) -> Result<u64> {
    let mut c = Resp::connect(port)?;
    let n = bytes / 1024;
    let mut i = 0;
    while i < n {
        let end = (i + 1000).min(n);
        let mut out = Vec::with_capacity(1100 * 1000);
        for k in i..end {
            Resp::encode(
                &mut out,
                &[b"SET", format!("sync:{k}").as_bytes(), &value(k)],
            );
        }
        c.w.write_all(&out).map_err(io)?;
        for _ in i..end {
            c.reply()?;
        }
        i = end;
    }
    Ok(n * 1024)
}

/// Starts a replica of `master` with `start` and times its full sync,
/// while `redis-benchmark` writes to the master.
fn time_full_sync(
    master: &Server,
    start: impl FnOnce() -> Result<Server>,
) -> Result<(f64, Server)> {
    let mut load = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &master.port.to_string()])
        .args(["-c", "1", "-n", "100000000", "-r", "100000", "-d", "100"])
        .args(["-t", "set", "-P", "1", "-q"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| BenchError::Config(format!("redis-benchmark: {e}")))?;
    let t0 = Instant::now();
    let replica = start()?;
    let mut c = Resp::connect(replica.port)?;
    let result = loop {
        let up = c.info_field("master_link_status")?.as_deref() == Some("up");
        let syncing = c.info_field("master_sync_in_progress")?.as_deref() == Some("1");
        if up && !syncing {
            break Ok(t0.elapsed().as_secs_f64());
        }
        if t0.elapsed() > Duration::from_secs(3600) {
            break Err(BenchError::Config("the full sync took over an hour".into()));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = load.kill();
    let _ = load.wait();
    Ok((result?, replica))
}

/// Samples offsets and probe latency against `master` and `replica`
/// until `stop`.
fn sample_lag(
    master: u16,
    replica: u16,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Result<(Vec<f64>, Vec<f64>)>> {
    std::thread::spawn(move || {
        let mut m = Resp::connect(master)?;
        let mut r = Resp::connect(replica)?;
        let (mut bytes, mut ms) = (Vec::new(), Vec::new());
        let mut n = 0u64;
        let mut next_probe = Instant::now();
        while !stop.load(Ordering::Acquire) {
            let mo = m.offset()?;
            let ro = r.offset()?;
            bytes.push(mo.saturating_sub(ro) as f64);
            if Instant::now() >= next_probe {
                n += 1;
                let (k, v) = (format!("probe:{n}"), n.to_string());
                m.call(&[b"SET", k.as_bytes(), v.as_bytes()])?;
                let t = Instant::now();
                loop {
                    if r.call(&[b"GET", k.as_bytes()])?.as_deref() == Some(v.as_bytes()) {
                        ms.push(t.elapsed().as_secs_f64() * 1000.0);
                        break;
                    }
                    if t.elapsed() > Duration::from_secs(30) || stop.load(Ordering::Acquire) {
                        break;
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
                next_probe = Instant::now() + Duration::from_millis(20);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok((bytes, ms))
    })
}

/// Waits until `replica` reports its link up.
fn linked(replica: u16) -> Result<()> {
    let mut c = Resp::connect(replica)?;
    let t = Instant::now();
    while c.info_field("master_link_status")?.as_deref() != Some("up") {
        if t.elapsed() > Duration::from_secs(60) {
            return Err(BenchError::Config("a replica did not link up".into()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

fn percentile(v: &[f64], p: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let i = ((v.len() - 1) as f64 * p).round() as usize;
    v.get(i).copied()
}

fn throughput(ctx_bin: &Path, root: &Path, s: Sizes, r: &mut Results) -> Result<()> {
    let sync = SyncMode::Batched(Duration::from_millis(1000));
    let cache_mb = 256;
    for engine in ENGINES {
        let e = engine.name();
        let dir = fresh_dir(&root.join(format!("{e}-alone")))?;
        let alone = start_ferrite_with(ctx_bin, &dir.join("store"), engine, sync, cache_mb, &[])?;
        let dir = fresh_dir(&root.join(format!("{e}-master")))?;
        let master = start_ferrite_with(ctx_bin, &dir.join("store"), engine, sync, cache_mb, &[])?;
        let port = master.port.to_string();
        let mut replicas = Vec::new();
        for i in 0..2 {
            let dir = fresh_dir(&root.join(format!("{e}-replica-{i}")))?;
            let extra = ["--replicaof", "127.0.0.1", port.as_str()];
            replicas.push(start_ferrite_with(
                ctx_bin,
                &dir.join("store"),
                engine,
                sync,
                cache_mb,
                &extra,
            )?);
        }
        for rep in &replicas {
            linked(rep.port)?;
        }
        let per_set = |before: Option<f64>, after: Option<f64>| {
            before
                .zip(after)
                .map(|(b, a)| (a - b) * 1e6 / s.requests as f64)
        };
        for _ in 0..ROUNDS {
            let cpu0 = alone.cpu_seconds();
            let (rps, _, _) = bench(
                alone.port, "set", 16, s.clients, s.requests, s.requests, 100,
            )?;
            r.rates.entry(format!("{e} alone")).or_default().push(rps);
            if let Some(us) = per_set(cpu0, alone.cpu_seconds()) {
                r.cpu_us.entry(format!("{e} alone")).or_default().push(us);
            }
            let stop = Arc::new(AtomicBool::new(false));
            let sampler = sample_lag(master.port, replicas[0].port, stop.clone());
            let cpu0 = master.cpu_seconds();
            let (rps, _, _) = bench(
                master.port,
                "set",
                16,
                s.clients,
                s.requests,
                s.requests,
                100,
            )?;
            let cpu1 = master.cpu_seconds();
            stop.store(true, Ordering::Release);
            let (bytes, ms) = sampler
                .join()
                .map_err(|_| BenchError::Config("the lag sampler panicked".into()))??;
            r.rates
                .entry(format!("{e} two replicas"))
                .or_default()
                .push(rps);
            if let Some(us) = per_set(cpu0, cpu1) {
                r.cpu_us
                    .entry(format!("{e} two replicas"))
                    .or_default()
                    .push(us);
            }
            r.lag_bytes.entry(e.to_string()).or_default().extend(bytes);
            r.lag_ms.entry(e.to_string()).or_default().extend(ms);
        }
        for rep in replicas {
            rep.stop()?;
        }
        master.stop()?;
        alone.stop()?;
    }
    Ok(())
}

fn full_syncs(bin: &Path, root: &Path, s: Sizes, r: &mut Results) -> Result<()> {
    let sync = SyncMode::Batched(Duration::from_millis(1000));
    let dir = fresh_dir(&root.join("sync-ferrite"))?;
    let master = start_ferrite_with(bin, &dir.join("store"), EngineKind::Lsm, sync, 256, &[])?;
    let loaded = load(master.port, s.sync_bytes)?;
    let port = master.port.to_string();
    let rdir = fresh_dir(&root.join("sync-ferrite-replica"))?;
    let (secs, replica) = time_full_sync(&master, || {
        let extra = ["--replicaof", "127.0.0.1", port.as_str()];
        start_ferrite_with(bin, &rdir.join("store"), EngineKind::Lsm, sync, 256, &extra)
    })?;
    r.full_sync.insert("ferrite lsm".into(), (secs, loaded));
    replica.stop()?;
    master.stop()?;
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&rdir);
    if have("redis-server") {
        let dir = fresh_dir(&root.join("sync-redis"))?;
        let master = start_redis_with(&dir, Some("everysec"), &REDIS_SYNC_SETTINGS)?;
        let loaded = load(master.port, s.sync_bytes)?;
        let port = master.port.to_string();
        let rdir = fresh_dir(&root.join("sync-redis-replica"))?;
        let (secs, replica) = time_full_sync(&master, || {
            start_redis_with(
                &rdir,
                Some("everysec"),
                &["--replicaof", "127.0.0.1", port.as_str()],
            )
        })?;
        r.full_sync
            .insert("redis aof everysec".into(), (secs, loaded));
        drop(replica);
        drop(master);
        if let Ok(out) = Command::new("redis-server").arg("--version").output() {
            r.redis_version = String::from_utf8_lossy(&out.stdout).trim().to_string();
        }
    } else {
        r.notes
            .push("redis-server is not installed: no Redis full sync".into());
    }
    Ok(())
}

claims! {
    struct Claims {
        set_with_two_replicas_vs_alone_p16 >= 0.8, TARGET;
    }
}

impl Study for ReplicationRepro {
    type Results = Results;
    type Claims = Claims;
    const NAME: &'static str = "replication";
    const SUMMARY: &'static str =
        "ferrite serve masters with two replicas against alone, replication lag, full sync beside redis-server's";
    type Sizes = Sizes;

    fn measure(&self, ctx: &ReproContext, s: Sizes) -> Result<Results> {
        need_redis_benchmark()?;
        let bin = ferrite_binary("ferrite serve")?;
        let root = fresh_dir(&ctx.work_dir.join("replication"))?;
        let mut r = Results {
            sizes: Some(s),
            ..Results::default()
        };
        throughput(&bin, &root, s, &mut r)?;
        full_syncs(&bin, &root, s, &mut r)?;
        let _ = std::fs::remove_dir_all(&root);
        Ok(r)
    }

    fn params(&self, r: &Results) -> serde_json::Value {
        json!({
            "rounds": ROUNDS,
            "redis_version": r.redis_version,
            "servers": "separate processes on loopback, --sync batched:1000, 256 MiB cache; redis-benchmark -t set -P 16 -d 100",
        })
    }

    fn metrics(&self, r: &Results, c: &mut Claims) -> Metrics {
        let mut m = Metrics::new();
        let med = |k: &str| r.rates.get(k).and_then(|v| percentile(v, 0.5));
        for engine in ENGINES {
            let e = engine.name();
            let ratio = med(&format!("{e} two replicas"))
                .zip(med(&format!("{e} alone")))
                .map(|(a, b)| a / b);
            m.set_some(format!("{e}_set_with_two_replicas_vs_alone_p16"), ratio);
            let cpu = |k: &str| r.cpu_us.get(k).and_then(|v| percentile(v, 0.5));
            m.set_some(
                format!("{e}_master_cpu_per_set_replicated_vs_alone"),
                cpu(&format!("{e} two replicas"))
                    .zip(cpu(&format!("{e} alone")))
                    .map(|(a, b)| a / b),
            );
            m.lowest(&mut c.set_with_two_replicas_vs_alone_p16, e, ratio);
            if let Some(v) = r.lag_bytes.get(e) {
                m.set_some(format!("{e}_lag_bytes_p50"), percentile(v, 0.5));
                m.set_some(format!("{e}_lag_bytes_p99"), percentile(v, 0.99));
            }
            if let Some(v) = r.lag_ms.get(e) {
                m.set_some(format!("{e}_lag_ms_p50"), percentile(v, 0.5));
                m.set_some(format!("{e}_lag_ms_p99"), percentile(v, 0.99));
            }
        }
        for (server, (secs, bytes)) in &r.full_sync {
            let k = server.replace(' ', "_");
            m.set(format!("{k}_full_sync_s"), *secs);
            m.set(
                format!("{k}_full_sync_mb_s"),
                *bytes as f64 / (1 << 20) as f64 / secs,
            );
        }
        m
    }

    fn render(&self, r: &Results, m: &Metrics, doc: &mut Report) -> Result<()> {
        let _ = m;
        doc.h1("Replication: what replicas cost, how far behind they run, full sync");
        let s = r.sizes;
        doc.text(format!(
            "Servers are separate processes on loopback (2 cores for all of them), `--sync batched:1000`, \
             256 MiB cache. Throughput: `redis-benchmark -t set -P 16 -c {} -n {} -r {} -d 100` against a \
             master alone and a master with two replicas, {ROUNDS} alternating rounds. Redis: {}.",
            s.map_or(0, |s| s.clients),
            s.map_or(0, |s| s.requests),
            s.map_or(0, |s| s.requests),
            if r.redis_version.is_empty() { "not run" } else { &r.redis_version },
        ));
        let mut t = Table::new([
            "engine / condition",
            "SET P16 kops/s per round",
            "median",
            "master CPU µs per SET, per round",
            "median",
        ]);
        let list = |v: &[f64], f: &dyn Fn(f64) -> String| {
            v.iter().map(|x| f(*x)).collect::<Vec<_>>().join(", ")
        };
        for (k, v) in &r.rates {
            let cpu = r.cpu_us.get(k).cloned().unwrap_or_default();
            t.row([
                k.clone(),
                list(v, &|x| format!("{:.1}", x / 1000.0)),
                percentile(v, 0.5).map_or("-".into(), |x| format!("{:.1}", x / 1000.0)),
                list(&cpu, &|x| format!("{x:.2}")),
                percentile(&cpu, 0.5).map_or("-".into(), |x| format!("{x:.2}")),
            ]);
        }
        doc.table(&t);
        let mut t = Table::new([
            "engine",
            "lag bytes P50",
            "lag bytes P99",
            "probe ms P50",
            "probe ms P99",
            "samples",
        ]);
        for engine in ENGINES {
            let e = engine.name();
            let b = r.lag_bytes.get(e).cloned().unwrap_or_default();
            let ms = r.lag_ms.get(e).cloned().unwrap_or_default();
            let f = |v: Option<f64>, d: usize| v.map_or("-".into(), |x| format!("{x:.d$}"));
            t.row([
                e.to_string(),
                f(percentile(&b, 0.5), 0),
                f(percentile(&b, 0.99), 0),
                f(percentile(&ms, 0.5), 2),
                f(percentile(&ms, 0.99), 2),
                format!("{} / {}", b.len(), ms.len()),
            ]);
        }
        doc.table(&t);
        doc.text(
            "Full sync: distinct 1 KiB values loaded into the master, then a replica started while \
             `redis-benchmark -t set -P 1 -c 1` writes to the master; the time until the replica's \
             link is up with no sync in progress.",
        );
        let mut t = Table::new(["master", "data MiB", "full sync s", "MiB/s"]);
        for (k, (secs, bytes)) in &r.full_sync {
            let mb = *bytes as f64 / (1 << 20) as f64;
            t.row([
                k.clone(),
                format!("{mb:.0}"),
                format!("{secs:.1}"),
                format!("{:.1}", mb / secs),
            ]);
        }
        doc.table(&t);
        for n in &r.notes {
            doc.text(n);
        }
        Ok(())
    }
}
