//! Errors of the benchmark harness.

use std::path::PathBuf;

pub type Result<T, E = BenchError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// A store under test failed.
    #[error("{target}: {source}")]
    Store {
        target: String,
        #[source]
        source: ferrite::Error,
    },

    /// An input file (keys, trace) is missing or malformed.
    #[error("{}: {reason}", path.display())]
    Data { path: PathBuf, reason: String },

    /// A block trace could not be read or parsed.
    #[error(transparent)]
    Trace(#[from] ferrite_trace::TraceError),

    /// The benchmark was configured with values that cannot work.
    #[error("invalid benchmark configuration: {0}")]
    Config(String),

    /// A store under test answered what the experiment knows is wrong
    /// (a record missing, a removal that stopped): its figures would mean
    /// nothing.
    #[error("check failed: {0}")]
    Check(String),

    /// The target is not compiled into this build (enable its cargo feature).
    #[error("target {0} is not available in this build; {1}")]
    Unavailable(String, &'static str),

    /// An outside program an experiment drives is not installed.
    #[error("{tool} is not installed; {how} installs it")]
    ToolMissing { tool: String, how: &'static str },

    #[error("writing {}: {source}", path.display())]
    Output {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}
