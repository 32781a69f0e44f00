//! An I/O thread: one `mio` poll over many connections. The server runs
//! a few (`--io-threads`, the number of cores by default), each with its
//! own connections, as Kvrocks runs a few workers each with an event loop
//! (not Redis's single loop: a cache miss on one loop leaves the others
//! serving). `mio` rather than tokio: the loop is readiness events over
//! synchronous store work, and an async runtime would put a scheduler
//! between the socket and the store without removing any of it.
//!
//! One turn of a loop: wait for readiness; read what every ready
//! connection sent and take what other connections delivered to it; run
//! the commands of all of them, those that touch only keys grouped into
//! one transaction per round (one lock acquisition and one atomic batch
//! for every connection's writes, as RocksDB's write group does); under
//! `--sync always`, one sync; then the replies, then what the commands
//! owe other connections (served blocked clients, keyspace events).
//!
//! Invariants:
//! - each connection's commands run in its order; a command that cannot
//!   share a group runs after the group that holds the commands before
//!   it and before the group that holds the ones after it;
//! - under `--sync always` no reply of a turn leaves, and nothing it
//!   delivers to another connection, before one sync after every commit
//!   the turn may have seen (any loop's, see [`Keyspace::sync_seen`]): a
//!   client is never shown a write a crash can take back;
//! - a connection is owned by one loop from its admission to its close;
//!   other threads reach it only through its mailbox, whose waker names
//!   it to the loop, and a reader only through the replies of the key
//!   reads the loop handed it (while reads go to the device, see
//!   [`crate::read_route`]), which come back through [`Signal`].
//!
//! [`Keyspace::sync_seen`]: crate::model::Keyspace::sync_seen

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrite::SyncMode;
use ferrite_net::{Polled, Stream};
use mio::{Events, Interest, Poll, Token, Waker};
use parking_lot::Mutex;
use slab::Slab;

use bumpalo::Bump;

use crate::conn::Conn;
use crate::executor::{self, Admitted, After, Members, Next, MAX_GROUP};
use crate::mailbox::{Mailbox, Wake};
use crate::readers::{self, Back, Done, Job, Readers};
use crate::reply::Reply;
use crate::request::{decode_frame, Frame, Limits, OwnedArgs, ProtocolError};
use crate::session::Session;
use crate::shared::Shared;

/// How often a loop looks at timers it has no event for: stalled and
/// idle clients, shutdown.
const TICK: Duration = Duration::from_millis(100);

/// The loop's own waker; connection `k` of the slab is `Token(k + 1)`.
const WAKE: Token = Token(0);

/// Bytes read from a socket per read call (one buffer per loop).
const READ_CHUNK: usize = 64 << 10;

/// What other threads hand a loop: new connections and connections whose
/// mailbox has mail.
pub struct Signal {
    waker: Waker,
    incoming: Mutex<Vec<(Polled, u64)>>,
    woken: Mutex<Vec<usize>>,
    /// Replies of key reads readers ran for its connections.
    returned: Mutex<Vec<Done>>,
    /// Connections it holds, for the acceptor's choice of loop.
    load: AtomicUsize,
}

impl Back for Signal {
    fn back(&self, done: Done) {
        self.returned.lock().push(done);
        let _ = self.waker.wake();
    }
}

impl Signal {
    /// Gives the loop a new connection.
    pub fn hand(&self, stream: Polled, id: u64) {
        self.load.fetch_add(1, Ordering::Relaxed);
        self.incoming.lock().push((stream, id));
        let _ = self.waker.wake();
    }

    pub fn load(&self) -> usize {
        self.load.load(Ordering::Relaxed)
    }

    /// Wakes the loop with nothing new (shutdown).
    pub fn nudge(&self) {
        let _ = self.waker.wake();
    }
}

/// A connection's mailbox waker: names the connection to its loop.
struct ConnWaker {
    signal: Arc<Signal>,
    key: usize,
}

impl Wake for ConnWaker {
    fn wake(&self) {
        self.signal.woken.lock().push(self.key);
        let _ = self.signal.waker.wake();
    }
}

/// What a connection holds back until the group before it has run.
enum Held<'a> {
    /// A command that cannot share a group.
    Alone(Admitted<'a>),
    /// A command refused before running, and its reply.
    Refused(Reply),
    /// The stream broke the protocol: answered, then closed.
    Broken(ProtocolError),
}

/// The loop's connections as the executor's group members.
struct ConnSet<'a>(&'a mut Slab<Conn>);

impl Members for ConnSet<'_> {
    fn member(&mut self, who: usize) -> (&mut Session, &mut Vec<u8>) {
        let c = &mut self.0[who];
        (&mut c.session, &mut c.out)
    }
}

pub struct EventLoop {
    shared: Arc<Shared>,
    readers: Readers,
    signal: Arc<Signal>,
    poll: Poll,
    conns: Slab<Conn>,
    /// Connections to read, run and answer this turn.
    active: Vec<usize>,
    /// Connections blocked in a command with a deadline.
    blocked: Vec<usize>,
    /// Connections whose last read left bytes in the socket.
    unread: Vec<usize>,
    after: After,
    /// Where this turn's arguments are viewed from: slices of the
    /// connections' input, or copies of inline commands' unquoted words.
    bump: Bump,
    /// Where a request's arguments lie in its connection's input.
    spans: Vec<std::ops::Range<usize>>,
    /// Per active connection during a run: its input, and how much of it
    /// has run.
    inputs: Vec<Vec<u8>>,
    used: Vec<usize>,
    /// Per active connection during a run: the key reads going to a
    /// reader, and whether it takes no more commands this turn.
    jobs: Vec<Option<Vec<OwnedArgs>>>,
    parking: Vec<bool>,
    chunk: Vec<u8>,
    last_tick: Instant,
}

impl EventLoop {
    /// A loop and the handle others reach it by.
    pub fn new(shared: Arc<Shared>, readers: Readers) -> std::io::Result<(Self, Arc<Signal>)> {
        let poll = Poll::new()?;
        let waker = Waker::new(poll.registry(), WAKE)?;
        let signal = Arc::new(Signal {
            waker,
            incoming: Mutex::new(Vec::new()),
            woken: Mutex::new(Vec::new()),
            returned: Mutex::new(Vec::new()),
            load: AtomicUsize::new(0),
        });
        let this = Self {
            shared,
            readers,
            signal: signal.clone(),
            poll,
            conns: Slab::new(),
            active: Vec::new(),
            blocked: Vec::new(),
            unread: Vec::new(),
            after: After::default(),
            bump: Bump::new(),
            spans: Vec::new(),
            inputs: Vec::new(),
            used: Vec::new(),
            jobs: Vec::new(),
            parking: Vec::new(),
            chunk: vec![0; READ_CHUNK],
            last_tick: Instant::now(),
        };
        Ok((this, signal))
    }

    /// Serves until the server shuts down and every connection has left.
    pub fn run(mut self) {
        let mut events = Events::with_capacity(1024);
        loop {
            let stopping = self.shared.shutting_down();
            if stopping && self.conns.is_empty() && self.signal.incoming.lock().is_empty() {
                break;
            }
            let wait = self.wait_time();
            if let Err(e) = self.poll.poll(&mut events, Some(wait)) {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    log::error!("event loop poll failed: {e}");
                    break;
                }
            }
            for ev in events.iter() {
                if ev.token() != WAKE {
                    self.activate(ev.token().0 - 1);
                }
            }
            self.take_incoming();
            let woken = std::mem::take(&mut *self.signal.woken.lock());
            for key in woken {
                self.activate(key);
            }
            let returned = std::mem::take(&mut *self.signal.returned.lock());
            for done in returned {
                self.unpark(done);
            }
            for key in std::mem::take(&mut self.unread) {
                self.activate(key);
            }
            let now = Instant::now();
            for key in self.blocked.clone() {
                if self.deadline(key).is_some_and(|d| d <= now) {
                    self.activate(key);
                }
            }
            self.turn();
            if now.duration_since(self.last_tick) >= TICK || stopping {
                self.last_tick = now;
                self.tick();
            }
        }
        for key in self.conns.iter().map(|(k, _)| k).collect::<Vec<_>>() {
            self.close(key);
        }
    }

    /// How long to wait for the next event: no longer than the next tick
    /// or the nearest deadline of a blocked command, not at all when a
    /// connection has bytes left unread (they raise no new event).
    fn wait_time(&self) -> Duration {
        if !self.unread.is_empty() {
            return Duration::ZERO;
        }
        let now = Instant::now();
        let mut wait = TICK.saturating_sub(now.duration_since(self.last_tick));
        for &key in &self.blocked {
            if let Some(d) = self.deadline(key) {
                wait = wait.min(d.saturating_duration_since(now));
            }
        }
        wait
    }

    /// When connection `key`'s blocked command gives up, if it does.
    fn deadline(&self, key: usize) -> Option<Instant> {
        self.conns
            .get(key)
            .and_then(|c| c.session.blocked.as_ref())
            .and_then(|b| b.deadline)
    }

    /// Closes the connections that stalled, idled past `timeout`, or are
    /// done after a shutdown: none of them has an event to say so; stops
    /// a long script the shutdown waits for.
    fn tick(&mut self) {
        let sh = &self.shared;
        sh.route.refresh(Instant::now());
        // A script still running long when the server stops is stopped,
        // its writes dropped (as `SHUTDOWN NOSAVE` does): the connection
        // waiting for it would hold the shutdown forever.
        if sh.shutting_down() && sh.scripts.busy(sh.settings.busy_ms()) {
            sh.scripts.running.abort();
        }
        let done: Vec<usize> = self
            .conns
            .iter()
            .filter(|(_, c)| c.stalled(&self.shared) || c.finished(&self.shared))
            .map(|(k, _)| k)
            .collect();
        for key in done {
            self.close(key);
        }
    }

    /// Takes back a connection's replies from a reader and lets it run
    /// again (if it is still the client the reads were for).
    fn unpark(&mut self, done: Done) {
        let Some(c) = self.conns.get_mut(done.key) else {
            return;
        };
        if !c.parked || c.session.id != done.client {
            return;
        }
        c.parked = false;
        c.out.extend_from_slice(&done.out);
        c.session.last_command = Instant::now();
        if done.close {
            c.closing = true;
        }
        self.activate(done.key);
    }

    fn activate(&mut self, key: usize) {
        if let Some(c) = self.conns.get_mut(key) {
            if !c.active {
                c.active = true;
                self.active.push(key);
            }
        }
    }

    /// Admits the connections the acceptor handed over.
    fn take_incoming(&mut self) {
        let incoming = std::mem::take(&mut *self.signal.incoming.lock());
        for (mut stream, id) in incoming {
            let entry = self.conns.vacant_entry();
            let key = entry.key();
            let token = Token(key + 1);
            if let Err(e) = self
                .poll
                .registry()
                .register(&mut stream, token, Interest::READABLE)
            {
                log::warn!("client {id}: cannot poll its socket: {e}");
                self.signal.load.fetch_sub(1, Ordering::Relaxed);
                continue;
            }
            let waker = ConnWaker {
                signal: self.signal.clone(),
                key,
            };
            let mailbox = Arc::new(Mailbox::new(Box::new(waker)));
            let sh = &self.shared;
            let authenticated = sh.settings.requirepass().is_none();
            let session = Session::new(id, stream.peer(), authenticated, mailbox);
            if !sh.clients.admit(&session, sh.settings.max_clients()) {
                sh.stats.count_rejected();
                let _ = self.poll.registry().deregister(&mut stream);
                let _ = std::io::Write::write_all(
                    &mut stream,
                    b"-ERR max number of clients reached\r\n",
                );
                let _ = stream.shutdown();
                self.signal.load.fetch_sub(1, Ordering::Relaxed);
                continue;
            }
            entry.insert(Conn::new(stream, session));
            // Bytes may have arrived before the registration.
            self.activate(key);
        }
    }

    /// Reads, runs, syncs, answers, delivers, for the active connections.
    fn turn(&mut self) {
        if self.active.is_empty() {
            return;
        }
        let active = std::mem::take(&mut self.active);
        let now = Instant::now();
        let query_limit = self.shared.settings.query_limit();
        // Where this turn's replies begin, per connection.
        let mut marks = Vec::with_capacity(active.len());
        for &key in &active {
            let c = &mut self.conns[key];
            c.active = false;
            let mail = c.session.mailbox.take();
            if !c.take_mail(mail) {
                c.dead = true;
            }
            marks.push(c.out.len());
            c.check_deadline(&self.shared, now);
            if c.eof || c.dead {
                continue;
            }
            if c.backed_up() || c.parked {
                // Read once the client has taken its replies, or the
                // reader has given them back: the socket will not say
                // again that it has bytes.
                c.unread = true;
            } else if c.read(&mut self.chunk, query_limit).is_err() {
                c.dead = true;
            }
        }
        let ran = self.execute(&active);
        if ran && self.shared.config.sync == SyncMode::Always {
            if let Err(e) = self.shared.ks.sync_seen() {
                for (i, &key) in active.iter().enumerate() {
                    self.conns[key].fail_replies(marks[i], &e);
                }
                self.after.fail(&e);
            }
        }
        self.after.release(&self.shared);
        let registry = self.poll.registry();
        let mut done = Vec::new();
        let mut handoffs = Vec::new();
        for &key in &active {
            let c = &mut self.conns[key];
            if c.session
                .blocked
                .as_ref()
                .is_some_and(|b| b.deadline.is_some())
            {
                if !self.blocked.contains(&key) {
                    self.blocked.push(key);
                }
            } else {
                self.blocked.retain(|&k| k != key);
            }
            if !c.dead && c.flush(registry, Token(key + 1)).is_err() {
                c.dead = true;
            }
            // A backed-up connection hears of its client again by
            // writability, not by reading.
            if c.unread && !c.backed_up() && !c.parked {
                self.unread.push(key);
            }
            if c.session.handoff {
                handoffs.push(key);
            } else if c.finished(&self.shared) || c.stalled(&self.shared) {
                done.push(key);
            }
        }
        for key in done {
            self.close(key);
        }
        for key in handoffs {
            self.hand_off(key);
        }
        self.active = active;
        self.active.clear();
    }

    /// Runs every whole command the active connections hold, in rounds:
    /// a group of the key commands each runnable connection has before
    /// its first command that cannot share one, then those commands.
    /// Arguments are slices of the bytes received (no copy, no
    /// allocation per argument): the inputs leave their connections for
    /// the run, so commands borrow them while replies go to the
    /// connections. While reads go to the device, a connection's run of
    /// key reads is handed to a reader instead, after the group holding
    /// its commands before them, and the connection parks until their
    /// replies are back. Says whether any command ran.
    fn execute(&mut self, active: &[usize]) -> bool {
        let sh = self.shared.clone();
        let limits = Limits {
            max_bulk: sh.settings.max_bulk(),
            ..sh.config.limits
        };
        let offloading = sh.route.offloading();
        self.jobs.clear();
        self.jobs.resize_with(active.len(), || None);
        self.parking.clear();
        self.parking.resize(active.len(), false);
        self.inputs.clear();
        self.used.clear();
        for &key in active {
            self.inputs.push(std::mem::take(&mut self.conns[key].input));
            self.used.push(0);
        }
        let ran = {
            let inputs = &self.inputs;
            let jobs = &mut self.jobs;
            let parking = &mut self.parking;
            let used = &mut self.used;
            let bump = &self.bump;
            let spans = &mut self.spans;
            let conns = &mut self.conns;
            let after = &mut self.after;
            let mut held: Vec<Option<Held<'_>>> = active.iter().map(|_| None).collect();
            // Sized once: grown push by push, a full group reallocates
            // nine times a turn, each a trip through the allocator's
            // consolidation on a pipelining workload.
            let mut group: Vec<(usize, Admitted<'_>)> = Vec::with_capacity(MAX_GROUP);
            let mut ran = false;
            loop {
                for (i, &key) in active.iter().enumerate() {
                    let c = &mut conns[key];
                    while held[i].is_none()
                        && !parking[i]
                        && c.runnable()
                        && group.len() < MAX_GROUP
                    {
                        let input = &inputs[i];
                        let at = used[i];
                        let args: &[&[u8]] = match decode_frame(&input[at..], &limits, spans) {
                            Ok(Some(Frame::Spans { used: n })) => {
                                used[i] += n;
                                bump.alloc_slice_fill_iter(
                                    spans.iter().map(|r| &input[at + r.start..at + r.end]),
                                )
                            }
                            Ok(Some(Frame::Inline { args, used: n })) => {
                                used[i] += n;
                                bump.alloc_slice_fill_iter(
                                    args.iter().map(|a| &*bump.alloc_slice_copy(a)),
                                )
                            }
                            Ok(None) => break,
                            Err(e) => {
                                held[i] = Some(Held::Broken(e));
                                break;
                            }
                        };
                        if args.is_empty() {
                            continue;
                        }
                        if offloading && readers::may_take(&c.session, args) {
                            let job = jobs[i].get_or_insert_with(Vec::new);
                            job.push(crate::request::to_owned(args));
                            parking[i] = job.len() >= MAX_GROUP;
                            continue;
                        }
                        if jobs[i].is_some() {
                            // Runs once the reads before it are answered.
                            used[i] = at;
                            parking[i] = true;
                            break;
                        }
                        match executor::classify(&sh, &mut c.session, args) {
                            Next::Group(a) => group.push((key, a)),
                            Next::Alone(a) => held[i] = Some(Held::Alone(a)),
                            Next::Refused(r) => held[i] = Some(Held::Refused(r)),
                        }
                    }
                }
                let mut progress = false;
                if !group.is_empty() {
                    let reads = group.iter().filter(|(_, a)| a.reads_only()).count() as u64;
                    let device_before = ferrite::thread_device_reads();
                    executor::run_group(&sh, &group, &mut ConnSet(conns), after);
                    if reads > 0 {
                        let device = ferrite::thread_device_reads() - device_before;
                        sh.route.record(reads, device, false);
                    }
                    group.clear();
                    progress = true;
                }
                for (i, &key) in active.iter().enumerate() {
                    let Some(h) = held[i].take() else { continue };
                    let c = &mut conns[key];
                    progress = true;
                    match h {
                        Held::Alone(a) => {
                            executor::run_alone(&sh, &mut c.session, a, &mut c.out, after)
                        }
                        Held::Refused(r) => executor::refuse(&sh, &mut c.session, r, &mut c.out),
                        Held::Broken(e) => {
                            Reply::err(&e).encode(c.session.proto, &mut c.out);
                            c.closing = true;
                        }
                    }
                    if c.session.close_after_reply {
                        c.closing = true;
                    }
                }
                ran |= progress;
                if !progress {
                    break;
                }
            }
            ran
        };
        for (i, &key) in active.iter().enumerate() {
            let c = &mut self.conns[key];
            c.input = std::mem::take(&mut self.inputs[i]);
            c.used = self.used[i];
            c.consume();
        }
        self.bump.reset();
        for (i, &key) in active.iter().enumerate() {
            let Some(commands) = self.jobs[i].take() else {
                continue;
            };
            let c = &mut self.conns[key];
            let job = Job {
                key,
                session: c.session.view(),
                commands,
                back: self.signal.clone(),
            };
            c.parked = true;
            if let Err(unrun) = self.readers.hand(job) {
                // No reader is left (the server is stopping): the loop
                // answers that it cannot run them.
                c.parked = false;
                for _ in 0..unrun {
                    Reply::err("server is shutting down").encode(c.session.proto, &mut c.out);
                }
            }
        }
        ran
    }

    /// Gives a replica's connection (after its `PSYNC`) to a link thread
    /// of its own, with the replies and requests not yet handled.
    fn hand_off(&mut self, key: usize) {
        let Some(mut c) = self.take(key) else {
            return;
        };
        c.forget(&self.shared);
        c.session.handoff = false;
        let Some(h) = self.shared.repl.take_handoff(c.session.id) else {
            return;
        };
        match c.stream {
            Stream::Tcp(t) => {
                let std = std::net::TcpStream::from(t);
                crate::replication::feeder::start(self.shared.clone(), h, std, c.out, c.input);
            }
            Stream::Unix(_) => {
                h.attached.drop_link();
                self.shared.repl.detach(&h.attached);
            }
        }
    }

    /// Closes a connection and forgets it.
    fn close(&mut self, key: usize) {
        if let Some(mut c) = self.take(key) {
            c.leave(&self.shared);
        }
    }

    /// Takes a connection out of this loop: its poll registration, its
    /// places in the loop's lists, its share of the loop's load.
    fn take(&mut self, key: usize) -> Option<Conn> {
        if !self.conns.contains(key) {
            return None;
        }
        let mut c = self.conns.remove(key);
        let _ = self.poll.registry().deregister(&mut c.stream);
        self.blocked.retain(|&k| k != key);
        self.unread.retain(|&k| k != key);
        self.signal.load.fetch_sub(1, Ordering::Relaxed);
        Some(c)
    }
}
