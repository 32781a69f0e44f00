//! Errors of trace parsing.

use std::path::PathBuf;

pub type Result<T, E = TraceError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// The trace file cannot be read, or is not a trace of its format.
    #[error("{}: {reason}", path.display())]
    Data { path: PathBuf, reason: String },

    /// A line could not be parsed.
    #[error("{}:{line}: {reason}", path.display())]
    Line {
        path: PathBuf,
        line: usize,
        reason: String,
    },

    /// The format is not one this crate parses.
    #[error("unknown trace format {format:?}: expected one of {known}")]
    UnknownFormat { format: String, known: String },
}
