//! # ferrite-volume: a log-structured virtual disk mapped by RASK
//!
//! The block store RASK's paper indexes: every write of a virtual disk
//! lands at the head of a log of segments, and a block map (RASK, keyed
//! by block ranges) says where each logical block now lives. Reads gather
//! the runs the map answers; TRIM and zeroing only change the map; a
//! reclaimer copies the live blocks out of mostly-dead segments; FLUSH
//! syncs the data log and then the map's redo log. An NBD server
//! ([`nbd`]) serves a volume to real clients (qemu-img, a qemu guest
//! whose root file system it holds, nbdcopy, fio, ext4 over nbdfuse).
//!
//! Layout of a volume directory (`docs/format/volume.md`): `superblock`
//! (the geometry), `data` (the segments) and `map/` (the map's snapshot
//! and log).

mod block_map;
mod error;
pub mod nbd;
mod per_block_map;
mod rask_map;
mod reclaim_policy;
mod reclaimer;
mod segment_table;
mod superblock;
mod volume;
mod write_group;

pub use block_map::{BlockMap, MapKind};
pub use error::{errno, Result, VolumeError};
pub use per_block_map::PerBlockMap;
pub use rask_map::RaskMap;
pub use reclaim_policy::{pick_victims, should_reclaim, ReclaimTargets};
pub use segment_table::{SegmentInfo, SegmentState};
pub use superblock::{Superblock, BLOCK_SIZE};
pub use volume::stats::{CheckReport, VolumeStats};
pub use volume::{
    create, read_superblock, CreateOptions, Volume, VolumeOptions, MAX_REQUEST, MIN_IO,
};
