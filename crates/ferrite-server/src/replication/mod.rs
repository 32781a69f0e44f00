//! Replication: a master streams every committed change to its replicas;
//! a replica copies the master's store once (a full sync) and then
//! applies the stream, continuing from its offset after a short break
//! (a partial sync out of the backlog). Wire format and handshake:
//! `docs/format/replication.md`.
//!
//! | file | owns |
//! |---|---|
//! | `frame` | the stream's frames (pure) |
//! | `backlog` | the last bytes of the stream, for partial syncs (pure) |
//! | `feeder` | the master's side of one replica's link: copy, stream, acknowledgements |
//! | `follower` | a replica's link to its master: handshake, load, apply, acknowledge |
//!
//! [`Replication`] is what both sides share: the replication id and
//! offset, the backlog, the attached replicas with their acknowledged
//! offsets, the master this node follows, and the clients in `WAIT`.
//!
//! Invariants:
//! - the stream is the keyspace's commits in commit order: a change is
//!   appended to the backlog and to every attached replica's outbox
//!   under the keyspace lock, so a full sync's copy (taken while the lock
//!   is held) and the offset given with it are one point of the stream;
//! - a replica's offset counts the change frames it applied, the same
//!   bytes as its master's, so after a failover the other replicas
//!   continue on the promoted one (whose previous id is kept as `replid2`
//!   up to the offset where it was promoted, as Redis does);
//! - a replica's position (id, offset) is written in the same batch as
//!   the change that moves it, so after a crash it asks for exactly the
//!   next change;
//! - an attached replica whose outbox passes [`OUTBOX_LIMIT`] is dropped
//!   (it will sync again), so a slow replica never holds the master's
//!   memory without bound.

pub mod backlog;
pub mod feeder;
pub mod follower;
pub mod frame;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::mailbox::Mailbox;
use crate::model::{layout, ChangeFeed};
use crate::reply::Reply;

use backlog::Backlog;

/// Default backlog: 64 MiB of the stream (Redis defaults to 1 MiB of a
/// much terser stream of commands).
pub const BACKLOG_BYTES: usize = 64 << 20;

/// A replica's unsent stream past this drops it (Redis's
/// `client-output-buffer-limit replica 256mb`).
pub const OUTBOX_LIMIT: usize = 256 << 20;

/// The store record holding a replica's position: id, then offset.
pub fn position_key() -> Vec<u8> {
    layout::server("replication")
}

/// The store record naming the master this node follows (kept across
/// restarts, as `CONFIG REWRITE` keeps `replicaof` in Redis's file).
pub fn master_key() -> Vec<u8> {
    layout::server("replicaof")
}

/// The store record saying a copy is being loaded (part of the master's
/// records, none of its own): until a copy completes, clients are
/// answered `LOADING`, across restarts too.
pub fn copying_key() -> Vec<u8> {
    layout::server("replication-copying")
}

/// Records that belong to one node and never travel in a copy.
pub fn is_local(key: &[u8]) -> bool {
    key == position_key().as_slice()
        || key == master_key().as_slice()
        || key == copying_key().as_slice()
}

/// A fresh 40-hex-digit replication id.
pub fn new_id() -> String {
    (0..40)
        .map(|_| char::from_digit(rand::random::<u32>() % 16, 16).unwrap_or('0'))
        .collect()
}

/// What a `PSYNC` leaves for the event loop to hand over with the socket.
pub struct Handoff {
    pub attached: Arc<Attached>,
    /// The store as of the `+FULLRESYNC` offset, for a full sync.
    pub copy: Option<ferrite::Snapshot>,
}

/// A replica attached to this node.
pub struct Attached {
    pub id: u64,
    pub ip: String,
    /// The port it listens on (`REPLCONF listening-port`).
    pub port: u16,
    outbox: Mutex<Outbox>,
    ready: Condvar,
    /// The offset it acknowledged last, and when (ms since the epoch).
    ack: AtomicU64,
    ack_ms: AtomicU64,
    /// Copy sent: it is streaming.
    online: AtomicBool,
    /// Dropped (outbox overflow, shutdown, its link failed).
    dropped: AtomicBool,
}

#[derive(Default)]
struct Outbox {
    frames: VecDeque<Arc<Vec<u8>>>,
    bytes: usize,
}

impl Attached {
    fn push(&self, f: Arc<Vec<u8>>) {
        let mut o = self.outbox.lock();
        if self.dropped.load(Ordering::Acquire) {
            return;
        }
        o.bytes += f.len();
        o.frames.push_back(f);
        if o.bytes > OUTBOX_LIMIT {
            log::warn!(
                "replica {}:{} fell {} bytes behind; dropping it (it will sync again)",
                self.ip,
                self.port,
                o.bytes
            );
            o.frames.clear();
            o.bytes = 0;
            self.dropped.store(true, Ordering::Release);
        }
        drop(o);
        self.ready.notify_one();
    }

    /// The frames waiting, or none after `wait`.
    fn take(&self, wait: Duration) -> Vec<Arc<Vec<u8>>> {
        let mut o = self.outbox.lock();
        if o.frames.is_empty() && !self.dropped.load(Ordering::Acquire) {
            self.ready.wait_for(&mut o, wait);
        }
        o.bytes = 0;
        o.frames.drain(..).collect()
    }

    pub fn drop_link(&self) {
        self.dropped.store(true, Ordering::Release);
        self.ready.notify_one();
    }

    pub fn is_dropped(&self) -> bool {
        self.dropped.load(Ordering::Acquire)
    }

    pub fn acked(&self) -> u64 {
        self.ack.load(Ordering::Acquire)
    }
}

/// The state of a replica's link to its master, as `INFO` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    Connecting,
    /// Receiving the copy.
    Sync,
    Connected,
}

/// The master this node follows.
#[derive(Debug, Clone)]
pub struct Following {
    pub host: String,
    pub port: u16,
    pub link: Link,
    /// The follower thread that owns this link (a newer `REPLICAOF`
    /// retires older ones).
    pub generation: u64,
    pub last_io: Instant,
    pub down_since: Option<Instant>,
}

struct State {
    replid: String,
    replid2: String,
    /// The last offset `replid2` is valid to, if any.
    second_offset: Option<u64>,
    backlog: Backlog,
    replicas: Vec<Arc<Attached>>,
    following: Option<Following>,
    generation: u64,
}

/// A client in `WAIT numreplicas timeout`.
struct Waiting {
    client: u64,
    target: u64,
    replicas: usize,
    mailbox: Arc<Mailbox>,
}

/// What a `PSYNC` gets.
pub enum Sync {
    /// `+CONTINUE id`: the attached replica's outbox holds the rest.
    Continue(String),
    /// `+FULLRESYNC id offset`: a copy follows.
    Full(String, u64),
}

/// Replication state shared by the server; see the module documentation.
pub struct Replication {
    st: Mutex<State>,
    /// Whether commits are streamed (a replica has attached, or this
    /// node is a replica itself).
    wanted: AtomicBool,
    waiting: Mutex<Vec<Waiting>>,
    /// Held by a follower while it writes to the store, so a retired
    /// follower's last write comes before its successor's first.
    applying: Mutex<()>,
    /// Full syncs served, partial syncs served, and partial syncs asked
    /// for that became full ones (`INFO stats`).
    sync_full: AtomicU64,
    sync_partial_ok: AtomicU64,
    sync_partial_err: AtomicU64,
    /// The port this node's clients reach it on (told to its master).
    pub listening_port: AtomicU16,
    /// What a `PSYNC` left for its connection's loop to hand over with
    /// the socket, by client id.
    handoffs: Mutex<Vec<(u64, Handoff)>>,
}

impl Replication {
    /// A master's state, with a fresh id and an empty stream at offset 0.
    pub fn new(backlog_bytes: usize) -> Self {
        Self {
            st: Mutex::new(State {
                replid: new_id(),
                replid2: "0".repeat(40),
                second_offset: None,
                backlog: Backlog::new(backlog_bytes, 0),
                replicas: Vec::new(),
                following: None,
                generation: 0,
            }),
            wanted: AtomicBool::new(false),
            waiting: Mutex::new(Vec::new()),
            handoffs: Mutex::new(Vec::new()),
            applying: Mutex::new(()),
            sync_full: AtomicU64::new(0),
            sync_partial_ok: AtomicU64::new(0),
            sync_partial_err: AtomicU64::new(0),
            listening_port: AtomicU16::new(0),
        }
    }

    /// The stream's id and offset.
    pub fn position(&self) -> (String, u64) {
        let st = self.st.lock();
        (st.replid.clone(), st.backlog.end())
    }

    pub fn offset(&self) -> u64 {
        self.st.lock().backlog.end()
    }

    pub fn following(&self) -> Option<Following> {
        self.st.lock().following.clone()
    }

    pub fn is_replica(&self) -> bool {
        self.st.lock().following.is_some()
    }

    /// Starts following `host:port` (the caller starts the follower with
    /// the generation returned); `None` if it already does.
    pub fn follow(&self, host: &str, port: u16) -> Option<u64> {
        let mut st = self.st.lock();
        if st
            .following
            .as_ref()
            .is_some_and(|f| f.host == host && f.port == port)
        {
            return None;
        }
        st.generation += 1;
        st.following = Some(Following {
            host: host.to_string(),
            port,
            link: Link::Connecting,
            generation: st.generation,
            last_io: Instant::now(),
            down_since: Some(Instant::now()),
        });
        self.wanted.store(true, Ordering::Release);
        Some(st.generation)
    }

    /// Stops following (`REPLICAOF NO ONE`): this node's stream goes on
    /// under a new id, the old one kept as `replid2` up to here, so the
    /// other replicas of the old master continue on this one.
    pub fn promote(&self) -> bool {
        let mut st = self.st.lock();
        if st.following.take().is_none() {
            return false;
        }
        st.generation += 1;
        st.replid2 = std::mem::replace(&mut st.replid, new_id());
        st.second_offset = Some(st.backlog.end());
        true
    }

    /// Whether a follower of `generation` is still the current one.
    pub fn current(&self, generation: u64) -> bool {
        self.st
            .lock()
            .following
            .as_ref()
            .is_some_and(|f| f.generation == generation)
    }

    /// The right to write to the store for the follower of
    /// `generation`, if it is still current.
    pub fn applying(&self, generation: u64) -> Option<parking_lot::MutexGuard<'_, ()>> {
        let g = self.applying.lock();
        self.current(generation).then_some(g)
    }

    /// A follower reports its link's state.
    pub fn set_link(&self, generation: u64, link: Option<Link>) {
        let mut st = self.st.lock();
        if let Some(f) = st.following.as_mut().filter(|f| f.generation == generation) {
            match link {
                Some(l) => {
                    f.link = l;
                    if l == Link::Connected {
                        f.down_since = None;
                    }
                }
                None => {
                    f.link = Link::Connecting;
                    f.down_since.get_or_insert_with(Instant::now);
                }
            }
            f.last_io = Instant::now();
        }
    }

    /// A follower heard from its master.
    pub fn heard(&self, generation: u64) {
        let mut st = self.st.lock();
        if let Some(f) = st.following.as_mut().filter(|f| f.generation == generation) {
            f.last_io = Instant::now();
        }
    }

    /// After a full sync (or at start from a stored position): the
    /// stream is `replid` at `offset`, the backlog empty.
    pub fn reset(&self, replid: &str, offset: u64) {
        let mut st = self.st.lock();
        st.replid = replid.to_string();
        st.replid2 = "0".repeat(40);
        st.second_offset = None;
        st.backlog.reset(offset);
    }

    /// `+CONTINUE` named another id (the master was promoted): adopt it,
    /// keeping ours as `replid2`.
    pub fn adopt(&self, replid: &str) {
        let mut st = self.st.lock();
        if st.replid != replid {
            st.replid2 = std::mem::replace(&mut st.replid, replid.to_string());
            st.second_offset = Some(st.backlog.end());
        }
    }

    /// Answers a replica's `PSYNC replid offset` (offset: the first byte
    /// it wants, 1-based as in Redis; `? -1` asks for a copy) and
    /// attaches it. The caller holds the keyspace lock, so no commit
    /// lands between this answer and the copy it takes for a full sync.
    pub fn attach(
        &self,
        id: u64,
        ip: String,
        port: u16,
        replid: &str,
        offset: i64,
    ) -> (Sync, Arc<Attached>) {
        let mut st = self.st.lock();
        self.wanted.store(true, Ordering::Release);
        let a = Arc::new(Attached {
            id,
            ip,
            port,
            outbox: Mutex::new(Outbox::default()),
            ready: Condvar::new(),
            ack: AtomicU64::new(0),
            ack_ms: AtomicU64::new(crate::model::now_ms()),
            online: AtomicBool::new(false),
            dropped: AtomicBool::new(false),
        });
        let from = (offset - 1).max(0) as u64;
        let known = offset > 0
            && (replid == st.replid
                || (replid == st.replid2 && st.second_offset.is_some_and(|s| from <= s)));
        let sync = match known.then(|| st.backlog.since(from)).flatten() {
            Some(rest) => {
                a.ack.store(from, Ordering::Release);
                if !rest.is_empty() {
                    a.push(Arc::new(rest));
                }
                self.sync_partial_ok.fetch_add(1, Ordering::Relaxed);
                Sync::Continue(st.replid.clone())
            }
            None => {
                self.sync_full.fetch_add(1, Ordering::Relaxed);
                if replid != "?" {
                    self.sync_partial_err.fetch_add(1, Ordering::Relaxed);
                }
                Sync::Full(st.replid.clone(), st.backlog.end())
            }
        };
        st.replicas.push(a.clone());
        (sync, a)
    }

    /// Syncs served: full, partial, partial asked for but not possible.
    pub fn syncs(&self) -> (u64, u64, u64) {
        (
            self.sync_full.load(Ordering::Relaxed),
            self.sync_partial_ok.load(Ordering::Relaxed),
            self.sync_partial_err.load(Ordering::Relaxed),
        )
    }

    /// Keeps what a `PSYNC` prepared until the client's loop takes it.
    pub fn leave_handoff(&self, client: u64, h: Handoff) {
        self.handoffs.lock().push((client, h));
    }

    /// What a `PSYNC` of `client` left, if anything.
    pub fn take_handoff(&self, client: u64) -> Option<Handoff> {
        let mut all = self.handoffs.lock();
        let at = all.iter().position(|(id, _)| *id == client)?;
        Some(all.swap_remove(at).1)
    }

    /// Forgets a replica whose link ended.
    pub fn detach(&self, a: &Arc<Attached>) {
        a.drop_link();
        self.st.lock().replicas.retain(|r| !Arc::ptr_eq(r, a));
        self.wake_waiting();
    }

    /// Drops every attached replica (shutdown).
    pub fn drop_all(&self) {
        for r in self.st.lock().replicas.iter() {
            r.drop_link();
        }
    }

    pub fn replicas(&self) -> Vec<Arc<Attached>> {
        self.st.lock().replicas.clone()
    }

    /// A replica acknowledged `offset`.
    pub fn ack(&self, a: &Attached, offset: u64) {
        a.ack.fetch_max(offset, Ordering::AcqRel);
        a.ack_ms.store(crate::model::now_ms(), Ordering::Release);
        self.wake_waiting();
    }

    /// Replicas that acknowledged `target` or later.
    pub fn acked(&self, target: u64) -> usize {
        self.st
            .lock()
            .replicas
            .iter()
            .filter(|r| r.online.load(Ordering::Acquire) && r.acked() >= target)
            .count()
    }

    /// Asks every replica for an acknowledgement now (`WAIT`).
    pub fn request_acks(&self) {
        let f = Arc::new(frame::encode(frame::Kind::GetAck, &[]));
        for r in self.st.lock().replicas.iter() {
            r.push(f.clone());
        }
    }

    /// Registers a client in `WAIT` (answered by [`Self::ack`] or its
    /// deadline).
    pub fn wait(&self, client: u64, target: u64, replicas: usize, mailbox: Arc<Mailbox>) {
        self.waiting.lock().push(Waiting {
            client,
            target,
            replicas,
            mailbox,
        });
        self.wake_waiting();
    }

    /// Takes a client's `WAIT` (its deadline passed, it left): the count
    /// to answer with, if it still waited.
    pub fn take_wait(&self, client: u64) -> Option<usize> {
        let mut w = self.waiting.lock();
        let i = w.iter().position(|x| x.client == client)?;
        let x = w.swap_remove(i);
        drop(w);
        Some(self.acked(x.target))
    }

    fn wake_waiting(&self) {
        let mut w = self.waiting.lock();
        if w.is_empty() {
            return;
        }
        let mut i = 0;
        while i < w.len() {
            let n = self.acked(w[i].target);
            if n >= w[i].replicas {
                let x = w.swap_remove(i);
                let mut bytes = Vec::new();
                Reply::Int(n as i64).encode(x.mailbox.proto(), &mut bytes);
                x.mailbox.serve(&bytes);
            } else {
                i += 1;
            }
        }
    }

    /// `INFO replication`'s body.
    pub fn info(&self) -> String {
        use std::fmt::Write;
        let st = self.st.lock();
        let mut out = String::from("# Replication\r\n");
        let now = crate::model::now_ms();
        match &st.following {
            None => out.push_str("role:master\r\n"),
            Some(f) => {
                let up = f.link == Link::Connected;
                let _ =
                    write!(
                    out,
                    "role:slave\r\nmaster_host:{}\r\nmaster_port:{}\r\nmaster_link_status:{}\r\n\
                     master_last_io_seconds_ago:{}\r\nmaster_sync_in_progress:{}\r\n\
                     slave_read_repl_offset:{off}\r\nslave_repl_offset:{off}\r\n",
                    f.host,
                    f.port,
                    if up { "up" } else { "down" },
                    if up { f.last_io.elapsed().as_secs() as i64 } else { -1 },
                    u8::from(f.link == Link::Sync),
                    off = st.backlog.end(),
                );
                if let Some(d) = f.down_since {
                    let _ = write!(
                        out,
                        "master_link_down_since_seconds:{}\r\n",
                        d.elapsed().as_secs()
                    );
                }
                out.push_str("slave_priority:100\r\nslave_read_only:1\r\nreplica_announced:1\r\n");
            }
        }
        let online: Vec<&Arc<Attached>> = st.replicas.iter().filter(|r| !r.is_dropped()).collect();
        let _ = write!(out, "connected_slaves:{}\r\n", online.len());
        for (i, r) in online.iter().enumerate() {
            let state = if r.online.load(Ordering::Acquire) {
                "online"
            } else {
                "wait_bgsave"
            };
            let lag = now.saturating_sub(r.ack_ms.load(Ordering::Acquire)) / 1000;
            let _ = write!(
                out,
                "slave{i}:ip={},port={},state={state},offset={},lag={lag}\r\n",
                r.ip,
                r.port,
                r.acked()
            );
        }
        let _ = write!(
            out,
            "master_failover_state:no-failover\r\nmaster_replid:{}\r\nmaster_replid2:{}\r\n\
             master_repl_offset:{}\r\nsecond_repl_offset:{}\r\nrepl_backlog_active:{}\r\n\
             repl_backlog_size:{}\r\nrepl_backlog_first_byte_offset:{}\r\nrepl_backlog_histlen:{}\r\n\r\n",
            st.replid,
            st.replid2,
            st.backlog.end(),
            st.second_offset.map_or(-1, |s| s as i64 + 1),
            u8::from(self.wanted.load(Ordering::Acquire)),
            BACKLOG_BYTES,
            st.backlog.start() + 1,
            st.backlog.len(),
        );
        out
    }

    /// `ROLE`'s reply.
    pub fn role(&self) -> Reply {
        let st = self.st.lock();
        let off = st.backlog.end() as i64;
        match &st.following {
            None => Reply::Array(vec![
                Reply::bulk("master"),
                Reply::Int(off),
                Reply::Array(
                    st.replicas
                        .iter()
                        .filter(|r| r.online.load(Ordering::Acquire))
                        .map(|r| {
                            Reply::Array(vec![
                                Reply::bulk(r.ip.as_str()),
                                Reply::bulk(r.port.to_string()),
                                Reply::bulk(r.acked().to_string()),
                            ])
                        })
                        .collect(),
                ),
            ]),
            Some(f) => Reply::Array(vec![
                Reply::bulk("slave"),
                Reply::bulk(f.host.as_str()),
                Reply::Int(f.port as i64),
                Reply::bulk(match f.link {
                    Link::Connecting => "connecting",
                    Link::Sync => "sync",
                    Link::Connected => "connected",
                }),
                Reply::Int(off),
            ]),
        }
    }
}

impl ChangeFeed for Replication {
    fn wanted(&self) -> bool {
        self.wanted.load(Ordering::Acquire)
    }

    fn committed(&self, change: &[u8]) {
        let f = frame::encode(frame::Kind::Change, change);
        let mut st = self.st.lock();
        st.backlog.append(&f);
        if st.replicas.is_empty() {
            return;
        }
        let f = Arc::new(f);
        for r in &st.replicas {
            r.push(f.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_continues_inside_the_backlog_and_copies_outside_it() {
        let r = Replication::new(64);
        let (id, _) = r.position();
        // Nothing is streamed before a replica asks.
        assert!(!r.wanted());
        let (s, _a) = r.attach(1, "a".into(), 1, "?", -1);
        assert!(matches!(s, Sync::Full(_, 0)));
        r.committed(b"one");
        let end = r.offset();
        assert_eq!(end, (frame::HEADER + 3) as u64);
        let (s, b) = r.attach(2, "b".into(), 2, &id, 1);
        assert!(matches!(s, Sync::Continue(ref i) if *i == id));
        assert_eq!(
            b.take(Duration::ZERO)
                .iter()
                .flat_map(|f| f.iter().copied())
                .collect::<Vec<u8>>(),
            frame::encode(frame::Kind::Change, b"one")
        );
        let (s, _) = r.attach(3, "c".into(), 3, &id, end as i64 + 2);
        assert!(matches!(s, Sync::Full(..)), "an offset past the end copies");
        for _ in 0..10 {
            r.committed(b"more bytes than the backlog holds");
        }
        let (s, _) = r.attach(4, "d".into(), 4, &id, 1);
        assert!(
            matches!(s, Sync::Full(..)),
            "an offset behind the backlog copies"
        );
        let (s, _) = r.attach(5, "e".into(), 5, "another id", r.offset() as i64 + 1);
        assert!(matches!(s, Sync::Full(..)));
    }

    #[test]
    fn a_promoted_replica_takes_its_old_masters_replicas_up_to_where_it_was_promoted() {
        let r = Replication::new(1 << 20);
        r.reset("m", 100);
        assert!(r.follow("h", 1).is_some());
        r.committed(b"x");
        let at = r.offset();
        assert!(r.promote());
        let (new_id, _) = r.position();
        assert_ne!(new_id, "m");
        let (s, _) = r.attach(1, "a".into(), 1, "m", at as i64 + 1);
        assert!(matches!(s, Sync::Continue(ref i) if *i == new_id));
        r.committed(b"y");
        let (s, _) = r.attach(2, "b".into(), 1, "m", r.offset() as i64 + 1);
        assert!(
            matches!(s, Sync::Full(..)),
            "the old id ends where the promotion was"
        );
    }

    #[test]
    fn a_replica_past_its_outbox_limit_is_dropped() {
        let r = Replication::new(1 << 10);
        let (_, a) = r.attach(1, "a".into(), 1, "?", -1);
        let big = vec![0u8; OUTBOX_LIMIT / 2 + 1];
        r.committed(&big);
        assert!(!a.is_dropped());
        r.committed(&big);
        assert!(a.is_dropped());
    }
}
