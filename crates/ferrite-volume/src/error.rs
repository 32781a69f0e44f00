//! The volume's typed errors, and the NBD error number each maps to.
//!
//! A client of the NBD server sees only the error number; the server log
//! and library callers see the whole message.

use std::path::PathBuf;

pub type Result<T, E = VolumeError> = std::result::Result<T, E>;

/// Why a volume operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VolumeError {
    /// The directory holds no volume, or one this build cannot read.
    #[error("{} is not a ferrite volume: {reason}", path.display())]
    NotAVolume { path: PathBuf, reason: String },

    /// A volume already lives in the directory `create` was given.
    #[error("{} already holds a volume; pick another directory", path.display())]
    AlreadyExists { path: PathBuf },

    /// Another process has the volume open.
    #[error("{} is in use by another process", path.display())]
    InUse { path: PathBuf },

    /// Sizes that cannot make a volume (zero, unaligned, too large).
    #[error("invalid volume geometry: {0}")]
    InvalidGeometry(String),

    /// A request reaching past the end of the volume.
    #[error("{len} bytes at offset {offset} reach past the volume's end ({size} bytes)")]
    OutOfRange { offset: u64, len: u64, size: u64 },

    /// A buffer whose length differs from the request's.
    #[error("buffer of {got} bytes for a request of {want}")]
    BufferSize { got: usize, want: u64 },

    /// Every segment holds live data and reclamation freed nothing: the
    /// device is full. Nothing was written.
    #[error("no free segment: the volume's data log is full ({live_blocks} live blocks in {segments} segments)")]
    NoSpace { live_blocks: u64, segments: u32 },

    /// Bytes on the device that fail their checks.
    #[error("corrupt {what}: {reason}")]
    Corruption { what: &'static str, reason: String },

    /// An earlier write or sync failed; later writes are refused until the
    /// volume is reopened (recovery decides what survived).
    #[error("volume poisoned by an earlier failure: {0}")]
    Poisoned(String),

    /// The volume is closing.
    #[error("the volume is shutting down")]
    ShuttingDown,

    #[error(transparent)]
    Device(#[from] ferrite_io::DeviceError),

    #[error("block map: {0}")]
    Map(#[from] ferrite_rask::RaskError),

    #[error("block map log: {0}")]
    Log(#[from] ferrite_core::Error),

    /// The NBD server could not listen where it was told, or was told
    /// no address and no socket.
    #[error(transparent)]
    Listen(ferrite_net::NetError),

    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

/// NBD error numbers (the protocol's, which are Linux's errno values).
pub mod errno {
    pub const EPERM: u32 = 1;
    pub const EIO: u32 = 5;
    pub const ENOMEM: u32 = 12;
    pub const EINVAL: u32 = 22;
    pub const ENOSPC: u32 = 28;
    pub const EOVERFLOW: u32 = 75;
    pub const ENOTSUP: u32 = 95;
    pub const ESHUTDOWN: u32 = 108;
}

impl VolumeError {
    /// True when the failure was a full device.
    pub fn is_no_space(&self) -> bool {
        match self {
            VolumeError::NoSpace { .. } => true,
            VolumeError::Device(e) => matches!(e, ferrite_io::DeviceError::NoSpace { .. }),
            VolumeError::Map(e) => e.is_no_space(),
            VolumeError::Log(e) => e.is_no_space(),
            _ => false,
        }
    }

    /// The error number an NBD reply carries for this failure.
    pub fn nbd_errno(&self) -> u32 {
        if self.is_no_space() {
            return errno::ENOSPC;
        }
        match self {
            VolumeError::OutOfRange { .. }
            | VolumeError::BufferSize { .. }
            | VolumeError::InvalidGeometry(_) => errno::EINVAL,
            VolumeError::ShuttingDown => errno::ESHUTDOWN,
            _ => errno::EIO,
        }
    }

    /// The same failure for another member of a write group (errors do
    /// not clone: an I/O error becomes the poisoning it caused).
    pub(crate) fn replicate(&self) -> VolumeError {
        match self {
            VolumeError::NoSpace {
                live_blocks,
                segments,
            } => VolumeError::NoSpace {
                live_blocks: *live_blocks,
                segments: *segments,
            },
            VolumeError::ShuttingDown => VolumeError::ShuttingDown,
            e if e.is_no_space() => VolumeError::NoSpace {
                live_blocks: 0,
                segments: 0,
            },
            e => VolumeError::Poisoned(e.to_string()),
        }
    }

    pub(crate) fn corrupt(what: &'static str, reason: impl Into<String>) -> Self {
        VolumeError::Corruption {
            what,
            reason: reason.into(),
        }
    }
}
