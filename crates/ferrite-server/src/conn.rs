//! One client connection's loop: read requests, run them in order,
//! answer; deliver what other connections send it (pub/sub messages, the
//! answer to a blocked command); give up a blocked command at its
//! deadline.
//!
//! Each connection has a thread waiting in a `mio` poll on its socket
//! and its mailbox's waker, so a message or a served blocked command
//! reaches it at once.
//!
//! Invariants:
//! - commands of one connection run in the order they arrived; while one
//!   is blocked, the ones after it wait;
//! - with `--sync always`, no reply to a command, and no reply to a
//!   blocked client it served, leaves before one `Store::sync` that
//!   follows every commit made while the commands ran (one sync for a
//!   whole pipeline, shared by the group commit with every other
//!   connection syncing at the time);
//! - a protocol error is answered, then the connection is closed (the
//!   stream cannot be framed again); every other error is a reply;
//! - a client that leaves half a request unfinished for the client
//!   timeout is disconnected; an idle one is not, unless `timeout` is set;
//! - once the server shuts down, the commands already received still run
//!   and are answered, then the connection closes; a disconnecting client
//!   leaves no subscription, watch or wait behind.

use std::io::{ErrorKind, Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrite::SyncMode;
use mio::{Events, Interest, Poll, Token, Waker};

use crate::executor::{After, Runner};
use crate::mailbox::Mailbox;
use crate::reply::Reply;
use crate::request::{decode, Limits};
use crate::session::Session;
use crate::shared::Shared;
use crate::stream::Stream;

/// How often a waiting connection looks at the server's state.
const TICK: Duration = Duration::from_millis(100);

const SOCKET: Token = Token(0);
const WAKE: Token = Token(1);

/// Bytes read from the socket at most per read call.
const READ_CHUNK: usize = 64 << 10;
/// Bytes one turn reads before running what they hold: a client that
/// pipelines faster than its commands run waits in its socket (TCP's
/// flow control) rather than in the server's memory.
const READ_TURN: usize = 1 << 20;

struct Conn<'s> {
    shared: &'s Shared,
    stream: Stream,
    session: Session,
    runner: Runner,
    after: After,
    input: Vec<u8>,
    out: Vec<u8>,
    /// Since when the input has held an unfinished request.
    partial_since: Option<Instant>,
    /// The client closed its side.
    eof: bool,
    /// The last read stopped at [`READ_TURN`] with bytes still waiting.
    unread: bool,
    /// Close once the output is written.
    closing: bool,
    /// Whether the socket is registered for writability.
    want_write: bool,
}

/// Serves one connection until the client leaves, breaks the protocol,
/// stalls mid-request, is killed, or the server shuts down.
pub fn serve(stream: Stream, shared: &Shared, id: u64) {
    let Ok(mut poll) = Poll::new() else {
        return;
    };
    let mut stream = stream;
    if poll
        .registry()
        .register(&mut stream, SOCKET, Interest::READABLE)
        .is_err()
    {
        return;
    }
    let Ok(waker) = Waker::new(poll.registry(), WAKE) else {
        return;
    };
    let mailbox = Arc::new(Mailbox::new(Box::new(waker)));
    let authenticated = shared.settings.requirepass().is_none();
    let session = Session::new(id, stream.peer(), authenticated, mailbox);
    if !shared
        .clients
        .admit(&session, shared.settings.max_clients())
    {
        shared.stats.count_rejected();
        let _ = stream.write_all(b"-ERR max number of clients reached\r\n");
        let _ = stream.shutdown();
        return;
    }
    let mut conn = Conn {
        shared,
        stream,
        session,
        runner: Runner::default(),
        after: After::default(),
        input: Vec::with_capacity(16 << 10),
        out: Vec::with_capacity(16 << 10),
        partial_since: None,
        eof: false,
        unread: false,
        closing: false,
        want_write: false,
    };
    conn.run(&mut poll);
    conn.leave();
}

impl Conn<'_> {
    fn run(&mut self, poll: &mut Poll) {
        let mut events = Events::with_capacity(8);
        let mut chunk = vec![0u8; READ_CHUNK];
        loop {
            let writes_before = self.shared.ks.writes();
            let mail = self.session.mailbox.take();
            if mail.close || mail.overflow {
                break;
            }
            self.out.extend_from_slice(&mail.bytes);
            if mail.served {
                self.session.blocked = None;
            }
            self.check_deadline();
            if self.session.blocked.is_none() && !self.closing {
                self.process();
            }
            if !self.make_durable(writes_before) {
                self.closing = true;
            }
            self.after.release(self.shared);
            if self.flush_out(poll).is_err() {
                break;
            }
            if self.closing && self.out.is_empty() {
                break;
            }
            // A client gone while its command waits leaves: nobody is there
            // to answer (the wait is taken back as it leaves).
            if self.eof && (self.session.blocked.is_some() || self.out.is_empty()) {
                break;
            }
            if self.shared.shutting_down() && self.session.blocked.is_none() && self.out.is_empty()
            {
                break;
            }
            if self.stalled() {
                break;
            }
            // Bytes left unread will raise no new readiness event.
            let wait = if self.unread {
                Duration::ZERO
            } else {
                self.wait_time()
            };
            if poll.poll(&mut events, Some(wait)).is_err() {
                break;
            }
            if !self.eof && self.read_all(&mut chunk).is_err() {
                break;
            }
        }
        let _ = self.stream.flush();
        let _ = self.stream.shutdown();
    }

    /// Decodes and runs every whole request in the input.
    fn process(&mut self) {
        let limits = Limits {
            max_bulk: self.shared.settings.max_bulk(),
            ..self.shared.config.limits
        };
        let mut used = 0;
        loop {
            if self.session.blocked.is_some() || self.session.close_after_reply {
                break;
            }
            match decode(&self.input[used..], &limits) {
                Ok(Some((args, n))) => {
                    used += n;
                    if args.is_empty() {
                        continue;
                    }
                    self.runner.push(
                        self.shared,
                        &mut self.session,
                        args,
                        &mut self.out,
                        &mut self.after,
                    );
                }
                Ok(None) => break,
                Err(e) => {
                    self.runner.flush(
                        self.shared,
                        &mut self.session,
                        &mut self.out,
                        &mut self.after,
                    );
                    Reply::err(&e).encode(self.session.proto, &mut self.out);
                    self.closing = true;
                    break;
                }
            }
        }
        self.runner.flush(
            self.shared,
            &mut self.session,
            &mut self.out,
            &mut self.after,
        );
        if self.session.close_after_reply {
            self.closing = true;
        }
        self.input.drain(..used);
        // The clock runs from the last whole request: a client streaming
        // a long pipeline always has a partial one at the end of what
        // arrived, and is not stalled while requests keep completing.
        self.partial_since = match (self.input.is_empty(), self.partial_since) {
            (true, _) => None,
            (false, None) => Some(Instant::now()),
            (false, _) if used > 0 => Some(Instant::now()),
            (false, since) => since,
        };
    }

    /// Under `--sync always`, syncs when anything was committed since
    /// `before`; false (with the replies replaced by the error) if the
    /// sync failed: the replies may promise writes that are not durable.
    fn make_durable(&mut self, before: u64) -> bool {
        if self.shared.config.sync != SyncMode::Always || self.shared.ks.writes() == before {
            return true;
        }
        match self.shared.ks.store().sync() {
            Ok(()) => true,
            Err(e) => {
                self.out.clear();
                Reply::err(format!("storage error: {e}")).encode(self.session.proto, &mut self.out);
                let err = Reply::err(format!("storage error: {e}"));
                for (_, r) in &mut self.after.deliveries {
                    *r = err.clone();
                }
                self.after.events.clear();
                false
            }
        }
    }

    /// A blocked command past its deadline answers as a timeout.
    fn check_deadline(&mut self) {
        let Some(b) = &self.session.blocked else {
            return;
        };
        if b.deadline.is_none_or(|d| Instant::now() < d) {
            return;
        }
        let reply = b.timeout_reply.clone();
        // Only one of the deadline and a serving command takes the wait;
        // if it was served, its answer is on its way to the mailbox.
        if self.shared.take_waiter(self.session.id).is_some() {
            self.session.blocked = None;
            reply.encode(self.session.proto, &mut self.out);
        }
    }

    /// Writes what it can of the output; asks to hear when the rest can
    /// go.
    fn flush_out(&mut self, poll: &mut Poll) -> std::io::Result<()> {
        let mut written = 0;
        while written < self.out.len() {
            match self.stream.write(&self.out[written..]) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => written += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.out.drain(..written);
        let want = !self.out.is_empty();
        if want != self.want_write {
            let interest = if want {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            poll.registry()
                .reregister(&mut self.stream, SOCKET, interest)?;
            self.want_write = want;
        }
        Ok(())
    }

    /// Reads what the socket has, up to [`READ_TURN`] bytes.
    fn read_all(&mut self, chunk: &mut [u8]) -> std::io::Result<()> {
        let mut taken = 0;
        self.unread = false;
        loop {
            if taken >= READ_TURN {
                self.unread = true;
                return Ok(());
            }
            match self.stream.read(chunk) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(());
                }
                Ok(n) => {
                    taken += n;
                    self.input.extend_from_slice(&chunk[..n]);
                    if self.input.len() as u64 > self.shared.settings.query_limit() {
                        log::warn!(
                            "closing client {}: its query buffer passed client-query-buffer-limit",
                            self.session.id
                        );
                        return Err(ErrorKind::OutOfMemory.into());
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Whether the client has held a request half sent for too long, or
    /// idled past `timeout`.
    fn stalled(&self) -> bool {
        if self
            .partial_since
            .is_some_and(|t| t.elapsed() > self.shared.config.client_timeout)
        {
            return true;
        }
        let idle = self.shared.settings.timeout_secs();
        idle > 0
            && self.session.blocked.is_none()
            && self.session.subscriptions() == 0
            && self.session.last_command.elapsed() > Duration::from_secs(idle)
    }

    /// How long to wait for the next event.
    fn wait_time(&self) -> Duration {
        match self.session.blocked.as_ref().and_then(|b| b.deadline) {
            Some(d) => d.saturating_duration_since(Instant::now()).min(TICK),
            None => TICK,
        }
    }

    /// Leaves nothing behind: subscriptions, watches, a wait.
    fn leave(&mut self) {
        let sh = self.shared;
        let id = self.session.id;
        if self.session.blocked.is_some() {
            sh.take_waiter(id);
        }
        for ch in std::mem::take(&mut self.session.channels) {
            sh.pubsub.unsubscribe(id, &ch);
        }
        for p in std::mem::take(&mut self.session.patterns) {
            sh.pubsub.punsubscribe(id, &p);
        }
        crate::command::unwatch_all(sh, &mut self.session);
        sh.clients.remove(id);
    }
}
