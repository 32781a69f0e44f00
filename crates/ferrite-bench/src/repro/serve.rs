//! `serve`: ferrite behind the Redis protocol against `redis-server`,
//! driven by `redis-benchmark`, side by side in one run.
//!
//! Servers: `redis-server` in memory with persistence off (the ceiling),
//! with `appendonly yes` and `appendfsync everysec` (the durable peer) and
//! `appendfsync always`; `ferrite serve` over `btree`, `lsm` and `zkv`
//! (on its emulated zoned device over a file), each with `--sync
//! batched:1000` and `--sync always`. Each server gets
//! `redis-benchmark -c 50 -r <keyspace> -d 100` for SET then GET, at
//! `-P 16` and `-P 1`; with `--sync always`, also SET from one client
//! (what one fsync per write gives, against 50 clients sharing syncs). The
//! store then closes and the same data is read in process, one thread,
//! uniform random keys (the engine's YCSB-C rate): the server's share of
//! that is what the protocol costs. A second pass runs ferrite with a
//! cache of a tenth of the data.
//!
//! Collections and scripts (redis-server with AOF everysec, ferrite btree
//! and lsm with `--sync batched:1000`, in cache): `-t
//! lpush,rpush,lpop,rpop` at `-P 16` and `EVALSHA` of a 10-command
//! script (five `INCR`s and five `GET`s of a random counter, keys apart
//! from SET's) without pipelining, after each server's SET and GET runs;
//! `-t hset,sadd,spop,zadd,zpopmin` and the list tests again at `-P 16`
//! in three rounds, each server on a fresh store and the servers
//! alternating, compared by medians (one run of these moved by a factor
//! of three between runs); the list claims take these medians.
//!
//! Compatibility: Valkey's own test suite (`valkey_suite`, its 16 core
//! files; at smoke scale one) against redis-server with AOF everysec and
//! against ferrite on each engine, each on a fresh store: the passed
//! counts side by side, overall and per file.
//!
//! Expiry (`expiry`): on each engine, keys with TTLs of 1–10 s that no
//! one reads again: how long after the last deadline `DBSIZE` is 0, and
//! how much of its peak size the store still takes 20 s after it (at
//! smoke scale 0.1–1 s and 5 s, so CI does not wait).
//!
//! On the B+tree in cache, ten thousand idle clients are then connected
//! (over the server's Unix socket, so the client machine's ephemeral
//! ports are not what is measured) and SET and GET at `-P 16` are timed
//! again, alternating with runs without them: what idle clients cost the
//! active ones, and the server's memory per idle client.
//!
//! The servers are separate processes: `ferrite serve` from the `ferrite`
//! binary beside this one (or `$FERRITE_BIN`), Redis's from Debian
//! (`scripts/install-redis-tools.sh`).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ferrite::{Config, EngineKind, SyncMode};
use ferrite_process::Ready;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::driver::{
    ferrite_binary, fresh_dir, have, need, store_err, Metrics, Report, Study, Table,
};
use super::expiry::{self, ExpiryRun};
use super::valkey_suite::{self, FileCount};
use super::{ReproContext, Scale};
use crate::error::{BenchError, Result};

pub struct ServeRepro;

const TARGET: &str = "server I/O target (issue: event loops and grouped writes)";

const LISTS: &str = "lists and scripts target (issue: lists, blocking pops, Lua)";

const TYPES: &str = "type layer target (issue: the Redis data model)";

/// The type-layer writes of `redis-benchmark`, at `-P 16`.
const TYPE_TESTS: [&str; 5] = ["hset", "sadd", "spop", "zadd", "zpopmin"];

/// The list writes of `redis-benchmark`, at `-P 16` (each pop after the
/// pushes that filled its list), in the rounds after [`TYPE_TESTS`].
const LIST_TESTS: [&str; 4] = ["lpush", "rpush", "lpop", "rpop"];

const ENGINES: [EngineKind; 3] = [EngineKind::Btree, EngineKind::Lsm, EngineKind::Zkv];

/// The engines the write claims are judged on (ZKV's rows are reported
/// beside them).
const WRITE_CLAIM_ENGINES: [EngineKind; 2] = [EngineKind::Btree, EngineKind::Lsm];

/// The script `EVALSHA` runs in the list-and-script pass: ten commands.
const TEN_COMMANDS: &str =
    "for i = 1, 5 do redis.call('incr', KEYS[1]) redis.call('get', KEYS[1]) end return 1";

/// Longest a server may take to start (and recover) before it serves.
const START_WAIT: Duration = Duration::from_secs(300);

/// Idle clients held open in the idle pass.
const IDLE_CLIENTS: usize = 10_000;

/// Runs with and without the idle clients, alternating; medians compared.
const IDLE_ROUNDS: usize = 3;

/// Rounds of the type tests, the servers alternating; medians compared.
const TYPE_ROUNDS: usize = 3;

sizes! {
    struct Sizes {
        /// Requests per pipelined run, and the keyspace (`-r`).
        requests: u64 = (5_000, 1_000_000, 1_000_000),
        /// Requests per unpipelined run.
        requests_p1: u64 = (2_000, 200_000, 1_000_000),
        /// Requests per unpipelined run with a sync per write.
        requests_always_p1: u64 = (1_000, 20_000, 200_000),
        /// Requests from one client with a sync per write.
        requests_one_client: u64 = (200, 2_000, 10_000),
        clients: u32 = (10, 50, 50),
        value_bytes: u32 = (100, 100, 100),
        /// Reads of the in-process pass.
        inprocess_reads: u64 = (5_000, 500_000, 2_000_000),
        /// Keys of the expiry pass.
        #[serde(default)]
        expiry_keys: u64 = (20_000, 1_000_000, 1_000_000),
        /// The expiry pass's longest TTL in ms; the shortest is a tenth of
        /// it. At smoke scale the pass only has to run, not wait.
        #[serde(default = "expiry::default_max_ttl_ms")]
        expiry_max_ttl_ms: u64 = (1_000, 10_000, 10_000),
        /// How long the expiry pass watches after the last deadline, s.
        #[serde(default = "expiry::default_window_s")]
        expiry_window_s: u64 = (5, 20, 20),
    }
}

/// One `redis-benchmark` run.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Row {
    server: String,
    /// `in cache` or `cache 10%`.
    cache: String,
    test: String,
    pipeline: u32,
    clients: u32,
    requests: u64,
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Results {
    sizes: Option<Sizes>,
    rows: Vec<Row>,
    /// Server resident memory after the first SET run, by server and cache.
    rss_bytes: BTreeMap<String, u64>,
    /// In-process uniform reads per second, one thread, by engine and cache.
    inprocess_gets: BTreeMap<String, f64>,
    /// Stores' sizes on disk after the runs.
    disk_bytes: BTreeMap<String, u64>,
    /// The idle pass: requests per second of the active clients by test
    /// (`SET`, `GET`) and condition (`alone`, `idle`), one per round.
    idle_rates: BTreeMap<String, Vec<f64>>,
    /// The type tests: requests per second by server and test (`ferrite
    /// btree batched:1000 HSET`), one per round.
    #[serde(default)]
    type_rates: BTreeMap<String, Vec<f64>>,
    /// Idle clients the idle pass held, and the server's resident memory
    /// without and with them.
    idle_clients: usize,
    idle_rss: Option<(u64, u64)>,
    redis_version: String,
    /// Valkey's suite: by server, the counts of each file.
    #[serde(default)]
    compat: BTreeMap<String, BTreeMap<String, FileCount>>,
    /// The expiry pass, by engine.
    #[serde(default)]
    expiry: BTreeMap<String, ExpiryRun>,
    notes: Vec<String>,
}

/// A server process, killed when dropped.
pub(super) struct Server {
    proc: ferrite_process::Server,
    pub(super) port: u16,
    pub(super) name: String,
}

impl Server {
    pub(super) fn rss_bytes(&self) -> Option<u64> {
        self.proc.rss_bytes()
    }

    /// CPU seconds (user and system) the process has used.
    pub(super) fn cpu_seconds(&self) -> Option<f64> {
        self.proc.cpu_seconds()
    }

    /// Stops it with SIGTERM (ferrite closes its store) and waits.
    pub(super) fn stop(self) -> Result<()> {
        self.proc
            .stop(Duration::from_secs(300))
            .map_err(process_err)
    }
}

fn process_err(e: ferrite_process::ProcessError) -> BenchError {
    BenchError::Config(e.to_string())
}

/// Fails with how to install it unless `redis-benchmark` is here.
pub(super) fn need_redis_benchmark() -> Result<()> {
    need("redis-benchmark", "scripts/install-redis-tools.sh").map(drop)
}

fn start_redis(dir: &Path, aof: Option<&str>) -> Result<Server> {
    start_redis_with(dir, aof, &[])
}

/// [`start_redis`] with more arguments (`--replicaof host port`).
pub(super) fn start_redis_with(dir: &Path, aof: Option<&str>, extra: &[&str]) -> Result<Server> {
    let port = ferrite_process::free_port().map_err(process_err)?;
    let mut cmd = ferrite_process::redis_server(port, dir);
    match aof {
        Some(fsync) => cmd.args(["--appendonly", "yes", "--appendfsync", fsync]),
        None => cmd.args(["--appendonly", "no"]),
    };
    cmd.args(extra).stdout(Stdio::null()).stderr(Stdio::null());
    let name = match aof {
        Some(f) => format!("redis aof {f}"),
        None => "redis in memory".into(),
    };
    let proc = ferrite_process::Server::start(cmd, &name, Ready::Port(port), START_WAIT)
        .map_err(process_err)?;
    Ok(Server { proc, port, name })
}

fn start_ferrite(
    bin: &Path,
    dir: &Path,
    engine: EngineKind,
    sync: SyncMode,
    cache_mb: u64,
) -> Result<Server> {
    start_ferrite_with(bin, dir, engine, sync, cache_mb, &[])
}

/// [`start_ferrite`] with more arguments (`--replicaof host port`). It
/// listens on a port of its choosing, which its first line names; its
/// stderr goes to `DIR.log`.
pub(super) fn start_ferrite_with(
    bin: &Path,
    dir: &Path,
    engine: EngineKind,
    sync: SyncMode,
    cache_mb: u64,
    extra: &[&str],
) -> Result<Server> {
    let log = dir.with_extension("log");
    let stderr = std::fs::File::create(&log)
        .map_err(|e| BenchError::Config(format!("{}: {e}", log.display())))?;
    let mut cmd = Command::new(bin);
    cmd.args(["serve", "--engine", engine.name(), "--path"])
        .arg(dir)
        .arg("--unix")
        .arg(unix_socket(dir))
        .args(["--max-clients", &(IDLE_CLIENTS + 100).to_string()])
        .args(["--listen", "127.0.0.1:0", "--sync", &sync.to_string()])
        .args(["--cache-mb", &cache_mb.to_string()])
        .args(extra)
        .stderr(stderr);
    let name = format!("ferrite {engine} {sync}");
    let proc = ferrite_process::Server::start(cmd, &name, Ready::FirstLine, START_WAIT)
        .map_err(|e| BenchError::Config(format!("{e} (see {})", log.display())))?;
    let Some(addr) = proc.announced_addr() else {
        return Err(BenchError::Config(format!(
            "{name} printed no address: {:?}",
            proc.first_line()
        )));
    };
    Ok(Server {
        port: addr.port(),
        proc,
        name,
    })
}

fn unix_socket(dir: &Path) -> std::path::PathBuf {
    dir.with_extension("sock")
}

/// Raises this process's open-file limit to its hard limit; returns it.
fn raise_open_files() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read or write the struct given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 0;
        }
        lim.rlim_cur = lim.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
            return 0;
        }
    }
    lim.rlim_cur
}

/// Opens `n` clients on `socket`, each answered once (so each is
/// admitted), and keeps them open.
fn idle_clients(socket: &Path, n: usize) -> Result<Vec<std::os::unix::net::UnixStream>> {
    use std::io::Write;
    let io = |e: std::io::Error| {
        BenchError::Config(format!("idle clients on {}: {e}", socket.display()))
    };
    let mut all = Vec::with_capacity(n);
    for _ in 0..n {
        all.push(std::os::unix::net::UnixStream::connect(socket).map_err(io)?);
    }
    for c in &mut all {
        c.write_all(b"PING\r\n").map_err(io)?;
    }
    for c in &mut all {
        let mut pong = [0u8; 7];
        c.read_exact(&mut pong).map_err(io)?;
        if &pong != b"+PONG\r\n" {
            return Err(BenchError::Config(format!(
                "an idle client was answered {:?}",
                String::from_utf8_lossy(&pong)
            )));
        }
    }
    Ok(all)
}

/// Runs `redis-benchmark -t test` and reads its CSV line.
pub(super) fn bench(
    port: u16,
    test: &str,
    pipeline: u32,
    clients: u32,
    requests: u64,
    keyspace: u64,
    value: u32,
) -> Result<(f64, f64, f64)> {
    let (value, pipeline) = (value.to_string(), pipeline.to_string());
    let args = ["-d", &value, "-P", &pipeline, "-t", test];
    bench_command(port, clients, requests, keyspace, &args)
}

/// Runs `redis-benchmark` with `args` (its own tests, or one command of
/// its own with `__rand_int__` for a key) and reads its CSV line: requests
/// per second, P50 and P99 in milliseconds.
fn bench_command(
    port: u16,
    clients: u32,
    requests: u64,
    keyspace: u64,
    args: &[&str],
) -> Result<(f64, f64, f64)> {
    let out = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-c", &clients.to_string(), "-n", &requests.to_string()])
        .args(["-r", &keyspace.to_string(), "--csv"])
        .args(args)
        .output()
        .map_err(|e| BenchError::Config(format!("redis-benchmark: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    csv_result(&text).ok_or_else(|| {
        BenchError::Config(format!(
            "redis-benchmark {} on port {port} gave no result: {text} {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ))
    })
}

/// The first result line of `redis-benchmark --csv`:
/// `"<test or command>","rps","avg","min","p50","p95","p99","max"`.
fn csv_result(text: &str) -> Option<(f64, f64, f64)> {
    text.lines()
        .filter(|l| !l.starts_with("\"test\""))
        .find_map(|l| {
            // A command may hold commas; the cells are quoted.
            let cells: Vec<f64> = l
                .split("\",\"")
                .skip(1)
                .map(|c| c.trim_matches('"').parse().unwrap_or(f64::NAN))
                .collect();
            match cells.as_slice() {
                [rps, _avg, _min, p50, _p95, p99, ..] if rps.is_finite() => {
                    Some((*rps, *p50, *p99))
                }
                _ => None,
            }
        })
}

/// Loads `script` into the server on `port`; its SHA-1.
fn script_load(port: u16, script: &str) -> Result<String> {
    let out = Command::new("redis-cli")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "script",
            "load",
            script,
        ])
        .output()
        .map_err(|e| BenchError::Config(format!("redis-cli: {e}")))?;
    let sha = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if sha.len() != 40 {
        return Err(BenchError::Config(format!(
            "SCRIPT LOAD on port {port} answered {sha:?} {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(sha)
}

/// The keys `redis-benchmark -r` writes: `key:` and twelve digits.
fn bench_key(i: u64) -> Vec<u8> {
    format!("key:{i:012}").into_bytes()
}

/// Uniform random reads of the benchmark's keys, one thread, in process.
fn inprocess_gets(
    dir: &Path,
    engine: EngineKind,
    cache_mb: u64,
    keyspace: u64,
    reads: u64,
) -> Result<f64> {
    let err = store_err(engine.name());
    let store = Config::builder(engine)
        .cache_bytes(cache_mb << 20)
        .sync(SyncMode::Never)
        .create_if_missing(false)
        .open(dir)
        .map_err(&err)?;
    // The server keeps keys in database 0 behind a one-byte prefix.
    let stored = |i: u64| [&[0u8][..], &bench_key(i)].concat();
    // Warm as the server was after its load: every pair read once, then
    // random reads, so the rate is the in-cache one the claim compares.
    for pair in store.iter() {
        pair.map_err(&err)?;
    }
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    for _ in 0..reads / 10 {
        store
            .get(stored(rng.gen_range(0..keyspace)))
            .map_err(&err)?;
    }
    let t = Instant::now();
    let mut found = 0u64;
    for _ in 0..reads {
        found += store
            .get(stored(rng.gen_range(0..keyspace)))
            .map_err(&err)?
            .is_some() as u64;
    }
    let rate = reads as f64 / t.elapsed().as_secs_f64();
    if found == 0 {
        return Err(BenchError::Config(format!(
            "{engine}: the in-process pass found no key the server wrote"
        )));
    }
    store.close().map_err(err)?;
    Ok(rate)
}

struct Plan<'a> {
    s: Sizes,
    results: &'a mut Results,
}

impl Plan<'_> {
    fn row(
        &mut self,
        server: &Server,
        cache: &str,
        test: &str,
        pipeline: u32,
        clients: u32,
        requests: u64,
    ) -> Result<()> {
        let (rps, p50, p99) = bench(
            server.port,
            test,
            pipeline,
            clients,
            requests,
            self.s.requests,
            self.s.value_bytes,
        )?;
        self.results.rows.push(Row {
            server: server.name.clone(),
            cache: cache.into(),
            test: test.to_uppercase(),
            pipeline,
            clients,
            requests,
            rps,
            p50_ms: p50,
            p99_ms: p99,
        });
        Ok(())
    }

    /// SET then GET at P16, then at P1; with syncs per write, SET from one
    /// client too.
    fn server_runs(&mut self, server: &Server, cache: &str, always: bool) -> Result<()> {
        let s = self.s;
        self.row(server, cache, "set", 16, s.clients, s.requests)?;
        if let Some(rss) = server.rss_bytes() {
            self.results
                .rss_bytes
                .insert(format!("{} ({cache})", server.name), rss);
        }
        self.row(server, cache, "get", 16, s.clients, s.requests)?;
        let p1 = if always {
            s.requests_always_p1
        } else {
            s.requests_p1
        };
        self.row(server, cache, "set", 1, s.clients, p1)?;
        self.row(server, cache, "get", 1, s.clients, s.requests_p1)?;
        if always {
            self.row(server, cache, "set", 1, 1, s.requests_one_client)?;
        }
        Ok(())
    }
}

impl Plan<'_> {
    /// Pushes and pops at `-P 16`, then `EVALSHA` of [`TEN_COMMANDS`].
    fn collection_runs(&mut self, server: &Server) -> Result<()> {
        let s = self.s;
        for test in ["lpush", "rpush", "lpop", "rpop"] {
            self.row(server, "in cache", test, 16, s.clients, s.requests)?;
        }
        let sha = script_load(server.port, TEN_COMMANDS)?;
        let requests = s.requests_p1;
        let (rps, p50_ms, p99_ms) = bench_command(
            server.port,
            s.clients,
            requests,
            s.requests,
            &["EVALSHA", &sha, "1", "counter:__rand_int__"],
        )?;
        self.results.rows.push(Row {
            server: server.name.clone(),
            cache: "in cache".into(),
            test: "EVALSHA10".into(),
            pipeline: 1,
            clients: s.clients,
            requests,
            rps,
            p50_ms,
            p99_ms,
        });
        Ok(())
    }

    /// Requests per second of `test` at `-P 16` from the usual clients
    /// over the usual keyspace.
    fn p16_rate(&self, port: u16, test: &str) -> Result<f64> {
        let s = self.s;
        let (rps, _, _) = bench(
            port,
            test,
            16,
            s.clients,
            s.requests,
            s.requests,
            s.value_bytes,
        )?;
        Ok(rps)
    }

    /// The [`TYPE_TESTS`] and [`LIST_TESTS`] at `-P 16` in [`TYPE_ROUNDS`] rounds, each
    /// server on a fresh store and the servers alternating within a
    /// round: redis-server with AOF everysec, then ferrite on each
    /// engine the write claims judge (`--sync batched:1000`, in cache).
    fn type_rounds(&mut self, bin: &Path, root: &Path, cache_mb: u64) -> Result<()> {
        for _ in 0..TYPE_ROUNDS {
            // `None`: redis-server.
            let servers = std::iter::once(None).chain(WRITE_CLAIM_ENGINES.map(Some));
            for engine in servers {
                let dir = fresh_dir(&root.join("types"))?;
                let server = match engine {
                    None => start_redis(&dir, Some("everysec"))?,
                    Some(engine) => {
                        let sync = SyncMode::Batched(Duration::from_millis(1000));
                        start_ferrite(bin, &dir.join("store"), engine, sync, cache_mb)?
                    }
                };
                for test in TYPE_TESTS.iter().chain(&LIST_TESTS) {
                    let rps = self.p16_rate(server.port, test)?;
                    self.results
                        .type_rates
                        .entry(format!("{} {}", server.name, test.to_uppercase()))
                        .or_default()
                        .push(rps);
                }
                server.stop()?;
            }
        }
        Ok(())
    }

    /// Valkey's suite against `server`, recorded under its name.
    fn compat_run(&mut self, server: &Server, runner: &Path, files: &[&str]) -> Result<()> {
        let counts = valkey_suite::run(runner, server.port, files)?;
        self.results.compat.insert(server.name.clone(), counts);
        Ok(())
    }

    /// SET and GET at `-P 16` from the usual clients, alternately alone
    /// and beside [`IDLE_CLIENTS`] idle ones.
    fn idle_pass(&mut self, server: &Server, socket: &Path) -> Result<()> {
        let limit = raise_open_files();
        if limit < IDLE_CLIENTS as u64 + 64 {
            self.results.notes.push(format!(
                "the idle pass did not run: the open-file limit ({limit}) cannot hold {IDLE_CLIENTS} clients"
            ));
            return Ok(());
        }
        for _ in 0..IDLE_ROUNDS {
            for idle in [false, true] {
                let rss_before = server.rss_bytes();
                let held = if idle {
                    idle_clients(socket, IDLE_CLIENTS)?
                } else {
                    Vec::new()
                };
                // The first round only: later ones reuse the memory the
                // allocator kept from the first.
                if idle && self.results.idle_rss.is_none() {
                    self.results.idle_rss = rss_before.zip(server.rss_bytes());
                }
                for test in ["set", "get"] {
                    let rps = self.p16_rate(server.port, test)?;
                    let cond = if idle { "idle" } else { "alone" };
                    self.results
                        .idle_rates
                        .entry(format!("{} {cond}", test.to_uppercase()))
                        .or_default()
                        .push(rps);
                }
                drop(held);
            }
        }
        self.results.idle_clients = IDLE_CLIENTS;
        Ok(())
    }
}

/// Rates by label, one per round: each round's and the median, kops/s.
fn rounds_table(label: &str, rates: &BTreeMap<String, Vec<f64>>) -> Table {
    let mut t = Table::new([label, "runs (kops/s)", "median kops/s"]);
    for (k, v) in rates {
        t.row([
            k.clone(),
            v.iter()
                .map(|x| format!("{:.1}", x / 1000.0))
                .collect::<Vec<_>>()
                .join(", "),
            format!("{:.1}", median(v).unwrap_or(0.0) / 1000.0),
        ]);
    }
    t
}

fn median(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

fn rate(r: &Results, server: &str, cache: &str, test: &str, p: u32, clients: u32) -> Option<f64> {
    r.rows
        .iter()
        .find(|x| {
            x.server == server
                && x.cache == cache
                && x.test == test
                && x.pipeline == p
                && x.clients == clients
        })
        .map(|x| x.rps)
}

claims! {
    struct Claims {
        get_vs_redis_p16 >= 0.8, TARGET;
        get_vs_inprocess_p16 >= 0.6, TARGET;
        set_vs_redis_aof_p16 >= 0.8, TARGET;
        set_p1_vs_redis_aof >= 0.8, TARGET;
        set_always_vs_redis_aof_always >= 1.0, TARGET;
        sync_always_group_commit_gain >= 10, TARGET;
        idle_10k_active_rate_ratio >= 0.9, TARGET;
        list_push_vs_redis_aof_p16 >= 0.4, LISTS;
        list_pop_vs_redis_aof_p16 >= 0.4, LISTS;
        types_vs_redis_aof_p16 >= 0.4, TYPES;
        redis_compat_vs_redis >= 0.85, TYPES;
        redis_compat_file_ratio >= 0.7, TYPES;
        expiry_empty_after_last_ttl_s <= 20, TYPES;
        expiry_space_left_vs_peak <= 0.3, TYPES;
    }
}

impl Study for ServeRepro {
    type Results = Results;
    type Claims = Claims;
    const NAME: &'static str = "serve";
    const SUMMARY: &'static str =
        "ferrite serve (btree, lsm, zkv) against redis-server under redis-benchmark, plus the engines' in-process reads";
    type Sizes = Sizes;

    fn measure(&self, ctx: &ReproContext, s: Sizes) -> Result<Results> {
        need_redis_benchmark()?;
        let bin = ferrite_binary("ferrite serve")?;
        let mut results = Results {
            sizes: Some(s),
            ..Results::default()
        };
        let root = fresh_dir(&ctx.work_dir.join("serve"))?;
        let mut plan = Plan {
            s,
            results: &mut results,
        };
        if have("redis-server") {
            for aof in [None, Some("everysec"), Some("always")] {
                let dir = fresh_dir(&root.join("redis"))?;
                let server = start_redis(&dir, aof)?;
                plan.server_runs(&server, "in cache", aof == Some("always"))?;
                if aof == Some("everysec") {
                    plan.collection_runs(&server)?;
                }
                drop(server);
            }
            if let Ok(out) = Command::new("redis-server").arg("--version").output() {
                plan.results.redis_version =
                    String::from_utf8_lossy(&out.stdout).trim().to_string();
            }
        } else {
            plan.results
                .notes
                .push("redis-server is not installed: its rows are missing".into());
        }
        let compat_files: &[&str] = match ctx.scale {
            Scale::Smoke => &["unit/quit"],
            _ => &valkey_suite::CORE_FILES,
        };
        match valkey_suite::runner(&ctx.data_dir) {
            Some(runner) => {
                if have("redis-server") {
                    let dir = fresh_dir(&root.join("redis-compat"))?;
                    let server = start_redis(&dir, Some("everysec"))?;
                    plan.compat_run(&server, &runner, compat_files)?;
                }
                for engine in ENGINES {
                    let dir = fresh_dir(&root.join(format!("{engine}-compat")))?;
                    let sync = SyncMode::Batched(Duration::from_millis(1000));
                    let server = start_ferrite(&bin, &dir.join("store"), engine, sync, 64)?;
                    plan.compat_run(&server, &runner, compat_files)?;
                    server.stop()?;
                }
            }
            None => plan.results.notes.push(
                "Valkey's suite (../shared/redis-compat/run) or tclsh is missing: no compatibility counts"
                    .into(),
            ),
        }
        for engine in ENGINES {
            let dir = fresh_dir(&root.join(format!("{engine}-expiry")))?;
            let store = dir.join("store");
            let sync = SyncMode::Batched(Duration::from_millis(1000));
            let server = start_ferrite(&bin, &store, engine, sync, 256)?;
            let pass = expiry::Pass {
                keys: s.expiry_keys,
                max_ttl: Duration::from_millis(s.expiry_max_ttl_ms),
                window: Duration::from_secs(s.expiry_window_s),
            };
            let run = expiry::run(server.port, &store, pass)?;
            server.stop()?;
            plan.results.expiry.insert(engine.name().to_string(), run);
        }
        // Data: requests × (key + value) bytes, about; the budget for the
        // second pass is a tenth of it.
        let data_mb = (s.requests * (16 + s.value_bytes as u64)) >> 20;
        if have("redis-server") {
            plan.type_rounds(&bin, &root, (data_mb * 4).max(64))?;
        }
        let passes = [
            ("in cache", (data_mb * 4).max(64)),
            ("cache 10%", (data_mb / 10).max(1)),
        ];
        for (cache, cache_mb) in passes {
            for engine in ENGINES {
                for sync in [
                    SyncMode::Batched(Duration::from_millis(1000)),
                    SyncMode::Always,
                ] {
                    let dir = fresh_dir(&root.join(format!("{engine}")))?;
                    let store_dir = dir.join("store");
                    let server = start_ferrite(&bin, &store_dir, engine, sync, cache_mb)?;
                    let name = server.name.clone();
                    plan.server_runs(&server, cache, sync == SyncMode::Always)?;
                    if WRITE_CLAIM_ENGINES.contains(&engine)
                        && sync != SyncMode::Always
                        && cache == "in cache"
                    {
                        plan.collection_runs(&server)?;
                    }
                    if engine == EngineKind::Btree
                        && sync != SyncMode::Always
                        && cache == "in cache"
                    {
                        plan.idle_pass(&server, &unix_socket(&store_dir))?;
                    }
                    server.stop()?;
                    plan.results.disk_bytes.insert(
                        format!("{name} ({cache})"),
                        crate::process::disk_bytes(&store_dir),
                    );
                    // The in-process rate is the in-cache claim's
                    // denominator; at a tenth of the cache it would time
                    // the device, not the server.
                    if sync != SyncMode::Always && cache == "in cache" {
                        let r = inprocess_gets(
                            &store_dir,
                            engine,
                            cache_mb,
                            s.requests,
                            s.inprocess_reads,
                        )?;
                        plan.results
                            .inprocess_gets
                            .insert(format!("{engine} ({cache})"), r);
                    }
                }
            }
        }
        let _ = std::fs::remove_dir_all(&root);
        Ok(results)
    }

    fn params(&self, r: &Results) -> serde_json::Value {
        json!({
            "redis_version": r.redis_version,
            "servers": "separate processes on loopback; redis-benchmark from redis-tools",
        })
    }

    fn metrics(&self, r: &Results, claims: &mut Claims) -> Metrics {
        let mut m = Metrics::new();
        let c = r.sizes.map_or(50, |s| s.clients);
        let ic = "in cache";
        let redis = |test: &str, aof: Option<&str>| {
            let name = aof.map_or("redis in memory".to_string(), |f| format!("redis aof {f}"));
            rate(r, &name, ic, test, 16, c)
        };
        for engine in ENGINES {
            let batched = format!("ferrite {engine} batched:1000");
            let always = format!("ferrite {engine} always");
            let e = engine.name();
            let get = rate(r, &batched, ic, "GET", 16, c);
            let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b);
            let g_redis = ratio(get, redis("GET", None));
            let g_inproc = ratio(
                get,
                r.inprocess_gets.get(&format!("{engine} ({ic})")).copied(),
            );
            let s_aof = ratio(
                rate(r, &batched, ic, "SET", 16, c),
                redis("SET", Some("everysec")),
            );
            let s_always = ratio(
                rate(r, &always, ic, "SET", 16, c),
                redis("SET", Some("always")),
            );
            let gain = ratio(
                rate(r, &always, ic, "SET", 1, c),
                rate(r, &always, ic, "SET", 1, 1),
            );
            m.set_some(format!("{e}_get_vs_redis_p16"), g_redis);
            m.set_some(format!("{e}_get_vs_inprocess_p16"), g_inproc);
            m.set_some(format!("{e}_set_vs_redis_aof_p16"), s_aof);
            m.set_some(format!("{e}_set_always_vs_redis_aof_always"), s_always);
            m.set_some(format!("{e}_sync_always_group_commit_gain"), gain);
            let s_p1 = ratio(
                rate(r, &batched, ic, "SET", 1, c),
                rate(r, "redis aof everysec", ic, "SET", 1, c),
            );
            m.set_some(format!("{e}_set_p1_vs_redis_aof"), s_p1);
            if engine == EngineKind::Btree {
                claims.get_vs_redis_p16.set_some(g_redis);
            }
            m.lowest(&mut claims.get_vs_inprocess_p16, e, g_inproc);
            let aof = |test: &str, p: u32| rate(r, "redis aof everysec", ic, test, p, c);
            // Medians of the alternating rounds (a run from before they
            // existed has one row per server).
            let typed = |server: &str, up: &str| {
                r.type_rates
                    .get(&format!("{server} {up}"))
                    .and_then(|v| median(v))
                    .or_else(|| rate(r, server, ic, up, 16, c))
            };
            for (figure, tests) in [
                (&mut claims.list_push_vs_redis_aof_p16, ["LPUSH", "RPUSH"]),
                (&mut claims.list_pop_vs_redis_aof_p16, ["LPOP", "RPOP"]),
            ] {
                for test in tests {
                    let v = ratio(typed(&batched, test), typed("redis aof everysec", test));
                    m.set_some(format!("{e}_{}_vs_redis_aof_p16", test.to_lowercase()), v);
                    if WRITE_CLAIM_ENGINES.contains(&engine) {
                        let label = format!("{e} {}", test.to_lowercase());
                        m.lowest(figure, &label, v);
                    }
                }
            }
            for test in TYPE_TESTS {
                let up = test.to_uppercase();
                let v = ratio(typed(&batched, &up), typed("redis aof everysec", &up));
                m.set_some(format!("{e}_{test}_vs_redis_aof_p16"), v);
                if WRITE_CLAIM_ENGINES.contains(&engine) {
                    m.lowest(
                        &mut claims.types_vs_redis_aof_p16,
                        &format!("{e} {test}"),
                        v,
                    );
                }
            }
            if let (Some(mine), Some(theirs)) =
                (r.compat.get(&batched), r.compat.get("redis aof everysec"))
            {
                let total =
                    |c: &BTreeMap<String, FileCount>| c.values().map(|f| f.passed).sum::<u64>();
                m.set(format!("{e}_redis_compat_passed"), total(mine) as f64);
                m.lowest(
                    &mut claims.redis_compat_vs_redis,
                    e,
                    ratio(Some(total(mine) as f64), Some(total(theirs) as f64)),
                );
                for (file, t) in theirs.iter().filter(|(_, t)| t.passed > 0) {
                    let v = mine.get(file).map(|f| f.passed as f64 / t.passed as f64);
                    m.lowest(
                        &mut claims.redis_compat_file_ratio,
                        &format!("{e} {file}"),
                        v,
                    );
                }
            }
            m.set_some(
                format!("{e}_evalsha10_vs_redis_aof"),
                ratio(
                    rate(r, &batched, ic, "EVALSHA10", 1, c),
                    aof("EVALSHA10", 1),
                ),
            );
            if WRITE_CLAIM_ENGINES.contains(&engine) {
                m.lowest(&mut claims.set_vs_redis_aof_p16, e, s_aof);
                m.lowest(&mut claims.set_p1_vs_redis_aof, e, s_p1);
                m.lowest(&mut claims.set_always_vs_redis_aof_always, e, s_always);
                m.lowest(&mut claims.sync_always_group_commit_gain, e, gain);
            }
        }
        for (e, run) in &r.expiry {
            let mib = |b: u64| b as f64 / f64::from(1 << 20);
            m.highest(
                &mut claims.expiry_empty_after_last_ttl_s,
                e,
                run.empty_after(),
            );
            m.highest(&mut claims.expiry_space_left_vs_peak, e, run.left_vs_peak());
            m.set(format!("{e}_expiry_peak_mib"), mib(run.peak_bytes()));
            if let Some(last) = run.samples.last() {
                m.set(format!("{e}_expiry_final_mib"), mib(last.store_bytes));
            }
        }
        let idle = |k: &str| r.idle_rates.get(k).and_then(|v| median(v));
        for test in ["SET", "GET"] {
            let ratio = idle(&format!("{test} idle"))
                .zip(idle(&format!("{test} alone")))
                .map(|(i, a)| i / a);
            m.set_some(format!("idle_10k_{}_ratio", test.to_lowercase()), ratio);
            m.lowest(&mut claims.idle_10k_active_rate_ratio, test, ratio);
        }
        if let Some((before, with)) = r.idle_rss {
            if r.idle_clients > 0 {
                m.set(
                    "idle_rss_bytes_per_client",
                    (with as f64 - before as f64) / r.idle_clients as f64,
                );
            }
        }
        for row in &r.rows {
            let key = format!(
                "{}_{}_{}_p{}_c{}_kops",
                row.server.replace([' ', ':'], "_"),
                if row.cache == ic {
                    "incache"
                } else {
                    "cache10"
                },
                row.test.to_lowercase(),
                row.pipeline,
                row.clients
            );
            m.set(key, row.rps / 1000.0);
        }
        m
    }

    fn render(&self, r: &Results, m: &Metrics, doc: &mut Report) -> Result<()> {
        doc.h1("ferrite serve against redis-server");
        doc.text(format!(
            "Every server is a separate process on loopback, driven by `redis-benchmark -c {c} -r {n} -d 100` \
             for SET then GET. Redis: {v}. ferrite: `ferrite serve` with `--sync batched:1000` or `--sync always`; \
             the in-process column reads the same store after the server closed it (every pair read once to warm the cache, then uniform random gets, one thread).",
            c = r.sizes.map_or(50, |s| s.clients),
            n = r.sizes.map_or(0, |s| s.requests),
            v = if r.redis_version.is_empty() { "not installed" } else { &r.redis_version },
        ));
        let mut t = Table::new([
            "server", "cache", "test", "pipeline", "clients", "requests", "kops/s", "p50 ms",
            "p99 ms",
        ]);
        for row in &r.rows {
            t.row([
                row.server.clone(),
                row.cache.clone(),
                row.test.clone(),
                row.pipeline.to_string(),
                row.clients.to_string(),
                row.requests.to_string(),
                format!("{:.1}", row.rps / 1000.0),
                format!("{:.3}", row.p50_ms),
                format!("{:.3}", row.p99_ms),
            ]);
        }
        doc.table(&t);
        let mut t = Table::new(["engine (cache)", "in-process GET kops/s (1 thread)"]);
        for (k, v) in &r.inprocess_gets {
            t.row([k.clone(), format!("{:.1}", v / 1000.0)]);
        }
        doc.table(&t);
        let mut t = Table::new(["server (cache)", "RSS after SET P16 (MiB)"]);
        for (k, v) in &r.rss_bytes {
            t.row([k.clone(), format!("{:.1}", *v as f64 / (1 << 20) as f64)]);
        }
        doc.table(&t);
        if !r.compat.is_empty() {
            doc.text(
                "Valkey's own test suite (`../shared/redis-compat/run`, external-server mode), \
                 tests passed per file, each server on a fresh store (ferrite: `--sync batched:1000`, \
                 64 MiB cache; redis-server: AOF everysec).",
            );
            let servers: Vec<&String> = r.compat.keys().collect();
            let mut t = Table::new(
                std::iter::once("file".to_string()).chain(servers.iter().map(|s| s.to_string())),
            );
            let files: std::collections::BTreeSet<&String> =
                r.compat.values().flat_map(|c| c.keys()).collect();
            for file in files {
                t.row(std::iter::once(file.clone()).chain(servers.iter().map(|s| {
                    r.compat[*s]
                        .get(file)
                        .map_or("-".into(), |c| c.passed.to_string())
                })));
            }
            t.row(
                std::iter::once("total".to_string()).chain(servers.iter().map(|s| {
                    r.compat[*s]
                        .values()
                        .map(|c| c.passed)
                        .sum::<u64>()
                        .to_string()
                })),
            );
            doc.table(&t);
        }
        if !r.idle_rates.is_empty() {
            doc.text(format!(
                "B+tree, in cache, `--sync batched:1000`: SET and GET `-P 16` from {} clients, \
                 alternately alone and with {} idle clients connected (medians of {IDLE_ROUNDS}).",
                r.sizes.map_or(50, |s| s.clients),
                r.idle_clients
            ));
            doc.table(&rounds_table("test, condition", &r.idle_rates));
            if let Some((before, with)) = r.idle_rss {
                doc.text(format!(
                    "Server RSS {:.1} MiB before the idle clients connected, {:.1} MiB with them.",
                    before as f64 / (1 << 20) as f64,
                    with as f64 / (1 << 20) as f64
                ));
            }
        }
        if let (false, Some(sizes)) = (r.expiry.is_empty(), r.sizes) {
            doc.text(format!(
                "Expiry: {} keys `SET ttl:<i> <20 bytes> PX <{}>` into `ferrite serve` \
                 (`--sync batched:1000`, 256 MiB cache), none read again; `DBSIZE` and the store's \
                 allocated bytes once a second until {} s after the last deadline.",
                sizes.expiry_keys,
                expiry::ttl_range_text(sizes.expiry_max_ttl_ms),
                sizes.expiry_window_s
            ));
            let mut t = Table::new([
                "engine",
                "load s",
                "last deadline s",
                "DBSIZE 0 after it, s",
                "peak MiB",
                "at the end MiB",
            ]);
            let mib = |b: u64| format!("{:.1}", b as f64 / f64::from(1 << 20));
            for (e, run) in &r.expiry {
                t.row([
                    e.clone(),
                    format!("{:.1}", run.load_seconds),
                    format!("{:.1}", run.last_deadline),
                    run.empty_after()
                        .map_or("never".into(), |s| format!("{s:.1}")),
                    mib(run.peak_bytes()),
                    mib(run.samples.last().map_or(0, |s| s.store_bytes)),
                ]);
            }
            doc.table(&t);
        }
        if !r.type_rates.is_empty() {
            doc.text(format!(
                "The type and list tests, `-P 16 -c {}`, in {TYPE_ROUNDS} rounds: each server on a \
                 fresh store, the servers alternating within a round; the claims compare medians.",
                r.sizes.map_or(50, |s| s.clients),
            ));
            doc.table(&rounds_table("server, test", &r.type_rates));
        }
        let mut t = Table::new(["store (cache)", "on disk (MiB)"]);
        for (k, v) in &r.disk_bytes {
            t.row([k.clone(), format!("{:.1}", *v as f64 / (1 << 20) as f64)]);
        }
        doc.table(&t);
        for n in &r.notes {
            doc.text(format!("- {n}"));
        }
        doc.metrics(m);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_benchmark_csv_gives_rate_p50_and_p99_even_for_a_command_with_commas() {
        let header = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"";
        let set = format!("{header}\n\"SET\",\"86956.52\",\"0.124\",\"0.032\",\"0.111\",\"0.215\",\"0.535\",\"1.367\"\n");
        assert_eq!(csv_result(&set), Some((86956.52, 0.111, 0.535)));
        let hset = format!("{header}\n\"hset h __rand_int__ a,b\",\"33333.34\",\"0.076\",\"0.024\",\"0.063\",\"0.167\",\"0.223\",\"0.431\"\n");
        assert_eq!(csv_result(&hset), Some((33333.34, 0.063, 0.223)));
        assert_eq!(csv_result(header), None);
        assert_eq!(csv_result("ERR unknown command\n"), None);
    }
}
