//! # ferrite-io: every byte ferrite moves goes through here
//!
//! This crate owns the device layer. Engines never touch files directly;
//! they hold a [`BlockDevice`] or a [`ZonedDevice`], which is what lets any
//! engine run unchanged on an O_DIRECT file, in memory, under injected
//! faults and crashes, or behind an artificial latency.
//!
//! | type | what it is |
//! |---|---|
//! | [`DirectFile`] | a regular file with O_DIRECT; batched reads via io_uring |
//! | [`MemDevice`] | a byte vector with the same alignment rules, for tests |
//! | [`FaultyDevice`] | EIO / ENOSPC / torn writes on chosen operations; `crash()` drops unsynced writes |
//! | [`LatencyDevice`] | a fixed or random delay per I/O, concurrency preserved |
//! | [`EmulatedZonedDevice`] | a ZNS-like zoned device over any block device, enforcing every zone rule |
//!
//! Invariants shared by all devices: every offset, length and buffer
//! address is a multiple of the device block size (use [`AlignedBuf`]);
//! data is durable only after `sync`; every device counts its I/O
//! ([`IoStats`]).

mod accounting;
mod aligned_buf;
mod block_device;
mod direct_file;
mod error;
mod faulty;
mod latency;
mod mem_device;
mod meta_file;
mod range_copy;
mod read_pool;
mod uring;
pub mod zoned;

pub use accounting::{
    bucket_upper_bound, size_bucket, thread_reads, IoCounters, IoStats, SIZE_BUCKETS,
};
pub use aligned_buf::{prefetch, AlignedBuf, AtomicWords, BUF_ALIGN};
pub use block_device::{check_aligned, BlockDevice, GatherReq, ReadReq, WriteReq};
pub use direct_file::{BatchMode, DirectFile, DirectFileOptions};
pub use error::{DeviceError, IoOp, Result, ZoneError};
pub use faulty::{CrashMode, FaultKind, FaultOp, FaultRule, FaultyDevice, Trigger};
pub use latency::{Latency, LatencyDevice, LatencyProfile};
pub use mem_device::MemDevice;
pub use meta_file::{read_meta_file, write_meta_file};
pub use range_copy::{copy_buffered, RangeCopy};
pub use zoned::{
    EmulatedZonedDevice, ZoneCondition, ZoneGeometry, ZoneInfo, ZoneTable, ZonedDevice,
};

/// Whether io_uring can be used by this process.
pub fn io_uring_available() -> bool {
    uring::available()
}
