//! Automatic failover by real Redis Sentinel: one ferrite master, two
//! ferrite replicas, three sentinels (`redis-server --sentinel`, Redis
//! 7.0). A client that finds the master through the sentinels (as a
//! Sentinel-aware client does: `SENTINEL get-master-addr-by-name`, then
//! `ROLE` to confirm) writes continuously, each write followed by `WAIT
//! 1`; the master is killed with SIGKILL; the sentinels promote a
//! replica with the commands they really send; the client resumes on
//! it; the old master, restarted, is turned into a replica and
//! converges. Every write acknowledged by `WAIT 1` before the kill is on
//! the new master, and afterwards all three nodes hold the same data.
//!
//! `FERRITE_FAILOVERS=N` repeats the kill N times (each round kills the
//! master of the moment), and the test prints what each failover cost;
//! docs/results/replication.md reports 20. Needs redis-server
//! (`scripts/install-redis-tools.sh`).
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn free_ports(n: usize) -> Vec<u16> {
    let ls: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    ls.iter().map(|l| l.local_addr().unwrap().port()).collect()
}

struct Node {
    port: u16,
    path: PathBuf,
    child: Option<Child>,
}

impl Node {
    fn start(&mut self, replicaof: Option<u16>) {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ferrite"));
        c.args([
            "serve",
            "--engine",
            "lsm",
            "--cache-mb",
            "32",
            "--io-threads",
            "1",
        ])
        .arg("--path")
        .arg(&self.path)
        .args(["--listen", &format!("127.0.0.1:{}", self.port)])
        .args(["--sync", "batched:100"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        if let Some(m) = replicaof {
            c.args(["--replicaof", "127.0.0.1", &m.to_string()]);
        }
        self.child = Some(c.spawn().unwrap());
        wait_until(Duration::from_secs(20), "the node to listen", || {
            redis::Client::open(url(self.port))
                .and_then(|c| c.get_connection())
                .is_ok()
        });
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

struct Sentinel {
    port: u16,
    child: Child,
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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

fn writer(sentinels: Vec<u16>, stop: Arc<AtomicBool>, seen: Arc<Mutex<Seen>>) {
    let mut i = 0u64;
    let mut c: Option<(redis::Connection, u16)> = None;
    while !stop.load(Ordering::Acquire) {
        if c.is_none() {
            c = master_of(&sentinels).and_then(|p| Some((conn(p).ok()?, p)));
            if c.is_none() {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        }
        let (m, port) = c.as_mut().unwrap();
        let port = *port;
        let (k, v) = (format!("w:{i}"), format!("v{i}"));
        let set: redis::RedisResult<String> = redis::cmd("SET").arg(&k).arg(&v).query(m);
        if set.is_err() {
            c = None;
            continue;
        }
        let waited: redis::RedisResult<i64> = redis::cmd("WAIT").arg(1).arg(200).query(m);
        let mut s = seen.lock().unwrap();
        s.acks.push((Instant::now(), port));
        match waited {
            Ok(n) if n >= 1 => s.waited.insert(k, v),
            _ => s.unwaited.insert(k, v),
        };
        drop(s);
        i += 1;
        if waited.is_err() {
            c = None;
        }
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
    let child = Command::new("redis-server")
        .arg(&conf)
        .arg("--sentinel")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Sentinel { port, child }
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
    let ports = free_ports(6);
    let mut nodes: Vec<Node> = (0..3)
        .map(|i| Node {
            port: ports[i],
            path: dir.path().join(format!("node-{i}")),
            child: None,
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

    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let w = {
        let (s, st, se) = (sports.clone(), stop.clone(), seen.clone());
        std::thread::spawn(move || writer(s, st, se))
    };
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
    stop.store(true, Ordering::Release);
    w.join().unwrap();
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
