//! What a run reaches through `redis.call`: the command layer's side,
//! handed to the interpreter for one run. The interpreter knows no
//! command table, transaction or session; the command layer
//! (`command::scripting`) knows no Lua.
//!
//! Invariants: a host runs every call of a run inside the one
//! transaction the run started in; once a call failed on storage, the
//! host keeps that error and the run ends failed ([`Stopped::Storage`]),
//! whatever the script did with the error it was shown.

use crate::reply::Reply;

/// What one `redis.call` gave.
pub struct Called {
    /// The command's reply, a refusal's error included.
    pub reply: Reply,
    /// Whether the call wrote (a script that wrote may not be killed).
    pub wrote: bool,
}

/// A call's storage failed: the run's unit of work is lost (the host
/// keeps the error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failed;

/// The command layer's side of a run.
pub trait Host {
    /// Marks where the run's writes begin.
    fn begin(&mut self);
    /// Takes back the run's writes since [`Host::begin`] (a run stopped
    /// by a shutdown).
    fn roll_back(&mut self);
    /// Runs one command of the script; `read_only`: the run may not
    /// write.
    fn call(&mut self, args: &[&[u8]], read_only: bool) -> Result<Called, Failed>;
}

/// Why a run gave no reply of its own.
#[derive(Debug)]
pub enum Stopped {
    /// Refused or stopped, with the error to answer.
    Refused(Reply),
    /// A call's storage failed; the host holds the error.
    Storage,
}

impl From<Reply> for Stopped {
    fn from(r: Reply) -> Self {
        Stopped::Refused(r)
    }
}
