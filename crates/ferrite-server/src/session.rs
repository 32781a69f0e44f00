//! One client connection: its state (protocol, database, name, queued
//! transaction) and the loop that reads requests, runs them in order and
//! writes their replies.
//!
//! Invariants:
//! - commands of one connection run in the order they arrived; the
//!   replies to everything one read delivered (a pipeline) go out in one
//!   write, after the last of them has finished;
//! - consecutive plain `SET`s of a pipeline go to the store as one batch
//!   (`PendingSets`), written before any other command of the connection
//!   runs and before any reply leaves: one engine write for many;
//! - with `--sync always`, a pipeline that wrote is followed by one
//!   `Store::sync` before its replies leave (the store itself syncs
//!   nothing per write): no reply to a write leaves before the write is
//!   durable, and a pipeline of writes costs one sync, shared by the
//!   group commit with every other connection syncing at the time, as
//!   Redis's `appendfsync always` syncs once per event-loop turn;
//! - a protocol error is answered, then the connection is closed (the
//!   stream cannot be framed again); every other error is a reply;
//! - a client that leaves half a request unfinished for the client
//!   timeout is disconnected; an idle one is not;
//! - once the server shuts down, the commands already received still run
//!   and are answered, then the connection closes.

use std::io::{ErrorKind, Read, Write};
use std::time::{Duration, Instant};

use ferrite::SyncMode;

use crate::command;
use crate::keyspace::{stored, PendingSets};
use crate::reply::Reply;
use crate::request::{decode, Args};
use crate::shared::Shared;
use crate::stream::Stream;

/// How often a blocked read wakes to look at the server's state.
const TICK: Duration = Duration::from_millis(100);

/// A connection's state.
#[derive(Debug)]
pub struct Session {
    pub id: u64,
    pub addr: String,
    pub name: Option<Vec<u8>>,
    /// The `SELECT`ed database.
    pub db: u8,
    /// RESP version: 2, or 3 after `HELLO 3`.
    pub proto: u8,
    pub authenticated: bool,
    /// Close once the current reply is written (`QUIT`, `SHUTDOWN`).
    pub close_after_reply: bool,
    /// Send no reply to the current command (`SHUTDOWN`).
    pub silent: bool,
    pub created: Instant,
    /// Queued commands and whether queueing failed, inside `MULTI`.
    transaction: Option<(Vec<Args>, bool)>,
}

impl Session {
    pub fn new(id: u64, addr: String, authenticated: bool) -> Self {
        Self {
            id,
            addr,
            name: None,
            db: 0,
            proto: 2,
            authenticated,
            close_after_reply: false,
            silent: false,
            created: Instant::now(),
            transaction: None,
        }
    }

    pub fn in_transaction(&self) -> bool {
        self.transaction.is_some()
    }

    pub fn begin_transaction(&mut self) {
        self.transaction = Some((Vec::new(), false));
    }

    pub fn queue(&mut self, args: Args) {
        if let Some((q, _)) = &mut self.transaction {
            q.push(args);
        }
    }

    /// Marks the open transaction (if any) as failed: `EXEC` will abort.
    pub fn flag_transaction_error(&mut self) {
        if let Some((_, failed)) = &mut self.transaction {
            *failed = true;
        }
    }

    /// Ends the transaction, returning its queue and whether it failed.
    pub fn take_transaction(&mut self) -> Option<(Vec<Args>, bool)> {
        self.transaction.take()
    }

    /// What `RESET` restores.
    pub fn reset(&mut self) {
        self.name = None;
        self.db = 0;
        self.proto = 2;
        self.transaction = None;
    }
}

/// The stored key of a `SET key value` with no options, outside a
/// transaction, from an authenticated client, with a key the database
/// takes: one that may join the pipeline's batch. Anything else (and any
/// error) goes the usual way, which also gives the error's reply.
fn plain_set(session: &Session, args: &Args) -> Option<Vec<u8>> {
    let plain = args.len() == 3
        && args[0].eq_ignore_ascii_case(b"set")
        && session.authenticated
        && !session.in_transaction();
    plain.then(|| stored(session.db, &args[1]).ok()).flatten()
}

/// Serves one connection until the client leaves, breaks the protocol,
/// stalls mid-request, or the server shuts down.
pub fn serve(mut stream: Stream, shared: &Shared, mut session: Session) {
    if stream.set_read_timeout(Some(TICK)).is_err() {
        return;
    }
    let limits = shared.config.limits;
    let mut buf: Vec<u8> = Vec::with_capacity(16 << 10);
    let mut out: Vec<u8> = Vec::with_capacity(16 << 10);
    let mut chunk = vec![0u8; 64 << 10];
    // Since when the buffer has held an unfinished request.
    let mut partial_since: Option<Instant> = None;
    let sync_replies = shared.config.sync == SyncMode::Always;
    let mut pending = PendingSets::default();
    loop {
        let mut used = 0;
        let mut close = false;
        let writes_before = shared.db.writes();
        loop {
            match decode(&buf[used..], &limits) {
                Ok(Some((args, n))) => {
                    used += n;
                    if args.is_empty() {
                        continue;
                    }
                    if let Some(key) = plain_set(&session, &args) {
                        if pending.push(&key, &args[2], out.len()).is_ok() {
                            shared.stats.count_command();
                            Reply::ok().encode(session.proto, &mut out);
                            continue;
                        }
                    }
                    pending.write(&shared.db, session.proto, &mut out);
                    let reply = command::execute(shared, &mut session, &args);
                    if !session.silent {
                        reply.encode(session.proto, &mut out);
                    }
                    session.silent = false;
                    if session.close_after_reply {
                        close = true;
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    pending.write(&shared.db, session.proto, &mut out);
                    Reply::err(&e).encode(session.proto, &mut out);
                    close = true;
                    break;
                }
            }
        }
        pending.write(&shared.db, session.proto, &mut out);
        buf.drain(..used);
        if sync_replies && shared.db.writes() != writes_before {
            if let Err(e) = shared.db.store.sync() {
                // The replies may promise writes that are not durable:
                // none of them leaves, and the connection ends.
                out.clear();
                crate::keyspace::engine_error(&e).encode(session.proto, &mut out);
                close = true;
            }
        }
        if !out.is_empty() {
            if stream.write_all(&out).is_err() {
                break;
            }
            out.clear();
        }
        if close {
            break;
        }
        partial_since = match (buf.is_empty(), partial_since) {
            (true, _) => None,
            (false, None) => Some(Instant::now()),
            (false, since) => since,
        };
        if shared.shutting_down() {
            break;
        }
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if partial_since.is_some_and(|t| t.elapsed() > shared.config.client_timeout) {
                    break;
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let _ = stream.flush();
    let _ = stream.shutdown();
    shared.clients.remove(session.id);
}
