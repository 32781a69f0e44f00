//! Running commands: which run together in one transaction, `EXEC`,
//! serving blocked clients, and what waits for the commit.
//!
//! Invariants:
//! - commands that touch only keys (no session state that later commands
//!   depend on, no blocking), received by one event loop in one turn from
//!   any number of connections, run as one group in one [`Tx`]: one lock
//!   acquisition and one atomic batch for all of them, each connection's
//!   commands in its order, each command seeing the ones before it; a
//!   command that fails part way is rolled back alone; a group whose
//!   commit fails answers every command with the failure;
//! - a command's reply is encoded only once its writes are committed
//!   (a group's replies are taken back if the commit fails);
//! - blocked clients waiting on keys a transaction gave elements are
//!   served inside that same transaction, first blocked first served, and
//!   their replies are delivered only after it commits (and, with
//!   `--sync always`, after the loop's sync);
//! - keyspace events are published after the commit that made them true.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::command::{
    self, Ctx, Fail, Kind, Spec, ALONE, NOAUTH, NOMULTI, NOQUEUE, PUBSUB, SCRIPTED,
};
use crate::mailbox::Mailbox;
use crate::model::{Event, ModelError, Tx};
use crate::reply::Reply;
use crate::request::Args;
use crate::script::Job;
use crate::session::Block;
use crate::session::{ReplyMode, Session};
use crate::shared::Shared;

/// Commands one group holds at most (bounds how long it holds the lock).
pub const MAX_GROUP: usize = 1024;

/// What must happen once the connection's writes are durable.
#[derive(Default)]
pub struct After {
    /// Replies to blocked clients this connection's commands served.
    pub deliveries: Vec<(Arc<Mailbox>, Reply)>,
    pub events: Vec<Event>,
}

impl After {
    /// The sync that was to make the writes durable failed: every
    /// delivery becomes the error, and nothing is published.
    pub fn fail(&mut self, e: &ferrite::Error) {
        let err = Reply::err(format!("storage error: {e}"));
        for (_, r) in &mut self.deliveries {
            *r = err.clone();
        }
        self.events.clear();
    }

    /// Delivers and publishes (the writes are durable now).
    pub fn release(&mut self, shared: &Shared) {
        for (mb, r) in self.deliveries.drain(..) {
            let mut bytes = Vec::new();
            r.encode(mb.proto(), &mut bytes);
            mb.serve(&bytes);
        }
        shared.publish_events(&self.events);
        self.events.clear();
    }
}

/// A command that passed the checks before running.
pub struct Admitted<'a> {
    index: usize,
    spec: &'static Spec,
    args: &'a Args<'a>,
}

impl Admitted<'_> {
    /// Whether the command only reads the keyspace.
    pub fn reads_only(&self) -> bool {
        self.spec.kind == Kind::Read
    }
}

/// The connections whose commands one group runs, by the loop's token
/// for each.
pub trait Members {
    /// The session of connection `who` and the buffer its replies go to.
    fn member(&mut self, who: usize) -> (&mut Session, &mut Vec<u8>);
}

/// Where a connection's next command goes.
pub enum Next<'a> {
    /// Into the loop's group: it touches only keys.
    Group(Admitted<'a>),
    /// Run by itself, once the group before it has run.
    Alone(Admitted<'a>),
    /// Refused before running; the reply, once the group before it has
    /// run.
    Refused(Reply),
}

/// Checks a decoded command and says where it goes.
pub fn classify<'a>(shared: &Shared, session: &mut Session, args: &'a Args<'a>) -> Next<'a> {
    match admit(shared, session, args) {
        Ok(a) => {
            session.activity.ran(a.index);
            if groupable(session, a.spec) {
                Next::Group(a)
            } else {
                Next::Alone(a)
            }
        }
        Err(r) => Next::Refused(r),
    }
}

/// Answers a command refused by [`classify`].
pub fn refuse(shared: &Shared, session: &mut Session, r: Reply, out: &mut Vec<u8>) {
    shared.stats.count_error(error_text(&r));
    emit(session, r, out);
}

fn error_text(r: &Reply) -> &str {
    match r {
        Reply::Error(e) => e,
        _ => "ERR",
    }
}

/// Appends a reply as the session's reply mode allows.
fn emit(session: &mut Session, reply: Reply, out: &mut Vec<u8>) {
    if session.silent {
        session.silent = false;
        return;
    }
    // Pub/sub confirmations are pushes, which `CLIENT REPLY OFF|SKIP`
    // does not silence (in either protocol, as in Redis).
    let push = is_push(&reply);
    match session.reply_mode {
        ReplyMode::On => reply.encode(session.proto, out),
        ReplyMode::Off if push => reply.encode(session.proto, out),
        ReplyMode::Off => {}
        ReplyMode::Skip => session.reply_mode = ReplyMode::Skipping,
        ReplyMode::Skipping => {
            session.reply_mode = ReplyMode::On;
            if push {
                reply.encode(session.proto, out);
            }
        }
    }
}

fn is_push(r: &Reply) -> bool {
    match r {
        Reply::Push(_) => true,
        Reply::Several(rs) => !rs.is_empty() && rs.iter().all(is_push),
        _ => false,
    }
}

/// The checks before a command runs or is queued: it exists, has its
/// arity, the client may run it. A refused command inside `MULTI` makes
/// `EXEC` abort.
fn admit<'a>(
    shared: &Shared,
    session: &mut Session,
    args: &'a Args<'a>,
) -> Result<Admitted<'a>, Reply> {
    let refuse = |session: &mut Session, index: Option<usize>, r: Reply| {
        session.flag_transaction_error();
        shared.stats.count_refused(index);
        Err(r)
    };
    let Some((index, spec)) = command::lookup_indexed(args[0]) else {
        return refuse(session, None, command::unknown(args));
    };
    if !command::arity_ok(spec, args) {
        return refuse(session, Some(index), command::wrong_arity(spec.name));
    }
    if shared.scripts.busy(shared.settings.busy_ms()) && !command::allowed_while_busy(args) {
        let busy = command::busy_reply(shared);
        // A refused EXEC ends its transaction, saying why (as Redis).
        if spec.name == "exec" && session.in_transaction() {
            session.take_transaction();
            command::unwatch_all(shared, session);
            shared.stats.count_refused(Some(index));
            return Err(Reply::Error(format!(
                "EXECABORT Transaction discarded because of: {}",
                error_text(&busy)
            )));
        }
        return refuse(session, Some(index), busy);
    }
    if !session.authenticated && !spec.has(NOAUTH) {
        return refuse(
            session,
            Some(index),
            Reply::Error("NOAUTH Authentication required.".into()),
        );
    }
    if spec.kind == Kind::Write && !spec.has(SCRIPTED) && shared.ks.is_replica() {
        return refuse(
            session,
            Some(index),
            Reply::Error("READONLY You can't write against a read only replica.".into()),
        );
    }
    if spec.kind != Kind::Admin && shared.ks.is_loading() {
        return refuse(
            session,
            Some(index),
            Reply::Error("LOADING Redis is loading the dataset in memory".into()),
        );
    }
    if session.in_transaction() && spec.has(NOMULTI) {
        return refuse(
            session,
            Some(index),
            Reply::err("Command not allowed inside a transaction"),
        );
    }
    if session.subscriptions() > 0 && session.proto == 2 && !spec.has(PUBSUB) {
        return refuse(
            session,
            Some(index),
            Reply::err(format!(
                "Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
                spec.name
            )),
        );
    }
    Ok(Admitted { index, spec, args })
}

fn groupable(session: &Session, spec: &Spec) -> bool {
    !spec.has(ALONE) && !session.in_transaction() && session.blocked.is_none()
}

/// The reply for a unit of work whose storage failed.
fn storage_reply(e: &ModelError) -> Reply {
    match e {
        ModelError::Store(se) if se.is_no_space() => Reply::err(format!(
            "disk is full, writes are refused until space is freed ({se})"
        )),
        other => Reply::err(format!("storage error: {other}")),
    }
}

/// Runs one command in `tx`; a failed command leaves nothing behind.
fn run_one(
    tx: &mut Tx<'_>,
    session: &mut Session,
    shared: &Shared,
    c: &Admitted<'_>,
    in_exec: bool,
) -> Result<Reply, ModelError> {
    tx.tick();
    let sp = tx.savepoint();
    let t0 = Instant::now();
    let result = {
        let mut ctx = Ctx {
            tx,
            session,
            shared,
            in_exec,
        };
        (c.spec.run)(&mut ctx, c.args)
    };
    let reply = match result {
        Ok(r) => r,
        Err(Fail::Reply(r)) => {
            tx.rollback(sp);
            r
        }
        Err(Fail::Storage(e)) => return Err(e),
    };
    if tx.wrote_since(&sp) {
        shared.stats.count_dirty();
    }
    tx.expire_stale()?;
    // One clock read for both (a pipelined command costs a few hundred
    // nanoseconds; each read of the clock is tens of them).
    let end = Instant::now();
    session.last_command = end;
    let failed = reply.is_error();
    shared
        .stats
        .count_call(c.index, end.duration_since(t0).as_micros() as u64, failed);
    if let Reply::Error(e) = &reply {
        shared.stats.count_error(e);
    }
    Ok(reply)
}

/// The transaction a set of commands needs: exclusive if any writes.
fn begin<'a>(shared: &'a Shared, write: bool) -> Tx<'a> {
    if write {
        shared.ks.write()
    } else {
        shared.ks.read()
    }
}

/// How long a loop waits on the keyspace lock before it looks whether a
/// script holding it has become busy.
const LOCK_POLL: Duration = Duration::from_millis(5);

/// [`begin`], or `BUSY` once a script holding the lock has run past
/// `busy-reply-threshold` (a loop never waits out a runaway script: it
/// has `SCRIPT KILL` to read).
fn begin_unless_busy<'a>(shared: &'a Shared, write: bool) -> Result<Tx<'a>, Reply> {
    loop {
        let tx = if write {
            shared.ks.try_write_for(LOCK_POLL)
        } else {
            shared.ks.try_read_for(LOCK_POLL)
        };
        if let Some(tx) = tx {
            return Ok(tx);
        }
        if shared.scripts.busy(shared.settings.busy_ms()) {
            return Err(command::busy_reply(shared));
        }
    }
}

/// Serves the clients blocked on keys `tx` gave elements, inside `tx`.
fn serve_blocked(
    shared: &Shared,
    tx: &mut Tx<'_>,
    served: &mut Vec<(Arc<Mailbox>, Reply)>,
) -> Result<(), ModelError> {
    loop {
        let mut ready = tx.take_ready();
        if ready.is_empty() {
            return Ok(());
        }
        ready.dedup();
        for (db, key) in ready {
            while let Some(w) = shared.blocked.first(db, &key) {
                let mut session = Session::new(w.client, String::new(), true, w.mailbox.clone());
                session.db = w.db;
                session.proto = w.mailbox.proto();
                let sp = tx.savepoint();
                let result = {
                    let mut ctx = Ctx {
                        tx,
                        session: &mut session,
                        shared,
                        in_exec: true,
                    };
                    command::serve_waiter(&mut ctx, &crate::request::view(&w.args))
                };
                let reply = match result {
                    Ok(Some(r)) => r,
                    Ok(None) => break,
                    Err(Fail::Reply(r)) => {
                        tx.rollback(sp);
                        r
                    }
                    Err(Fail::Storage(e)) => return Err(e),
                };
                if shared.take_waiter(w.client).is_some() {
                    if tx.wrote_since(&sp) {
                        shared.stats.count_dirty();
                    }
                    served.push((w.mailbox, reply));
                }
            }
        }
    }
}

/// Serves blocked clients, commits, and records what follows the commit.
fn finish(shared: &Shared, mut tx: Tx<'_>, after: &mut After) -> Result<(), ModelError> {
    let mut served = Vec::new();
    if tx.writable() {
        if let Err(e) = serve_blocked(shared, &mut tx, &mut served) {
            fail_served(&mut served, &e, after);
            return Err(e);
        }
    }
    match tx.commit() {
        Ok(c) => {
            after.events.extend(c.events);
            after.deliveries.extend(served);
            Ok(())
        }
        Err(e) => {
            fail_served(&mut served, &e, after);
            Err(e)
        }
    }
}

/// Clients served by a unit of work that failed get its failure.
fn fail_served(served: &mut Vec<(Arc<Mailbox>, Reply)>, e: &ModelError, after: &mut After) {
    for (mb, _) in served.drain(..) {
        after.deliveries.push((mb, storage_reply(e)));
    }
}

/// Removes expired keys a read transaction met, in a write transaction
/// of their own (a read holds the lock shared and cannot write).
fn expire_met(
    shared: &Shared,
    stale: Vec<(u8, Vec<u8>)>,
    after: &mut After,
) -> Result<(), ModelError> {
    // A replica's keys are removed by its master's deletes, as in Redis.
    if shared.ks.is_replica() {
        return Ok(());
    }
    let mut tx = begin(shared, true);
    tx.add_stale(stale);
    tx.expire_stale()?;
    finish(shared, tx, after)
}

/// Runs a group of commands from any number of connections in one
/// transaction: each connection's commands together and in its order, each reply into
/// its own connection's buffer; a failed commit answers every command of
/// the group with the failure.
pub fn run_group(
    shared: &Shared,
    group: &[(usize, Admitted<'_>)],
    members: &mut impl Members,
    after: &mut After,
) {
    let write = group.iter().any(|(_, c)| c.spec.kind == Kind::Write);
    let first = match begin_unless_busy(shared, write) {
        Ok(tx) => tx,
        Err(busy) => {
            for (who, _) in group {
                let (session, out) = members.member(*who);
                shared.stats.count_error(error_text(&busy));
                emit(session, busy.clone(), out);
            }
            return;
        }
    };
    let mut tx = Some(first);
    // Where each member's replies of this group begin, to take them back.
    let mut marks: Vec<(usize, usize, ReplyMode)> = Vec::new();
    let mut failure = None;
    for (who, c) in group {
        let Some(t) = tx.as_mut() else { break };
        let (session, out) = members.member(*who);
        // A group lists each connection's commands together.
        if marks.last().map(|m| m.0) != Some(*who) {
            marks.push((*who, out.len(), session.reply_mode));
        }
        match run_one(t, session, shared, c, false) {
            Ok(r) => emit(session, r, out),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
        // A read that met expired keys removes them before the next
        // command runs, as the next command would not see them in Redis.
        if !write && t.met_stale() {
            let stale = t.take_stale();
            if let Some(t) = tx.take() {
                if let Err(e) = finish(shared, t, after) {
                    failure = Some(e);
                    break;
                }
            }
            if let Err(e) = expire_met(shared, stale, after) {
                failure = Some(e);
                break;
            }
            tx = Some(begin(shared, false));
        }
    }
    let result = match (failure, tx) {
        (Some(e), _) => Err(e),
        (None, Some(t)) => finish(shared, t, after),
        (None, None) => Ok(()),
    };
    if let Err(e) = result {
        for (who, mark, mode) in marks {
            let (session, out) = members.member(who);
            out.truncate(mark);
            session.reply_mode = mode;
        }
        let r = storage_reply(&e);
        for (who, _) in group {
            let (session, out) = members.member(*who);
            shared.stats.count_error(error_text(&r));
            emit(session, r.clone(), out);
        }
    }
}

/// Runs a command that cannot share a group (it changes the session,
/// blocks, or runs inside `MULTI`).
pub fn run_alone(
    shared: &Shared,
    session: &mut Session,
    c: Admitted<'_>,
    out: &mut Vec<u8>,
    after: &mut After,
) {
    if session.in_transaction() && !c.spec.has(NOQUEUE) {
        session.queue(crate::request::to_owned(c.args));
        emit(session, Reply::Status("QUEUED".into()), out);
        return;
    }
    if let Some(r) = command::lockless(shared, session, c.args) {
        emit(session, r, out);
        return;
    }
    if c.spec.has(SCRIPTED) {
        // The script thread runs it and answers through the mailbox; the
        // connection's next commands wait for that answer.
        shared.scripts.submit(Job {
            client: session.id,
            db: session.db,
            args: crate::request::to_owned(c.args),
            mailbox: session.mailbox.clone(),
        });
        session.blocked = Some(Block {
            deadline: None,
            timeout_reply: Reply::Nothing,
            wait: false,
        });
        return;
    }
    if c.spec.name == "exec" {
        let r = exec(shared, session, &c, after);
        emit(session, r, out);
        return;
    }
    let mut tx = match begin_unless_busy(shared, c.spec.kind == Kind::Write) {
        Ok(tx) => tx,
        Err(busy) => {
            shared.stats.count_error(error_text(&busy));
            emit(session, busy, out);
            return;
        }
    };
    let reply = match run_one(&mut tx, session, shared, &c, false) {
        Ok(r) => {
            let stale = tx.take_stale();
            finish(shared, tx, after)
                .and_then(|()| match stale.is_empty() {
                    true => Ok(()),
                    false => expire_met(shared, stale, after),
                })
                .map(|()| r)
        }
        Err(e) => Err(e),
    };
    let reply = reply.unwrap_or_else(|e| {
        // A command that blocked in a failed transaction waits no more.
        if session.blocked.take().is_some() {
            shared.take_waiter(session.id);
        }
        storage_reply(&e)
    });
    emit(session, reply, out);
}

/// `EXEC`: the queued commands as one transaction, unless queueing
/// failed or a watched key changed.
fn exec(shared: &Shared, session: &mut Session, c: &Admitted<'_>, after: &mut After) -> Reply {
    let Some((queued, failed)) = session.take_transaction() else {
        return Reply::err("EXEC without MULTI");
    };
    if failed {
        command::unwatch_all(shared, session);
        return Reply::Error("EXECABORT Transaction discarded because of previous errors.".into());
    }
    let views: Vec<Vec<&[u8]>> = queued.iter().map(crate::request::view).collect();
    let specs: Vec<Admitted<'_>> = views
        .iter()
        .filter_map(|args| {
            command::lookup_indexed(args[0]).map(|(index, spec)| Admitted {
                index,
                spec,
                args: args.as_slice(),
            })
        })
        .collect();
    // Exclusive even for reads: an expired key a queued read meets is
    // removed before the next queued command runs.
    let mut tx = match begin_unless_busy(shared, true) {
        Ok(tx) => tx,
        Err(busy) => {
            command::unwatch_all(shared, session);
            return busy;
        }
    };
    tx.tick();
    let spoiled = match watch_spoiled(shared, session, &tx) {
        Ok(s) => s,
        Err(e) => return storage_reply(&e),
    };
    command::unwatch_all(shared, session);
    shared.stats.count_call(c.index, 0, false);
    if spoiled {
        return Reply::NullArray;
    }
    let mut replies = Vec::with_capacity(specs.len());
    for q in &specs {
        match run_one(&mut tx, session, shared, q, true) {
            Ok(r) => replies.push(r),
            Err(e) => return storage_reply(&e),
        }
    }
    match finish(shared, tx, after) {
        Ok(()) => Reply::Array(replies),
        Err(e) => storage_reply(&e),
    }
}

/// Whether a key the session watches changed, or expired, since it was
/// watched (a key already expired when watched does not count).
fn watch_spoiled(shared: &Shared, session: &Session, tx: &Tx<'_>) -> Result<bool, ModelError> {
    if session.watch_spoiled() {
        return Ok(true);
    }
    for (db, key) in &session.watched {
        if !shared.ks.watches().stale(session.id, *db, key) && tx.lookup(*db, key)?.stale() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Runs scripts the connections handed to the script thread, in one
/// transaction, and answers each through its mailbox once the
/// transaction is committed (and, under `--sync always`, synced); a
/// failed commit answers every one of them with the failure.
pub fn run_scripts(shared: &Shared, jobs: &[Job]) {
    let mut tx = begin(shared, true);
    let mut after = After::default();
    let mut replies = Vec::with_capacity(jobs.len());
    let mut failure = None;
    for job in jobs {
        let args = crate::request::view(&job.args);
        let Some((index, spec)) = command::lookup_indexed(args[0]) else {
            continue;
        };
        let mut session = Session::new(job.client, String::new(), true, job.mailbox.clone());
        session.db = job.db;
        session.proto = job.mailbox.proto();
        let c = Admitted {
            index,
            spec,
            args: &args,
        };
        match run_one(&mut tx, &mut session, shared, &c, true) {
            Ok(r) => replies.push((job.mailbox.clone(), r)),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    let result = match failure {
        Some(e) => Err(e),
        None => finish(shared, tx, &mut after).and_then(|()| {
            if shared.config.sync == ferrite::SyncMode::Always {
                shared.ks.sync_seen().map_err(ModelError::Store)
            } else {
                Ok(())
            }
        }),
    };
    if let Err(e) = result {
        let r = storage_reply(&e);
        shared.stats.count_error(error_text(&r));
        replies = jobs
            .iter()
            .map(|j| (j.mailbox.clone(), r.clone()))
            .collect();
        for (_, r) in after.deliveries.iter_mut() {
            *r = storage_reply(&e);
        }
        after.events.clear();
    }
    for (mb, r) in replies {
        let mut bytes = Vec::new();
        r.encode(mb.proto(), &mut bytes);
        mb.serve(&bytes);
    }
    after.release(shared);
}
