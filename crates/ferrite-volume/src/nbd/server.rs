//! The server: listeners, the handshake, and each connection's
//! transmission phase.
//!
//! A connection's reader thread decodes requests (and reads write
//! payloads) and hands them to a pool of `queue_depth` workers, so one
//! client's commands run concurrently, as NBD allows; replies go out
//! whole under the connection's write lock, in completion order. Anything
//! a client sends that the protocol forbids closes that client's
//! connection only; a command that fails gets its error number.
//!
//! Multi-conn is offered: a flush on any connection syncs every write
//! completed on all of them (the volume's flush is global), which is what
//! `NBD_FLAG_CAN_MULTI_CONN` promises.

use std::io::{BufWriter, ErrorKind, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ferrite_io::AlignedBuf;
use ferrite_net::{Blocking as Stream, Listeners};
use parking_lot::Mutex;

use super::protocol::*;
use crate::error::{errno, Result, VolumeError};
use crate::volume::{Volume, MAX_REQUEST, MIN_IO};

/// How often the acceptor looks at the stop flag.
const ACCEPT_TICK: Duration = Duration::from_millis(10);
/// How often a blocked read looks at the stop flag.
const READ_TICK: Duration = Duration::from_millis(250);
/// A client must finish the handshake within this.
const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(30);
/// Options one handshake may send before the server gives up on it.
const MAX_OPTIONS: usize = 64;
/// Payload of an oversized write the server still reads and discards
/// (to answer it with an error and keep the connection); beyond this it
/// closes the connection.
const MAX_DISCARD: u32 = 64 << 20;
const PREFERRED_BLOCK: u32 = 4096;

/// How the server is reached and what it offers.
#[derive(Debug, Clone)]
pub struct NbdConfig {
    /// TCP address (loopback by default); `None` for a Unix socket only.
    pub listen: Option<SocketAddr>,
    pub unix: Option<PathBuf>,
    /// The export's name (an empty name from a client also selects it).
    pub export: String,
    pub description: String,
    /// Commands one connection runs at once.
    pub queue_depth: usize,
}

impl Default for NbdConfig {
    fn default() -> Self {
        Self {
            listen: Some(SocketAddr::from(([127, 0, 0, 1], 10809))),
            unix: None,
            export: "ferrite".into(),
            description: "ferrite volume (RASK block map)".into(),
            queue_depth: 16,
        }
    }
}

struct Shared {
    volume: Arc<Volume>,
    config: NbdConfig,
    stop: Arc<AtomicBool>,
}

/// A running NBD server.
pub struct NbdServer {
    shared: Arc<Shared>,
    local: Option<SocketAddr>,
    accept: Option<JoinHandle<Vec<JoinHandle<()>>>>,
}

fn io(what: &str) -> impl FnOnce(std::io::Error) -> VolumeError + '_ {
    move |source| VolumeError::Io {
        what: what.to_string(),
        source,
    }
}

impl NbdServer {
    /// Binds the listeners and starts serving `volume`.
    pub fn start(volume: Arc<Volume>, config: NbdConfig) -> Result<Self> {
        let mut listeners =
            Listeners::bind(config.listen, config.unix.as_deref()).map_err(VolumeError::Listen)?;
        let local = listeners.local_addr();
        let shared = Arc::new(Shared {
            volume,
            config,
            stop: Arc::new(AtomicBool::new(false)),
        });
        let sh = shared.clone();
        let accept = std::thread::Builder::new()
            .name("nbd-accept".into())
            .spawn(move || accept_loop(&sh, &mut listeners))
            .map_err(io("starting the accept thread"))?;
        Ok(Self {
            shared,
            local,
            accept: Some(accept),
        })
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local
    }

    /// The flag that stops the server when set (for signal handlers).
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.shared.stop.clone()
    }

    pub fn shutdown(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
    }

    /// Waits until the server stops (every connection finished its
    /// commands), then flushes the volume.
    pub fn wait(mut self) -> Result<()> {
        if let Some(h) = self.accept.take() {
            for c in h.join().unwrap_or_default() {
                let _ = c.join();
            }
        }
        if let Some(path) = &self.shared.config.unix {
            let _ = std::fs::remove_file(path);
        }
        self.shared.volume.flush()
    }
}

/// Makes SIGINT and SIGTERM stop `server` cleanly; a second signal exits
/// at once (the volume recovers what was flushed).
pub fn stop_on_signals(server: &NbdServer) -> Result<()> {
    let stop = server.stop_flag();
    for sig in signal_hook::consts::TERM_SIGNALS {
        signal_hook::flag::register_conditional_shutdown(*sig, 130, stop.clone())
            .map_err(io("installing a signal handler"))?;
        signal_hook::flag::register(*sig, stop.clone())
            .map_err(io("installing a signal handler"))?;
    }
    Ok(())
}

fn accept_loop(shared: &Arc<Shared>, listeners: &mut Listeners) -> Vec<JoinHandle<()>> {
    let mut conns: Vec<JoinHandle<()>> = Vec::new();
    let mut id = 0u64;
    while !shared.stop.load(Ordering::SeqCst) {
        conns.retain(|c| !c.is_finished());
        listeners.accept(ACCEPT_TICK, |s| {
            let stream = match s.into_blocking() {
                Ok(s) => s,
                Err(e) => return log::warn!("nbd accept: {e}"),
            };
            id += 1;
            let sh = shared.clone();
            match std::thread::Builder::new()
                .name(format!("nbd-conn-{id}"))
                .spawn(move || connection(stream, &sh))
            {
                Ok(h) => conns.push(h),
                Err(e) => log::warn!("no thread for NBD connection {id}: {e}"),
            }
        });
    }
    conns
}

/// Fills `buf`, looking at the stop flag between reads. `Ok(false)` is a
/// clean end of stream before the first byte.
fn read_full(
    s: &mut Stream,
    buf: &mut [u8],
    stop: &AtomicBool,
    deadline: Option<Instant>,
) -> std::io::Result<bool> {
    use std::io::Read;
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if stop.load(Ordering::SeqCst) {
                    return Err(ErrorKind::Interrupted.into());
                }
                if deadline.is_some_and(|d| Instant::now() > d) {
                    return Err(ErrorKind::TimedOut.into());
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

fn connection(mut stream: Stream, sh: &Arc<Shared>) {
    if stream.set_read_timeout(Some(READ_TICK)).is_err() {
        return;
    }
    match handshake(&mut stream, sh) {
        Ok(true) => {}
        Ok(false) => {
            let _ = stream.shutdown();
            return;
        }
        Err(e) => {
            log::debug!("nbd handshake ended: {e}");
            let _ = stream.shutdown();
            return;
        }
    }
    if let Err(e) = transmit(stream, sh) {
        log::debug!("nbd connection ended: {e}");
    }
}

fn transmission_flags() -> u16 {
    TFLAG_HAS_FLAGS
        | TFLAG_SEND_FLUSH
        | TFLAG_SEND_FUA
        | TFLAG_SEND_TRIM
        | TFLAG_SEND_WRITE_ZEROES
        | TFLAG_CAN_MULTI_CONN
}

fn option_reply(s: &mut Stream, opt: u32, kind: u32, data: &[u8]) -> std::io::Result<()> {
    let mut b = Vec::with_capacity(20 + data.len());
    b.extend_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
    b.extend_from_slice(&opt.to_be_bytes());
    b.extend_from_slice(&kind.to_be_bytes());
    b.extend_from_slice(&(data.len() as u32).to_be_bytes());
    b.extend_from_slice(data);
    s.write_all(&b)
}

/// Runs option haggling; true when the client entered transmission.
fn handshake(s: &mut Stream, sh: &Shared) -> std::io::Result<bool> {
    let deadline = Some(Instant::now() + HANDSHAKE_DEADLINE);
    let stop = &sh.stop;
    let mut hello = Vec::with_capacity(18);
    hello.extend_from_slice(&NBD_MAGIC.to_be_bytes());
    hello.extend_from_slice(&IHAVEOPT.to_be_bytes());
    hello.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    s.write_all(&hello)?;
    let mut cf = [0u8; 4];
    if !read_full(s, &mut cf, stop, deadline)? {
        return Ok(false);
    }
    let client_flags = u32::from_be_bytes(cf);
    if client_flags & !CLIENT_FLAGS_KNOWN != 0 {
        return Ok(false);
    }
    let no_zeroes = client_flags & FLAG_NO_ZEROES as u32 != 0;
    let export = sh.config.export.as_bytes();
    let name_ok = |n: &[u8]| n.is_empty() || n == export;
    let size = sh.volume.size();
    for _ in 0..MAX_OPTIONS {
        let mut h = [0u8; 16];
        if !read_full(s, &mut h, stop, deadline)? {
            return Ok(false);
        }
        let magic = u64::from_be_bytes(h[0..8].try_into().unwrap_or_default());
        let opt = u32::from_be_bytes(h[8..12].try_into().unwrap_or_default());
        let len = u32::from_be_bytes(h[12..16].try_into().unwrap_or_default());
        if magic != IHAVEOPT || len > MAX_OPTION_LEN {
            return Ok(false);
        }
        let mut data = vec![0u8; len as usize];
        if !data.is_empty() && !read_full(s, &mut data, stop, deadline)? {
            return Ok(false);
        }
        match opt {
            OPT_EXPORT_NAME => {
                if !name_ok(&data) {
                    return Ok(false);
                }
                let mut b = Vec::with_capacity(134);
                b.extend_from_slice(&size.to_be_bytes());
                b.extend_from_slice(&transmission_flags().to_be_bytes());
                if !no_zeroes {
                    b.extend_from_slice(&[0u8; 124]);
                }
                s.write_all(&b)?;
                return Ok(true);
            }
            OPT_ABORT => {
                option_reply(s, opt, REP_ACK, &[])?;
                return Ok(false);
            }
            OPT_LIST => {
                if !data.is_empty() {
                    option_reply(s, opt, REP_ERR_INVALID, &[])?;
                    continue;
                }
                let mut b = Vec::with_capacity(4 + export.len());
                b.extend_from_slice(&(export.len() as u32).to_be_bytes());
                b.extend_from_slice(export);
                option_reply(s, opt, REP_SERVER, &b)?;
                option_reply(s, opt, REP_ACK, &[])?;
            }
            OPT_INFO | OPT_GO => {
                let req = match parse_info_request(&data) {
                    Ok(r) => r,
                    Err(_) => {
                        option_reply(s, opt, REP_ERR_INVALID, &[])?;
                        continue;
                    }
                };
                if !name_ok(&req.name) {
                    option_reply(s, opt, REP_ERR_UNKNOWN, b"no such export")?;
                    continue;
                }
                let mut b = Vec::with_capacity(12);
                b.extend_from_slice(&INFO_EXPORT.to_be_bytes());
                b.extend_from_slice(&size.to_be_bytes());
                b.extend_from_slice(&transmission_flags().to_be_bytes());
                option_reply(s, opt, REP_INFO, &b)?;
                let mut b = Vec::with_capacity(14);
                b.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
                b.extend_from_slice(&(MIN_IO as u32).to_be_bytes());
                b.extend_from_slice(&PREFERRED_BLOCK.to_be_bytes());
                b.extend_from_slice(&(MAX_REQUEST as u32).to_be_bytes());
                option_reply(s, opt, REP_INFO, &b)?;
                for item in &req.items {
                    let text = match *item {
                        INFO_NAME => export,
                        INFO_DESCRIPTION => sh.config.description.as_bytes(),
                        _ => continue,
                    };
                    let mut b = Vec::with_capacity(2 + text.len());
                    b.extend_from_slice(&item.to_be_bytes());
                    b.extend_from_slice(text);
                    option_reply(s, opt, REP_INFO, &b)?;
                }
                option_reply(s, opt, REP_ACK, &[])?;
                if opt == OPT_GO {
                    return Ok(true);
                }
            }
            _ => option_reply(s, opt, REP_ERR_UNSUP, &[])?,
        }
    }
    Ok(false)
}

/// A command handed to a worker, with a write's payload.
struct Work {
    req: Request,
    payload: Option<AlignedBuf>,
    /// Set when the reader already knows the answer (an oversized write
    /// whose payload it discarded).
    early_error: Option<u32>,
}

type Replies = Arc<Mutex<BufWriter<Stream>>>;

fn transmit(mut stream: Stream, sh: &Arc<Shared>) -> std::io::Result<()> {
    let replies: Replies = Arc::new(Mutex::new(BufWriter::with_capacity(
        256 << 10,
        stream.try_clone()?,
    )));
    let depth = sh.config.queue_depth.max(1);
    let (tx, rx) = crossbeam_channel::bounded::<Work>(depth);
    let workers: Vec<_> = (0..depth)
        .filter_map(|i| {
            let (rx, sh, replies) = (rx.clone(), sh.clone(), replies.clone());
            std::thread::Builder::new()
                .name(format!("nbd-worker-{i}"))
                .spawn(move || {
                    for w in rx {
                        let (err, data) = execute(&sh.volume, &w);
                        if reply(&replies, w.req.cookie, err, data.as_deref()).is_err() {
                            break;
                        }
                    }
                })
                .ok()
        })
        .collect();
    drop(rx);
    let result = read_requests(&mut stream, sh, &tx);
    drop(tx);
    for w in workers {
        let _ = w.join();
    }
    let _ = stream.shutdown();
    result
}

fn read_requests(
    stream: &mut Stream,
    sh: &Shared,
    tx: &crossbeam_channel::Sender<Work>,
) -> std::io::Result<()> {
    loop {
        let mut h = [0u8; REQUEST_LEN];
        if !read_full(stream, &mut h, &sh.stop, None)? {
            return Ok(());
        }
        let req = match decode_request(&h) {
            Ok(r) => r,
            Err(e) => return Err(std::io::Error::new(ErrorKind::InvalidData, e.to_string())),
        };
        let mut work = Work {
            req,
            payload: None,
            early_error: None,
        };
        match req.command {
            Command::Disconnect => return Ok(()),
            Command::Write if req.length as u64 > MAX_REQUEST => {
                if req.length > MAX_DISCARD {
                    return Err(std::io::Error::new(
                        ErrorKind::InvalidData,
                        "write payload over the discard limit",
                    ));
                }
                let mut sink = vec![0u8; req.length as usize];
                read_full(stream, &mut sink, &sh.stop, None)?;
                work.early_error = Some(errno::EINVAL);
            }
            Command::Write => {
                let mut buf = AlignedBuf::zeroed(req.length as usize);
                if req.length > 0 && !read_full(stream, &mut buf, &sh.stop, None)? {
                    return Err(ErrorKind::UnexpectedEof.into());
                }
                work.payload = Some(buf);
            }
            _ => {}
        }
        if tx.send(work).is_err() {
            return Ok(());
        }
    }
}

/// Runs one command; the error number (0 for success) and a read's data.
fn execute(vol: &Volume, w: &Work) -> (u32, Option<AlignedBuf>) {
    if let Some(e) = w.early_error {
        return (e, None);
    }
    let req = &w.req;
    let (off, len) = (req.offset, req.length as u64);
    let inside = off.checked_add(len).is_some_and(|end| end <= vol.size());
    let fail = |e: VolumeError| {
        let n = e.nbd_errno();
        if n == errno::EIO {
            log::warn!("nbd {:?} at {off}+{len}: {e}", req.command);
        }
        n
    };
    let done = |r: Result<()>| (r.err().map_or(0, fail), None);
    match req.command {
        Command::Read => {
            if !inside || len > MAX_REQUEST {
                return (errno::EINVAL, None);
            }
            let mut buf = AlignedBuf::zeroed(len as usize);
            match vol.read(off, &mut buf) {
                Ok(()) => (0, Some(buf)),
                Err(e) => (fail(e), None),
            }
        }
        Command::Write => {
            if !inside {
                return (errno::ENOSPC, None);
            }
            let data = w.payload.as_deref().unwrap_or(&[]);
            done(vol.write(off, data, req.fua()))
        }
        Command::Flush => done(vol.flush()),
        Command::Trim => {
            if !inside {
                return (errno::EINVAL, None);
            }
            done(vol.trim(off, len, req.fua()))
        }
        Command::WriteZeroes => {
            if !inside {
                return (errno::ENOSPC, None);
            }
            done(vol.write_zeroes(off, len, req.no_hole(), req.fua()))
        }
        Command::Disconnect | Command::Other(_) => (errno::EINVAL, None),
    }
}

fn reply(replies: &Replies, cookie: u64, err: u32, data: Option<&[u8]>) -> std::io::Result<()> {
    let mut h = [0u8; 16];
    h[0..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    h[4..8].copy_from_slice(&err.to_be_bytes());
    h[8..16].copy_from_slice(&cookie.to_be_bytes());
    let mut w = replies.lock();
    w.write_all(&h)?;
    if err == 0 {
        if let Some(d) = data {
            w.write_all(d)?;
        }
    }
    w.flush()
}
