//! One client connection inside an event loop: its socket, its session,
//! the bytes it sent that are not yet run and the replies not yet
//! written, and the timers that end it.
//!
//! Invariants:
//! - commands of one connection run in the order they arrived; while one
//!   is blocked, the ones after it wait in `input`;
//! - `input[..used]` has been run this turn and is dropped at its end;
//!   `out` holds replies in the order of their commands, after
//!   whatever other connections delivered before them;
//! - a protocol error is answered, then the connection is closed (the
//!   stream cannot be framed again); every other error is a reply;
//! - a client that leaves half a request unfinished for the client
//!   timeout is disconnected; an idle one is not, unless `timeout` is set;
//! - a connection that has left leaves no subscription, watch or wait
//!   behind ([`Conn::leave`]).

use std::io::{ErrorKind, Read, Write};
use std::time::{Duration, Instant};

use ferrite_net::Polled;
use mio::{Interest, Registry, Token};

use crate::mailbox::Mail;
use crate::reply::Reply;
use crate::session::Session;
use crate::shared::Shared;

/// Bytes one turn reads from a connection before running what they hold:
/// a client that pipelines faster than its commands run waits in its
/// socket (TCP's flow control) rather than in the server's memory.
pub const READ_TURN: usize = 1 << 20;

/// Replies waiting for a client past this stop the connection's reading
/// until it takes them: a client that sends without reading is held back
/// by its own socket, not buffered without bound.
const OUT_HIGH: usize = 4 << 20;

/// Input capacity kept by a connection with nothing pending; more is
/// given back, so ten thousand idle clients cost little memory.
const KEEP_CAPACITY: usize = 16 << 10;

pub struct Conn {
    pub stream: Polled,
    pub session: Session,
    pub input: Vec<u8>,
    /// Bytes of `input` decoded this turn.
    pub used: usize,
    pub out: Vec<u8>,
    /// Since when the input has held an unfinished request.
    partial_since: Option<Instant>,
    /// The client closed its side.
    pub eof: bool,
    /// The last read stopped at [`READ_TURN`] with bytes still waiting.
    pub unread: bool,
    /// Close once the output is written.
    pub closing: bool,
    /// The connection is gone: close at once.
    pub dead: bool,
    /// Whether the socket is registered for writability.
    want_write: bool,
    /// In this turn's active list.
    pub active: bool,
    /// Its key reads are out with a reader ([`crate::readers`]): none of
    /// its commands run, and it closes only if its socket broke, until
    /// their replies are back.
    pub parked: bool,
}

impl Conn {
    pub fn new(stream: Polled, session: Session) -> Self {
        Self {
            stream,
            session,
            input: Vec::new(),
            used: 0,
            out: Vec::new(),
            partial_since: None,
            eof: false,
            unread: false,
            closing: false,
            dead: false,
            want_write: false,
            active: false,
            parked: false,
        }
    }

    /// Whether the connection may decode and run commands now.
    pub fn runnable(&self) -> bool {
        !self.parked
            && !self.backed_up()
            && self.session.blocked.is_none()
            && !self.session.handoff
            && !self.closing
            && !self.dead
            && !self.session.close_after_reply
    }

    /// Whether the reading side should wait for the client to take its
    /// replies.
    pub fn backed_up(&self) -> bool {
        self.out.len() > OUT_HIGH
    }

    /// Takes in what other connections delivered; false if the
    /// connection is to close at once (`CLIENT KILL`, an overflowing
    /// subscriber).
    pub fn take_mail(&mut self, mail: Mail) -> bool {
        if mail.close || mail.overflow {
            return false;
        }
        self.out.extend_from_slice(&mail.bytes);
        if mail.served {
            self.session.blocked = None;
        }
        true
    }

    /// Reads what the socket has, up to [`READ_TURN`] bytes.
    pub fn read(&mut self, chunk: &mut [u8], query_limit: u64) -> std::io::Result<()> {
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
                    if self.input.len() as u64 > query_limit {
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

    /// Drops the input decoded this turn and restarts the stall clock.
    pub fn consume(&mut self) {
        let used = std::mem::take(&mut self.used);
        self.input.drain(..used);
        if self.input.is_empty() && self.input.capacity() > KEEP_CAPACITY {
            self.input = Vec::new();
        }
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

    /// A blocked command past its deadline answers as a timeout.
    pub fn check_deadline(&mut self, shared: &Shared, now: Instant) {
        let Some(b) = &self.session.blocked else {
            return;
        };
        if b.deadline.is_none_or(|d| now < d) {
            return;
        }
        if b.wait {
            // Answered with how many acknowledged by now, unless the
            // acknowledgements answered it first.
            if let Some(n) = shared.repl.take_wait(self.session.id) {
                self.session.blocked = None;
                Reply::Int(n as i64).encode(self.session.proto, &mut self.out);
            }
            return;
        }
        let reply = b.timeout_reply.clone();
        // Only one of the deadline and a serving command takes the wait;
        // if it was served, its answer is on its way to the mailbox.
        if shared.take_waiter(self.session.id).is_some() {
            self.session.blocked = None;
            reply.encode(self.session.proto, &mut self.out);
        }
    }

    /// Under a failed sync: the replies since `mark` may promise writes
    /// that are not durable, so they become the error and the
    /// connection closes.
    pub fn fail_replies(&mut self, mark: usize, e: &ferrite::Error) {
        self.out.truncate(mark.min(self.out.len()));
        Reply::err(format!("storage error: {e}")).encode(self.session.proto, &mut self.out);
        self.closing = true;
    }

    /// Writes what it can of the output; asks to hear when the rest can
    /// go.
    pub fn flush(&mut self, registry: &Registry, token: Token) -> std::io::Result<()> {
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
        if written == self.out.len() {
            self.out.clear();
            if self.out.capacity() > KEEP_CAPACITY {
                self.out = Vec::new();
            }
        } else {
            self.out.drain(..written);
        }
        let want = !self.out.is_empty();
        if want != self.want_write {
            let interest = if want {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            registry.reregister(&mut self.stream, token, interest)?;
            self.want_write = want;
        }
        Ok(())
    }

    /// Whether the client has held a request half sent for too long, or
    /// idled past `timeout`.
    pub fn stalled(&self, shared: &Shared) -> bool {
        if self.parked {
            return false;
        }
        // A backed-up client's unfinished request waits on the client
        // reading, not on it sending.
        if !self.backed_up()
            && self
                .partial_since
                .is_some_and(|t| t.elapsed() > shared.config.client_timeout)
        {
            return true;
        }
        let idle = shared.settings.timeout_secs();
        idle > 0
            && self.session.blocked.is_none()
            && self.session.subscriptions() == 0
            && self.session.last_command.elapsed() > Duration::from_secs(idle)
    }

    /// Whether the connection is done, after a turn: written out what it
    /// owed, or gone.
    pub fn finished(&self, shared: &Shared) -> bool {
        if self.dead {
            return true;
        }
        // Replies are still to come from a reader.
        if self.parked {
            return false;
        }
        if self.closing && self.out.is_empty() {
            return true;
        }
        // A client gone while its command waits leaves: nobody is there
        // to answer (the wait is taken back as it leaves).
        if self.eof && (self.session.blocked.is_some() || self.out.is_empty()) {
            return true;
        }
        shared.shutting_down() && self.session.blocked.is_none() && self.out.is_empty()
    }

    /// Leaves nothing behind: subscriptions, watches, a wait.
    pub fn leave(&mut self, shared: &Shared) {
        // A replica's link it never handed over.
        if self.session.handoff {
            if let Some(h) = shared.repl.take_handoff(self.session.id) {
                h.attached.drop_link();
                shared.repl.detach(&h.attached);
            }
        }
        self.forget(shared);
        let _ = self.stream.flush();
        let _ = self.stream.shutdown();
    }

    /// Removes every trace of the client from what connections share
    /// (its socket stays open: a replica's link takes it over).
    pub fn forget(&mut self, shared: &Shared) {
        let id = self.session.id;
        if let Some(b) = self.session.blocked.take() {
            if b.wait {
                shared.repl.take_wait(id);
            } else {
                shared.take_waiter(id);
            }
        }
        for ch in std::mem::take(&mut self.session.channels) {
            shared.pubsub.unsubscribe(id, &ch);
        }
        for p in std::mem::take(&mut self.session.patterns) {
            shared.pubsub.punsubscribe(id, &p);
        }
        crate::command::unwatch_all(shared, &mut self.session);
        shared.clients.remove(id);
    }
}
