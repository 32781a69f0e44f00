//! Errors of trace parsing.

use std::path::{Path, PathBuf};

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

impl TraceError {
    /// Line `line` (counted from 1) of `path` is not what its format
    /// allows.
    pub(crate) fn at_line(path: &Path, line: usize, reason: &str) -> Self {
        TraceError::Line {
            path: path.to_path_buf(),
            line,
            reason: reason.into(),
        }
    }
}
