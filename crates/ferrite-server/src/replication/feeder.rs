//! The master's side of one replica's link, after its `PSYNC`: the copy
//! of the store (a full sync), then the stream, with heartbeats when
//! nothing is written; a second thread reads the replica's
//! acknowledgements (`REPLCONF ACK offset`).
//!
//! Invariants: the copy is a snapshot taken under the keyspace lock at
//! the offset `+FULLRESYNC` named, and the stream sent after it starts
//! at that offset (the replica was attached in the same hold of the
//! lock); a link that fails, or whose replica stops acknowledging for
//! [`REPL_TIMEOUT`], is detached and its threads end.

use std::io::{BufWriter, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use super::frame::{self, Kind};
use super::{is_local, Attached, Handoff};
use crate::request::{decode as decode_request, Limits};
use crate::shared::Shared;

/// A replica silent this long is dropped (Redis's `repl-timeout`).
pub const REPL_TIMEOUT: Duration = Duration::from_secs(60);

/// How often an idle stream says the master is alive.
const HEARTBEAT: Duration = Duration::from_secs(1);

/// Records per copy frame, at most about this many bytes.
const COPY_FRAME: usize = 1 << 20;

/// Takes over a replica's socket from the event loop: `pending` is what
/// the loop had not yet written to it, `input` what it had read past the
/// `PSYNC`.
pub fn start(shared: Arc<Shared>, h: Handoff, stream: TcpStream, pending: Vec<u8>, input: Vec<u8>) {
    let a = h.attached.clone();
    let name = format!("ferrite-feed-{}", a.id);
    let sh = shared.clone();
    let spawned = std::thread::Builder::new().name(name).spawn(move || {
        let peer = format!("{}:{}", a.ip, a.port);
        match feed(&sh, h, &stream, &pending, input) {
            Ok(()) => log::info!("replica {peer}: link closed"),
            Err(e) => log::warn!("replica {peer}: link failed: {e}"),
        }
        sh.repl.detach(&a);
        let _ = stream.shutdown(Shutdown::Both);
    });
    if let Err(e) = spawned {
        log::error!("cannot start a replica's link: {e}");
    }
}

fn feed(
    shared: &Arc<Shared>,
    h: Handoff,
    stream: &TcpStream,
    pending: &[u8],
    input: Vec<u8>,
) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    stream.set_write_timeout(Some(REPL_TIMEOUT))?;
    stream.set_read_timeout(Some(REPL_TIMEOUT))?;
    let a = h.attached;
    let reader = stream.try_clone()?;
    let (sh, ra) = (shared.clone(), a.clone());
    std::thread::Builder::new()
        .name(format!("ferrite-acks-{}", a.id))
        .spawn(move || {
            read_acks(&sh, &ra, reader, input);
            ra.drop_link();
        })?;
    let mut w = BufWriter::with_capacity(256 << 10, stream.try_clone()?);
    w.write_all(pending)?;
    if let Some(copy) = h.copy {
        send_copy(shared, &a, &copy, &mut w)?;
    }
    w.flush()?;
    a.online.store(true, std::sync::atomic::Ordering::Release);
    log::info!("replica {}:{} is online", a.ip, a.port);
    while !shared.shutting_down() && !a.is_dropped() {
        let frames = a.take(HEARTBEAT);
        if frames.is_empty() {
            let off = shared.repl.offset();
            w.write_all(&frame::encode(Kind::Heartbeat, &off.to_le_bytes()))?;
        }
        for f in frames {
            w.write_all(&f)?;
        }
        w.flush()?;
    }
    Ok(())
}

/// Sends the copy: every record but this node's own, in key order.
fn send_copy(
    shared: &Shared,
    a: &Attached,
    copy: &ferrite::Snapshot,
    w: &mut impl Write,
) -> std::io::Result<()> {
    let mut pairs = Vec::new();
    let mut bytes = 0;
    let (mut n, t0) = (0u64, std::time::Instant::now());
    for rec in copy.iter() {
        let (k, v) = rec.map_err(std::io::Error::other)?;
        if is_local(&k) {
            continue;
        }
        bytes += k.len() + v.len() + 8;
        n += 1;
        pairs.push((k, v));
        if bytes >= COPY_FRAME {
            w.write_all(&frame::encode(Kind::Records, &frame::records(&pairs)))?;
            pairs.clear();
            bytes = 0;
            if shared.shutting_down() || a.is_dropped() {
                return Err(std::io::Error::other("the copy was abandoned"));
            }
        }
    }
    w.write_all(&frame::encode(Kind::Records, &frame::records(&pairs)))?;
    w.write_all(&frame::encode(Kind::CopyEnd, &[]))?;
    log::info!(
        "replica {}:{}: copy of {n} records sent in {:.1} s",
        a.ip,
        a.port,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Reads `REPLCONF ACK offset` commands until the link ends.
fn read_acks(shared: &Shared, a: &Attached, mut s: TcpStream, mut buf: Vec<u8>) {
    let limits = Limits::default();
    let mut chunk = vec![0u8; 4096];
    loop {
        loop {
            match decode_request(&buf, &limits) {
                Ok(Some((args, used))) => {
                    buf.drain(..used);
                    let is = |i: usize, w: &str| {
                        args.get(i)
                            .is_some_and(|x| x.eq_ignore_ascii_case(w.as_bytes()))
                    };
                    if is(0, "replconf") && is(1, "ack") {
                        if let Some(off) = args
                            .get(2)
                            .and_then(|x| std::str::from_utf8(x).ok())
                            .and_then(|x| x.parse::<u64>().ok())
                        {
                            shared.repl.ack(a, off);
                        }
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    log::warn!("replica {}:{}: {e}", a.ip, a.port);
                    return;
                }
            }
        }
        if a.is_dropped() {
            return;
        }
        match s.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            // A replica loading a long copy does not acknowledge yet.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) && !a.online.load(std::sync::atomic::Ordering::Acquire) => {}
            Err(_) => return,
        }
    }
}
