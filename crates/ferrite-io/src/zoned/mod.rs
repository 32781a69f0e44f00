//! Zoned storage, modelled on NVMe Zoned Namespaces (ZNS).
//!
//! A zoned device is split into equal zones. Each zone has a size (its share
//! of the address space, a power of two by industry convention) and a smaller
//! capacity (the writable part); a write pointer; and a condition (empty,
//! implicitly or explicitly open, closed, full, read-only, offline). Writes
//! land only at the write pointer; zone append lets the device choose the
//! spot and reports it. At most `max_open` zones may be open and at most
//! `max_active` open or closed at once.
//!
//! - [`ZoneGeometry`]: the shape and limits of a device.
//! - [`ZoneTable`]: the rule book, a pure state machine with no I/O.
//! - [`EmulatedZonedDevice`]: a zoned device on top of any
//!   [`crate::BlockDevice`], with its zone table persisted so that zone
//!   state survives close, reopen and (when stacked on
//!   [`crate::FaultyDevice`]) crashes.

mod emulated;
mod geometry;
mod table_codec;
mod zone_table;

pub use emulated::EmulatedZonedDevice;
pub use geometry::ZoneGeometry;
pub use zone_table::{ZoneCondition, ZoneTable};

use crate::accounting::IoStats;
use crate::block_device::ReadReq;
use crate::error::Result;

/// What a zone report says about one zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZoneInfo {
    pub zone: u32,
    /// Device byte address of the zone's first byte.
    pub start: u64,
    /// Writable bytes in the zone.
    pub capacity: u64,
    /// Device byte address where the next write must land.
    pub write_pointer: u64,
    pub condition: ZoneCondition,
}

/// A zoned block device. Addresses are device byte addresses: zone `z`
/// spans `[z * zone_size, z * zone_size + capacity)` of writable bytes.
pub trait ZonedDevice: Send + Sync {
    fn geometry(&self) -> &ZoneGeometry;

    /// Reads written data. Reading at or past a zone's write pointer is an
    /// error (except in a finished zone, which reads as zeros there).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()>;

    /// Reads a batch concurrently where the device can.
    fn read_batch(&self, reqs: &mut [ReadReq<'_>]) -> Result<()>;

    /// Zone write: `offset` must equal the zone's write pointer and the data
    /// must fit in the zone's capacity.
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()>;

    /// Zone append: the device places `buf` at the write pointer of `zone`
    /// and returns the device address it landed at.
    fn append(&self, zone: u32, buf: &[u8]) -> Result<u64>;

    fn open_zone(&self, zone: u32) -> Result<()>;
    fn close_zone(&self, zone: u32) -> Result<()>;
    fn finish_zone(&self, zone: u32) -> Result<()>;
    /// Empties the zone; its old data reads as zeros afterwards.
    fn reset_zone(&self, zone: u32) -> Result<()>;

    /// Reports `count` zones starting at `first` (fewer at the device end).
    fn report_zones(&self, first: u32, count: u32) -> Vec<ZoneInfo>;

    /// Makes written data and the zone state durable.
    fn sync(&self) -> Result<()>;

    fn io_stats(&self) -> IoStats;

    fn describe(&self) -> String;
}
