//! The typed errors of the device layer.
//!
//! Every failure names what was being done and where (path and byte offset),
//! so an engine can wrap it without losing the location. Zoned-device rule
//! violations are their own enum, one variant per rule, because engines on
//! zoned storage must be able to tell a broken rule from a failed medium.

use std::path::PathBuf;

/// Result alias for device operations.
pub type Result<T, E = DeviceError> = std::result::Result<T, E>;

/// Which device operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoOp {
    Open,
    Read,
    Write,
    Sync,
    SetLen,
    Append,
    ZoneManagement,
}

impl std::fmt::Display for IoOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            IoOp::Open => "open",
            IoOp::Read => "read",
            IoOp::Write => "write",
            IoOp::Sync => "sync",
            IoOp::SetLen => "set_len",
            IoOp::Append => "zone append",
            IoOp::ZoneManagement => "zone management",
        };
        f.write_str(s)
    }
}

/// An error from a storage device.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceError {
    /// The operating system refused or failed an operation.
    #[error("{op} failed on {} at offset {offset}: {source}", path.display())]
    Os {
        op: IoOp,
        path: PathBuf,
        offset: u64,
        #[source]
        source: std::io::Error,
    },

    /// An offset, length or buffer address is not a multiple of the device's
    /// block size; O_DIRECT would reject it, so every device does.
    #[error("misaligned {what}: {value} is not a multiple of {align} bytes")]
    Misaligned {
        what: &'static str,
        value: u64,
        align: usize,
    },

    /// The range reaches past the end of the device.
    #[error("{op} of {len} bytes at offset {offset} is past the device end ({device_len} bytes)")]
    OutOfRange {
        op: IoOp,
        offset: u64,
        len: u64,
        device_len: u64,
    },

    /// The kernel returned fewer bytes than asked.
    #[error("short {op} at offset {offset}: {done} of {len} bytes")]
    Short {
        op: IoOp,
        offset: u64,
        len: u64,
        done: u64,
    },

    /// The device (or the file system under it) has no room left.
    #[error("no space left on device during {op} at offset {offset}")]
    NoSpace { op: IoOp, offset: u64 },

    /// A zoned-device rule was broken; nothing was written.
    #[error(transparent)]
    Zone(#[from] ZoneError),

    /// A fault planted by [`crate::FaultyDevice`].
    #[error("injected {kind} fault on {op} at offset {offset}")]
    Injected {
        op: IoOp,
        offset: u64,
        kind: &'static str,
    },

    /// The device was crashed by [`crate::FaultyDevice::crash`] and refuses
    /// every operation until it is restarted.
    #[error("device has crashed; restart it before use")]
    Crashed,

    /// Persistent device metadata (for example an emulated zone table) failed
    /// its checksum or does not describe this device.
    #[error("corrupt device metadata in {}: {reason}", path.display())]
    CorruptMetadata { path: PathBuf, reason: String },

    /// The device was configured with values that cannot work.
    #[error("invalid device configuration: {0}")]
    InvalidConfig(String),
}

/// A broken zoned-storage rule (modelled on NVMe ZNS status codes).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ZoneError {
    #[error("zone {zone} does not exist (device has {zone_count} zones)")]
    NoSuchZone { zone: u32, zone_count: u32 },

    #[error("write at offset {offset} in zone {zone} is not at the write pointer {write_pointer}")]
    NotAtWritePointer {
        zone: u32,
        offset: u64,
        write_pointer: u64,
    },

    #[error("write of {len} bytes at {offset} crosses the capacity of zone {zone} (ends at {capacity_end})")]
    PastCapacity {
        zone: u32,
        offset: u64,
        len: u64,
        capacity_end: u64,
    },

    #[error("write crosses the boundary of zone {zone}")]
    CrossesZoneBoundary { zone: u32 },

    #[error("zone {zone} is full")]
    ZoneFull { zone: u32 },

    #[error("zone {zone} is read-only")]
    ZoneReadOnly { zone: u32 },

    #[error("zone {zone} is offline")]
    ZoneOffline { zone: u32 },

    #[error("opening zone {zone} would exceed the limit of {max_open} open zones")]
    TooManyOpenZones { zone: u32, max_open: u32 },

    #[error("activating zone {zone} would exceed the limit of {max_active} active zones")]
    TooManyActiveZones { zone: u32, max_active: u32 },

    #[error("zone {zone} in state {state} cannot be {action}")]
    InvalidTransition {
        zone: u32,
        state: &'static str,
        action: &'static str,
    },

    #[error(
        "read of [{offset}, {end}) in zone {zone} reaches past the write pointer {write_pointer}"
    )]
    ReadPastWritePointer {
        zone: u32,
        offset: u64,
        end: u64,
        write_pointer: u64,
    },

    #[error("zone append of {len} bytes exceeds the append size limit of {limit} bytes")]
    AppendTooLarge { len: u64, limit: u64 },
}

impl DeviceError {
    /// Wraps an OS error, mapping ENOSPC and EDQUOT to [`DeviceError::NoSpace`].
    pub fn os(op: IoOp, path: &std::path::Path, offset: u64, source: std::io::Error) -> Self {
        match source.raw_os_error() {
            Some(libc::ENOSPC) | Some(libc::EDQUOT) => DeviceError::NoSpace { op, offset },
            _ => DeviceError::Os {
                op,
                path: path.to_path_buf(),
                offset,
                source,
            },
        }
    }
}
