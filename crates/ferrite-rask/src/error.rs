//! RASK's typed errors.

use crate::range::BlockRange;

pub type Result<T, E = RaskError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RaskError {
    #[error("inverted range [{l}, {r}]: the left bound must not exceed the right")]
    InvertedRange { l: u64, r: u64 },

    #[error("empty range at block {start}: a range holds at least one block")]
    EmptyRange { start: u64 },

    #[error("range of {len} blocks from {start} runs past block u64::MAX")]
    RangeOverflow { start: u64, len: u64 },

    /// The value is the one reserved for tombstones, or cannot describe a
    /// range this long (e.g. a physical run past its address space).
    #[error("value {value} cannot be stored for {range}: {reason}")]
    InvalidValue {
        range: BlockRange,
        value: String,
        reason: &'static str,
    },

    #[error("leaf capacity {0} out of range: must be 4 to 128 entries")]
    BadCapacity(usize),

    /// A snapshot or log record failed its checksum or a structural check.
    #[error("corrupt {what}: {reason}")]
    Corruption { what: &'static str, reason: String },

    /// A device or log failure; after one the durable index is poisoned.
    #[error(transparent)]
    Store(#[from] ferrite_core::Error),

    #[error(transparent)]
    Device(#[from] ferrite_io::DeviceError),
}

impl RaskError {
    /// True when the index met bad bytes (see
    /// [`ferrite_core::Error::is_corruption`]).
    pub fn is_corruption(&self) -> bool {
        match self {
            RaskError::Corruption { .. } => true,
            RaskError::Store(e) => e.is_corruption(),
            RaskError::Device(e) => {
                matches!(e, ferrite_io::DeviceError::CorruptMetadata { .. })
            }
            _ => false,
        }
    }

    /// True when the failure was a full device (see
    /// [`ferrite_core::Error::is_no_space`]).
    pub fn is_no_space(&self) -> bool {
        match self {
            RaskError::Store(e) => e.is_no_space(),
            RaskError::Device(e) => matches!(e, ferrite_io::DeviceError::NoSpace { .. }),
            _ => false,
        }
    }
}

impl From<RaskError> for ferrite_core::Error {
    fn from(e: RaskError) -> Self {
        match e {
            RaskError::Store(e) => e,
            RaskError::Device(e) => ferrite_core::Error::Device(e),
            RaskError::Corruption { what, reason } => ferrite_core::Error::Corruption {
                location: what.to_string(),
                reason,
            },
            other => ferrite_core::Error::Rask(other.to_string()),
        }
    }
}
