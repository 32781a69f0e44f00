//! Why a server process could not be started, found ready or stopped.

use std::process::ExitStatus;

pub type Result<T> = std::result::Result<T, ProcessError>;

#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The process ended before it was ready; `output` is what it said on
    /// stderr when that was captured.
    #[error("{name} exited at start ({status}){output}")]
    ExitedAtStart {
        name: String,
        status: ExitStatus,
        output: String,
    },
    #[error("{name} was not ready after {seconds} s")]
    NotReady { name: String, seconds: u64 },
    #[error("{name} stopped with {status}")]
    Failed { name: String, status: ExitStatus },
    #[error("{name} did not stop within {seconds} s of SIGTERM")]
    DidNotStop { name: String, seconds: u64 },
}

impl ProcessError {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| ProcessError::Io { what, source }
    }
}
