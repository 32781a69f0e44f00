//! Automatic failover by real Redis Sentinel: one ferrite master, two
//! ferrite replicas, three sentinels (`redis-server --sentinel`, Redis
//! 7.0). A Sentinel-aware client, redis-py's `Sentinel` (from PyPI, in a
//! venv the test makes; `tests/clients/sentinel_writer.py`), writes
//! continuously, each write followed by `WAIT 1`; the master is killed
//! with SIGKILL; the sentinels promote a replica with the commands they
//! really send; the client finds it and resumes; the old master,
//! restarted, is turned into a replica and converges. Every write
//! acknowledged by `WAIT 1` before the kill is on the new master, and
//! afterwards all three nodes hold the same data.
//!
//! `FERRITE_FAILOVERS=N` repeats the kill N times (each round kills the
//! master of the moment), and the test prints what each failover cost;
//! docs/results/replication.md reports 20. Needs redis-server
//! (`scripts/install-redis-tools.sh`) and python3-venv with PyPI.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrite_process::{free_port, Ready, Server};

struct Node {
    port: u16,
    path: PathBuf,
    server: Option<Server>,
}

impl Node {
    /// Starts `ferrite serve` on the node's port and store, ready once it
    /// has recovered and printed its address.
    fn start(&mut self, replicaof: Option<u16>) {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ferrite"));
        c.args(["serve", "--engine", "lsm", "--cache-mb", "32"])
            .args(["--io-threads", "1"])
            .arg("--path")
            .arg(&self.path)
            .args(["--listen", &format!("127.0.0.1:{}", self.port)])
            .args(["--sync", "batched:100"])
            .stderr(Stdio::null());
        if let Some(m) = replicaof {
            c.args(["--replicaof", "127.0.0.1", &m.to_string()]);
        }
        let name = format!("ferrite node on {}", self.port);
        self.server =
            Some(Server::start(c, name, Ready::FirstLine, Duration::from_secs(30)).unwrap());
    }

    fn kill(&mut self) {
        if let Some(mut s) = self.server.take() {
            s.kill();
        }
    }
}

fn url(port: u16) -> String {
    format!("redis://127.0.0.1:{port}/")
}

fn conn(port: u16) -> redis::RedisResult<redis::Connection> {
    let c = redis::Client::open(url(port))?;
    let conn = c.get_connection_with_timeout(Duration::from_secs(2))?;
    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    Ok(conn)
}

fn wait_until(limit: Duration, what: &str, mut ok: impl FnMut() -> bool) {
    let until = Instant::now() + limit;
    while !ok() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn info(port: u16, field: &str) -> Option<String> {
    let mut c = conn(port).ok()?;
    let text: String = redis::cmd("INFO").arg("replication").query(&mut c).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().to_string())
}

/// The master the sentinels name, confirmed by its own `ROLE`.
fn master_of(sentinels: &[u16]) -> Option<u16> {
    for &s in sentinels {
        let Ok(mut c) = conn(s) else { continue };
        let addr: redis::RedisResult<Vec<String>> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg("ferrite")
            .query(&mut c);
        let Some(port) = addr.ok().and_then(|a| a.get(1)?.parse::<u16>().ok()) else {
            continue;
        };
        let mut m = conn(port).ok()?;
        let role: redis::Value = redis::cmd("ROLE").query(&mut m).ok()?;
        if let redis::Value::Array(parts) = role {
            if matches!(parts.first(), Some(redis::Value::BulkString(r)) if r == b"master") {
                return Some(port);
            }
        }
    }
    None
}

/// What the writer saw.
#[derive(Default)]
struct Seen {
    /// Writes acknowledged by `WAIT 1`: key -> value.
    waited: BTreeMap<String, String>,
    /// Writes acknowledged by the master only.
    unwaited: BTreeMap<String, String>,
    /// When each write was acknowledged, and by which node (for the
    /// failover time: a reply the old master sent just before its death
    /// may arrive after the kill).
    acks: Vec<(Instant, u16)>,
}

/// Starts the Python writer against the sentinels and a thread that
/// reads what it acknowledges into `seen`, stamping each line as it
/// arrives (it flushes each one after the reply).
fn writer(python: &Path, sentinels: &[u16], seen: Arc<Mutex<Seen>>) -> Writer {
    let mut child = Command::new(python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/sentinel_writer.py"))
        .args(sentinels.iter().map(u16::to_string))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    std::thread::spawn(move || {
        for line in out.lines() {
            let Ok(line) = line else { break };
            let f: Vec<&str> = line.split_whitespace().collect();
            let [port, waited, k, v] = f[..] else {
                panic!("the writer printed {line:?}")
            };
            let (port, waited): (u16, i64) = (port.parse().unwrap(), waited.parse().unwrap());
            let mut s = seen.lock().unwrap();
            s.acks.push((Instant::now(), port));
            if waited >= 1 {
                s.waited.insert(k.to_string(), v.to_string());
            } else {
                s.unwaited.insert(k.to_string(), v.to_string());
            }
        }
    });
    Writer(child)
}

/// The writer's process, killed when the test ends, however it ends.
struct Writer(std::process::Child);

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Every `w:*` key a node holds, with its value.
fn contents(port: u16) -> BTreeMap<String, String> {
    let mut c = conn(port).unwrap();
    let keys: Vec<String> = redis::cmd("KEYS").arg("w:*").query(&mut c).unwrap();
    let mut out = BTreeMap::new();
    for chunk in keys.chunks(500) {
        let vals: Vec<Option<String>> = redis::cmd("MGET").arg(chunk).query(&mut c).unwrap();
        for (k, v) in chunk.iter().zip(vals) {
            if let Some(v) = v {
                out.insert(k.clone(), v);
            }
        }
    }
    out
}

struct Sentinel {
    port: u16,
    _server: Server,
}

fn start_sentinel(dir: &Path, port: u16, master: u16) -> Sentinel {
    let d = dir.join(format!("sentinel-{port}"));
    std::fs::create_dir_all(&d).unwrap();
    let conf = d.join("sentinel.conf");
    std::fs::write(
        &conf,
        format!(
            "port {port}\nbind 127.0.0.1\ndir {}\n\
             sentinel monitor ferrite 127.0.0.1 {master} 2\n\
             sentinel down-after-milliseconds ferrite 1000\n\
             sentinel failover-timeout ferrite 10000\n\
             sentinel parallel-syncs ferrite 2\n",
            d.display()
        ),
    )
    .unwrap();
    let mut c = Command::new("redis-server");
    c.arg(&conf)
        .arg("--sentinel")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let name = format!("sentinel on {port}");
    let server = Server::start(c, name, Ready::Port(port), Duration::from_secs(20)).unwrap();
    Sentinel {
        port,
        _server: server,
    }
}

#[test]
fn sentinel_promotes_a_replica_when_the_master_is_killed_and_no_waited_write_is_lost() {
    if !common::have("redis-server", "scripts/install-redis-tools.sh") {
        return;
    }
    let rounds: usize = std::env::var("FERRITE_FAILOVERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    let dir = tempfile::tempdir().unwrap();
    let Some(python) = ferrite_process::tool::python_venv(
        &Path::new(env!("CARGO_TARGET_TMPDIR")).join("redis-py-venv"),
        &["redis>=5,<6"],
        "redis",
    ) else {
        return;
    };
    let mut ports: Vec<u16> = Vec::new();
    while ports.len() < 6 {
        let p = free_port().unwrap();
        if !ports.contains(&p) {
            ports.push(p);
        }
    }
    let mut nodes: Vec<Node> = (0..3)
        .map(|i| Node {
            port: ports[i],
            path: dir.path().join(format!("node-{i}")),
            server: None,
        })
        .collect();
    nodes[0].start(None);
    let master = nodes[0].port;
    nodes[1].start(Some(master));
    nodes[2].start(Some(master));
    wait_until(Duration::from_secs(20), "two replicas online", || {
        info(master, "connected_slaves").as_deref() == Some("2")
    });
    let sentinels: Vec<Sentinel> = ports[3..]
        .iter()
        .map(|&p| start_sentinel(dir.path(), p, master))
        .collect();
    let sports: Vec<u16> = sentinels.iter().map(|s| s.port).collect();
    // Each sentinel knows the two replicas and the two other sentinels.
    wait_until(
        Duration::from_secs(30),
        "the sentinels to know everyone",
        || {
            sports.iter().all(|&s| {
                let Ok(mut c) = conn(s) else { return false };
                let r: redis::RedisResult<Vec<redis::Value>> = redis::cmd("SENTINEL")
                    .arg("replicas")
                    .arg("ferrite")
                    .query(&mut c);
                let o: redis::RedisResult<Vec<redis::Value>> = redis::cmd("SENTINEL")
                    .arg("sentinels")
                    .arg("ferrite")
                    .query(&mut c);
                r.is_ok_and(|r| r.len() == 2) && o.is_ok_and(|o| o.len() == 2)
            })
        },
    );

    let seen = Arc::new(Mutex::new(Seen::default()));
    let w = writer(&python, &sports, seen.clone());
    let mut lost_unwaited = 0usize;
    let mut known_lost = std::collections::BTreeSet::new();
    for round in 0..rounds {
        let master = master_of(&sports).expect("a master");
        let victim = nodes.iter().position(|n| n.port == master).unwrap();
        wait_until(
            Duration::from_secs(20),
            "writes acknowledged by a replica",
            || seen.lock().unwrap().waited.len() > 200 * (round + 1),
        );
        nodes[victim].kill();
        let killed = Instant::now();
        let (waited_before, unwaited_before) = {
            let s = seen.lock().unwrap();
            (s.waited.clone(), s.unwaited.clone())
        };
        let new_master = {
            let mut found = None;
            wait_until(Duration::from_secs(60), "a new master", || {
                found = master_of(&sports).filter(|&p| p != master);
                found.is_some()
            });
            found.unwrap()
        };
        let first_ack = {
            let mut at = None;
            wait_until(Duration::from_secs(30), "a write on the new master", || {
                at = seen
                    .lock()
                    .unwrap()
                    .acks
                    .iter()
                    .find(|&&(t, p)| t > killed && p == new_master)
                    .map(|&(t, _)| t);
                at.is_some()
            });
            at.unwrap()
        };
        let on_new = contents(new_master);
        let lost: Vec<&String> = waited_before
            .keys()
            .filter(|k| on_new.get(*k) != waited_before.get(*k))
            .collect();
        assert!(
            lost.is_empty(),
            "round {round}: {} writes acknowledged with WAIT 1 are not on the new master (first: {:?})",
            lost.len(),
            lost.first()
        );
        let lost_now = unwaited_before
            .keys()
            .filter(|k| !on_new.contains_key(*k) && known_lost.insert((*k).clone()))
            .count();
        lost_unwaited += lost_now;
        eprintln!(
            "failover {round}: {} -> {}: first acknowledged write {} ms after the kill; \
             {} waited writes kept, {} unwaited writes lost (of {} so far)",
            master,
            new_master,
            (first_ack - killed).as_millis(),
            waited_before.len(),
            lost_now,
            unwaited_before.len()
        );
        // The old master comes back; the sentinels make it a replica.
        nodes[victim].start(None);
        let back = nodes[victim].port;
        wait_until(Duration::from_secs(60), "the old master to follow", || {
            info(back, "role").as_deref() == Some("slave")
                && info(back, "master_link_status").as_deref() == Some("up")
        });
    }
    drop(w);
    // Converged: every node holds what the master holds.
    let master = master_of(&sports).unwrap();
    wait_until(Duration::from_secs(30), "every replica to catch up", || {
        let m = info(master, "master_repl_offset");
        nodes
            .iter()
            .filter(|n| n.port != master)
            .all(|n| info(n.port, "master_repl_offset") == m && m.is_some())
    });
    let want = contents(master);
    for n in nodes.iter().filter(|n| n.port != master) {
        assert_eq!(
            contents(n.port),
            want,
            "replica {} differs from the master",
            n.port
        );
    }
    eprintln!(
        "{rounds} failovers: {} writes acknowledged with WAIT 1, none lost; \
         {lost_unwaited} writes acknowledged without a replica's acknowledgement lost",
        seen.lock().unwrap().waited.len()
    );
    drop(sentinels);
}
