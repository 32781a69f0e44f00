//! The reader pool: threads that run key reads an event loop handed over
//! while reads go to the device ([`crate::read_route`] decides when), so
//! a read waiting on the device holds one reader and not a loop with all
//! its connections. Many readers keep many device reads in flight, as
//! more loops did, without more loops' cost when reads stay in cache.
//!
//! A loop hands over a connection's run of key reads (the commands up to
//! its first one that is not a key read) as one [`Job`], with a view of
//! its session; the reader runs them as one group, as the loop would
//! have, and gives the replies back through the loop's [`Back`].
//!
//! Invariants:
//! - a connection has at most one job out, and its loop runs none of its
//!   commands and closes it only if the socket broke until the job is
//!   back (the connection is parked): its replies keep its commands'
//!   order, the job's after the ones its loop wrote before it;
//! - under `--sync always` a job's replies, and what its reads owe other
//!   connections (the events of keys they found expired), leave only
//!   after one sync covering every commit the job may have read, as a
//!   loop's turn does;
//! - the pool stops when every loop has stopped and dropped its handle,
//!   so no job is left unanswered.

use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{unbounded, Receiver, Sender};
use ferrite::SyncMode;

use crate::command::{self, ALONE};
use crate::executor::{self, After, Members, Next};
use crate::reply::Reply;
use crate::request::{Args, OwnedArgs};
use crate::session::{ReplyMode, Session};
use crate::shared::Shared;

/// A connection's key reads, handed over.
pub struct Job {
    /// The connection, as its loop knows it.
    pub key: usize,
    /// A view of its session ([`Session::view`]).
    pub session: Session,
    pub commands: Vec<OwnedArgs>,
    pub back: Arc<dyn Back>,
}

/// A job's replies, going back to the connection's loop.
pub struct Done {
    pub key: usize,
    /// The client the job was for (its loop may have closed it meanwhile
    /// and given the key to another).
    pub client: u64,
    pub out: Vec<u8>,
    /// The store failed: the replies are one error; close after them.
    pub close: bool,
}

/// Where a job's replies go: the loop that owns the connection.
pub trait Back: Send + Sync {
    fn back(&self, done: Done);
}

/// The handle loops hand jobs through.
#[derive(Clone)]
pub struct Readers {
    jobs: Sender<Job>,
}

impl Readers {
    /// Starts `n` reader threads. They stop once every handle is dropped
    /// and the jobs sent are answered.
    pub fn start(shared: &Arc<Shared>, n: usize) -> std::io::Result<(Self, Vec<JoinHandle<()>>)> {
        let (tx, rx) = unbounded::<Job>();
        let mut threads = Vec::with_capacity(n);
        for i in 0..n {
            let rx: Receiver<Job> = rx.clone();
            let shared = shared.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("ferrite-read-{i}"))
                    .spawn(move || {
                        for job in rx.iter() {
                            serve(&shared, job);
                        }
                    })?,
            );
        }
        Ok((Self { jobs: tx }, threads))
    }

    /// Hands a job to a reader. Fails only once the readers are gone
    /// (never while a loop holds this handle), with the number of
    /// commands the job held, none of them run.
    pub fn hand(&self, job: Job) -> Result<(), usize> {
        self.jobs.send(job).map_err(|e| e.0.commands.len())
    }
}

/// Whether a command may be handed to a reader: a key read that can share
/// a group, from a session that takes every reply and holds no state the
/// view leaves out.
pub fn may_take(session: &Session, args: &Args) -> bool {
    let Some((_, spec)) = command::lookup_indexed(args[0]) else {
        return false;
    };
    spec.kind == command::Kind::Read
        && spec.keys.0 > 0
        && !spec.has(ALONE)
        && command::arity_ok(spec, args)
        && session.authenticated
        && !session.in_transaction()
        && session.blocked.is_none()
        && session.subscriptions() == 0
        && session.reply_mode == ReplyMode::On
        && !session.silent
        && !session.close_after_reply
}

/// The job's one member: its session view and its replies.
struct One<'a>(&'a mut Session, &'a mut Vec<u8>);

impl Members for One<'_> {
    fn member(&mut self, _: usize) -> (&mut Session, &mut Vec<u8>) {
        (self.0, self.1)
    }
}

fn serve(shared: &Shared, job: Job) {
    let Job {
        key,
        mut session,
        commands,
        back,
    } = job;
    let mut out = Vec::new();
    let mut after = After::default();
    let device_before = ferrite::thread_device_reads();
    run(shared, &mut session, &commands, &mut out, &mut after);
    let device_reads = ferrite::thread_device_reads() - device_before;
    let mut close = false;
    if shared.config.sync == SyncMode::Always {
        if let Err(e) = shared.ks.sync_seen() {
            out.clear();
            Reply::err(format!("storage error: {e}")).encode(session.proto, &mut out);
            close = true;
            after.fail(&e);
        }
    }
    after.release(shared);
    shared
        .route
        .record(commands.len() as u64, device_reads, true);
    back.back(Done {
        key,
        client: session.id,
        out,
        close,
    });
}

/// Runs the commands in order, those that may share a group together
/// (the checks a loop made are made again: the server may have changed
/// since, say into a replica that is loading).
fn run(
    shared: &Shared,
    session: &mut Session,
    commands: &[OwnedArgs],
    out: &mut Vec<u8>,
    after: &mut After,
) {
    let views: Vec<Vec<&[u8]>> = commands.iter().map(crate::request::view).collect();
    let mut group = Vec::with_capacity(views.len());
    for args in &views {
        match executor::classify(shared, session, args) {
            Next::Group(a) => group.push((0, a)),
            other => {
                if !group.is_empty() {
                    executor::run_group(shared, &group, &mut One(session, out), after);
                    group.clear();
                }
                match other {
                    Next::Refused(r) => executor::refuse(shared, session, r, out),
                    Next::Alone(a) => executor::run_alone(shared, session, a, out, after),
                    // Taken by the arm above.
                    Next::Group(_) => {}
                }
            }
        }
    }
    if !group.is_empty() {
        executor::run_group(shared, &group, &mut One(session, out), after);
    }
}
