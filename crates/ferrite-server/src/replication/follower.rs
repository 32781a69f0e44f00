//! A replica's link to its master: connect, handshake (`PING`,
//! `REPLCONF listening-port`, `REPLCONF capa ferrite`, `PSYNC id
//! offset`), load a copy when the master sends one, then apply the
//! stream, acknowledging the offset every second and when asked.
//! A link that fails is tried again every second, continuing from the
//! replica's offset.
//!
//! Invariants: one follower is current at a time (a newer `REPLICAOF`
//! retires the older, which applies nothing once retired: the check and
//! the apply happen under `Replication::applying`); while a copy loads
//! clients are answered `LOADING`, and the store holds the master's
//! records alone once it ends; every change is applied with the
//! replica's new position in the same batch.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrite::WriteBatch;

use super::frame::{self, Decoder, Kind};
use super::{copying_key, master_key, position_key, Link};
use crate::model::change;
use crate::shared::Shared;

/// How long a read waits before the follower looks whether it is still
/// current and whether an acknowledgement is due.
const TICK: Duration = Duration::from_millis(200);

/// How often the replica acknowledges its offset.
const ACK_EVERY: Duration = Duration::from_secs(1);

/// A master silent this long (no heartbeat) is a failed link.
const MASTER_TIMEOUT: Duration = Duration::from_secs(60);

/// At start: the stored position (a replica's id and offset) and the
/// master to follow (`--replicaof`, or the one the store followed when
/// it stopped); starts following it.
pub fn resume(
    shared: &Arc<Shared>,
    port: u16,
) -> std::result::Result<(), crate::model::ModelError> {
    shared.repl.listening_port.store(port, Ordering::Release);
    let store = shared.ks.store();
    if let Some((id, off)) = store
        .get(position_key())?
        .as_deref()
        .and_then(parse_position)
    {
        shared.repl.reset(&id, off);
    }
    let stored = store.get(master_key())?.and_then(|v| {
        let s = String::from_utf8(v).ok()?;
        let (h, p) = s.rsplit_once(' ')?;
        Some((h.to_string(), p.parse::<u16>().ok()?))
    });
    if store.get(copying_key())?.is_some() {
        shared.ks.set_loading(true);
    }
    if let Some((host, port)) = shared.config.replicaof.clone().or(stored) {
        follow(shared, &host, port)?;
    }
    Ok(())
}

/// Makes this node a replica of `host:port` (`REPLICAOF`, `--replicaof`):
/// remembered in the store, followed from a thread of its own. False if
/// it already follows it.
pub fn follow(
    shared: &Shared,
    host: &str,
    port: u16,
) -> std::result::Result<bool, crate::model::ModelError> {
    let Some(generation) = shared.repl.follow(host, port) else {
        return Ok(false);
    };
    shared.ks.set_replica(true);
    shared
        .ks
        .store()
        .put(master_key(), format!("{host} {port}"))?;
    match shared.arc() {
        Some(arc) => start(arc, generation),
        None => log::error!("replication cannot start: the server is stopping"),
    }
    Ok(true)
}

/// Stops following (`REPLICAOF NO ONE`): writes are taken again.
pub fn unfollow(shared: &Shared) -> std::result::Result<bool, crate::model::ModelError> {
    if !shared.repl.promote() {
        return Ok(false);
    }
    shared.ks.set_replica(false);
    shared.ks.set_loading(false);
    let store = shared.ks.store();
    store.delete(master_key())?;
    store.delete(position_key())?;
    store.delete(copying_key())?;
    Ok(true)
}

/// Starts the follower of `generation` on its own thread.
pub fn start(shared: Arc<Shared>, generation: u64) {
    let spawned = std::thread::Builder::new()
        .name("ferrite-follow".into())
        .spawn(move || {
            while shared.repl.current(generation) && !shared.shutting_down() {
                if let Err(e) = link(&shared, generation) {
                    if shared.repl.current(generation) {
                        log::warn!("replication link: {e}");
                    }
                }
                // A copy cut short leaves the store answering LOADING.
                shared.repl.set_link(generation, None);
                let until = Instant::now() + Duration::from_secs(1);
                while Instant::now() < until
                    && shared.repl.current(generation)
                    && !shared.shutting_down()
                {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        });
    if let Err(e) = spawned {
        log::error!("cannot start the replication link: {e}");
    }
}

type Result<T> = std::result::Result<T, String>;

/// The position stored with each applied change: id, then offset.
fn position(replid: &str, offset: u64) -> Vec<u8> {
    let mut v = replid.as_bytes().to_vec();
    v.extend_from_slice(&offset.to_be_bytes());
    v
}

/// Reads a stored position.
pub fn parse_position(v: &[u8]) -> Option<(String, u64)> {
    if v.len() < 8 {
        return None;
    }
    let (id, off) = v.split_at(v.len() - 8);
    Some((
        String::from_utf8(id.to_vec()).ok()?,
        u64::from_be_bytes(off.try_into().ok()?),
    ))
}

struct Link_ {
    s: TcpStream,
    buf: Vec<u8>,
    frames: Decoder,
}

impl Link_ {
    fn send(&mut self, args: &[&[u8]]) -> Result<()> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        self.s
            .write_all(&out)
            .map_err(|e| format!("cannot write to the master: {e}"))
    }

    /// One reply line, within `wait`.
    fn line(&mut self, wait: Duration) -> Result<String> {
        let until = Instant::now() + wait;
        loop {
            if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let l = String::from_utf8_lossy(&self.buf[..i]).into_owned();
                self.buf.drain(..i + 2);
                return Ok(l);
            }
            if Instant::now() > until {
                return Err("the master did not answer".into());
            }
            self.fill()?;
        }
    }

    /// Reads what arrives within one tick.
    fn fill(&mut self) -> Result<usize> {
        let mut chunk = [0u8; 64 << 10];
        match self.s.read(&mut chunk) {
            Ok(0) => Err("the master closed the link".into()),
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(n)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Ok(0)
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Ok(0),
            Err(e) => Err(format!("reading from the master: {e}")),
        }
    }

    fn command(&mut self, args: &[&[u8]]) -> Result<String> {
        self.send(args)?;
        let l = self.line(Duration::from_secs(10))?;
        if let Some(err) = l.strip_prefix('-') {
            return Err(format!(
                "the master answered {:?} to {}",
                err,
                String::from_utf8_lossy(args[0])
            ));
        }
        Ok(l)
    }

    /// The next frame, `None` if none arrived this tick.
    fn frame(&mut self) -> Result<Option<(Kind, Vec<u8>)>> {
        if let Some(f) = self.frames.next_frame().map_err(|e| e.to_string())? {
            return Ok(Some(f));
        }
        self.fill()?;
        let b = std::mem::take(&mut self.buf);
        self.frames.feed(&b);
        self.frames.next_frame().map_err(|e| e.to_string())
    }
}

fn link(shared: &Arc<Shared>, generation: u64) -> Result<()> {
    let Some(f) = shared
        .repl
        .following()
        .filter(|f| f.generation == generation)
    else {
        return Ok(());
    };
    let addr = (f.host.as_str(), f.port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {}:{}: {e}", f.host, f.port))?
        .next()
        .ok_or_else(|| format!("{}:{} has no address", f.host, f.port))?;
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(TICK)).map_err(|e| e.to_string())?;
    let mut l = Link_ {
        s,
        buf: Vec::new(),
        frames: Decoder::default(),
    };
    let r = run(shared, generation, &mut l);
    let _ = l.s.shutdown(Shutdown::Both);
    r
}

fn run(shared: &Arc<Shared>, generation: u64, l: &mut Link_) -> Result<()> {
    l.command(&[b"PING"])?;
    let port = shared
        .repl
        .listening_port
        .load(std::sync::atomic::Ordering::Acquire)
        .to_string();
    l.command(&[b"REPLCONF", b"listening-port", port.as_bytes()])?;
    l.command(&[b"REPLCONF", b"capa", b"ferrite"])?;
    let (replid, offset) = shared.repl.position();
    let want = (offset + 1).to_string();
    l.send(&[b"PSYNC", replid.as_bytes(), want.as_bytes()])?;
    let answer = l.line(Duration::from_secs(30))?;
    let mut words = answer.split_whitespace();
    match words.next() {
        Some("+FULLRESYNC") => {
            let id = words.next().ok_or("FULLRESYNC without an id")?.to_string();
            let off: u64 = words
                .next()
                .and_then(|o| o.parse().ok())
                .ok_or("FULLRESYNC without an offset")?;
            shared.repl.set_link(generation, Some(Link::Sync));
            load(shared, generation, l, &id, off)?;
        }
        Some("+CONTINUE") => {
            if let Some(id) = words.next() {
                shared.repl.adopt(id);
            }
        }
        _ => return Err(format!("the master answered {answer:?} to PSYNC")),
    }
    shared.repl.set_link(generation, Some(Link::Connected));
    log::info!("replication link up at offset {}", shared.repl.offset());
    stream(shared, generation, l)
}

/// Replaces the store's records with the master's copy.
fn load(
    shared: &Arc<Shared>,
    generation: u64,
    l: &mut Link_,
    replid: &str,
    offset: u64,
) -> Result<()> {
    let store = shared.ks.store();
    let guard = shared.repl.applying(generation).ok_or("retired")?;
    shared.ks.set_loading(true);
    let t0 = Instant::now();
    // One batch: the old records go, the master stays named, and the
    // store is marked as holding part of a copy (a restart answers
    // `LOADING` until a copy completes, never serves half of one).
    let mut clear = WriteBatch::new();
    let follow = shared
        .repl
        .following()
        .map(|f| format!("{} {}", f.host, f.port));
    let cleared = clear
        .delete_range(&[0u8], &[0xffu8])
        .and_then(|b| b.put(&copying_key(), b"1"))
        .and_then(|b| match &follow {
            Some(m) => b.put(&master_key(), m.as_bytes()),
            None => Ok(b),
        });
    cleared.map_err(|e| e.to_string())?;
    store
        .write(&clear)
        .map_err(|e| format!("clearing the store for the copy: {e}"))?;
    drop(guard);
    let mut n = 0u64;
    let mut last_heard = Instant::now();
    loop {
        if shared.shutting_down() {
            return Err("the server is stopping".into());
        }
        let Some((kind, f)) = l.frame()? else {
            if last_heard.elapsed() > MASTER_TIMEOUT {
                return Err("the master sent nothing for a minute during the copy".into());
            }
            continue;
        };
        last_heard = Instant::now();
        let _guard = shared.repl.applying(generation).ok_or("retired")?;
        match kind {
            Kind::Records => {
                let pairs = frame::read_records(&f[frame::HEADER..]).map_err(|e| e.to_string())?;
                let mut batch = WriteBatch::new();
                for (k, v) in &pairs {
                    batch.put(k, v).map_err(|e| e.to_string())?;
                }
                n += pairs.len() as u64;
                store
                    .write(&batch)
                    .map_err(|e| format!("loading the copy: {e}"))?;
            }
            Kind::CopyEnd => {
                let mut batch = WriteBatch::new();
                batch
                    .put(&position_key(), &position(replid, offset))
                    .and_then(|b| b.delete(&copying_key()))
                    .map_err(|e| e.to_string())?;
                store
                    .write(&batch)
                    .map_err(|e| format!("loading the copy: {e}"))?;
                store.sync().map_err(|e| format!("syncing the copy: {e}"))?;
                shared.ks.reload().map_err(|e| e.to_string())?;
                if let Err(e) = shared.scripts.restore(store) {
                    log::warn!("the master's function libraries did not load: {e}");
                }
                shared.repl.reset(replid, offset);
                shared.ks.set_loading(false);
                log::info!(
                    "copy of {n} records loaded in {:.1} s; streaming from offset {offset}",
                    t0.elapsed().as_secs_f64()
                );
                return Ok(());
            }
            Kind::Heartbeat | Kind::GetAck => {}
            Kind::Change => return Err("a change arrived inside the copy".into()),
        }
    }
}

/// Applies the stream until the link fails or the follower retires.
fn stream(shared: &Arc<Shared>, generation: u64, l: &mut Link_) -> Result<()> {
    let mut last_ack = Instant::now() - ACK_EVERY;
    let mut last_heard = Instant::now();
    let libraries = crate::model::layout::libraries();
    loop {
        if !shared.repl.current(generation) || shared.shutting_down() {
            return Ok(());
        }
        if last_ack.elapsed() >= ACK_EVERY {
            ack(shared, l)?;
            last_ack = Instant::now();
        }
        let Some((kind, f)) = l.frame()? else {
            if last_heard.elapsed() > MASTER_TIMEOUT {
                return Err("the master sent nothing for a minute".into());
            }
            continue;
        };
        last_heard = Instant::now();
        shared.repl.heard(generation);
        match kind {
            Kind::Change => {
                let payload = &f[frame::HEADER..];
                let c = change::decode(payload).map_err(|e| e.to_string())?;
                let _guard = shared.repl.applying(generation).ok_or("retired")?;
                let (replid, offset) = shared.repl.position();
                let after = offset + f.len() as u64;
                let applied = shared
                    .ks
                    .apply(
                        &c,
                        payload,
                        &[(position_key(), position(&replid, after))],
                        || shared.repl.current(generation),
                    )
                    .map_err(|e| format!("applying the master's change: {e}"))?;
                if !applied {
                    return Ok(());
                }
                if c.records
                    .iter()
                    .any(|(k, _)| *k >= libraries.0 && *k < libraries.1)
                {
                    if let Err(e) = shared.scripts.restore(shared.ks.store()) {
                        log::warn!("the master's function libraries did not load: {e}");
                    }
                }
            }
            Kind::GetAck => {
                ack(shared, l)?;
                last_ack = Instant::now();
            }
            Kind::Heartbeat => {}
            Kind::Records | Kind::CopyEnd => {
                return Err("a copy's records arrived in the stream".into())
            }
        }
    }
}

fn ack(shared: &Shared, l: &mut Link_) -> Result<()> {
    let off = shared.repl.offset().to_string();
    l.send(&[b"REPLCONF", b"ACK", off.as_bytes()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_reads_back() {
        assert_eq!(
            parse_position(&position("abc", 42)),
            Some(("abc".to_string(), 42))
        );
        assert_eq!(parse_position(b"short"), None);
    }
}
