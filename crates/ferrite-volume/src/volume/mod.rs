//! The volume: a virtual disk whose blocks live in a log of segments and
//! whose block map says where.
//!
//! Owns the data log device, the block map, the segment table and the
//! two heads (clients' writes, the reclaimer's copies). Invariants:
//! - data reaches the data log before the map entry pointing at it is
//!   logged, and the map's log reaches the device only after a sync of
//!   the data log that followed every entry in it (both syncs run under
//!   the space lock, which every map change holds);
//! - every map change runs under the space lock together with the live
//!   count changes it implies, so the counts always match the map;
//! - a segment is rewritten only after it is `Free` (see
//!   [`crate::segment_table`]), and it turns free only under the reuse
//!   gate's write side, so no read that found an old entry pointing into
//!   it is still reading it;
//! - the client head never takes the last [`CLIENT_KEEP`] free segments,
//!   which the reclaimer needs to make room;
//! - a head is sealed once full, and the client head once a request
//!   does not fit it, so garbage never waits out of the reclaimer's reach
//!   in an open head while a writer waits for room.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | [`Volume`] and its shared state, the heads, request checks |
//! | `open.rs` | creating a volume's files, opening (the map rebuilt into live counts), closing |
//! | `read.rs` | reads: the map's runs gathered from the data log |
//! | `write.rs` | writes grouped into appends, mapping, allocation on the heads, TRIM and zeroing |
//! | `flush.rs` | syncs: data log, then the map's log; freeing drained segments |
//! | `stats.rs` | [`VolumeStats`] and `check` |

mod flush;
mod open;
mod read;
pub(crate) mod stats;
mod write;

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::thread::JoinHandle;

use ferrite_io::BlockDevice;
use ferrite_rask::BlockRange;
use parking_lot::{Condvar, Mutex, RwLock};

use crate::block_map::{BlockMap, MapKind};
use crate::error::{Result, VolumeError};
use crate::reclaim_policy::ReclaimTargets;
use crate::segment_table::SegmentTable;
use crate::superblock::{Superblock, BLOCK_SIZE};
use crate::write_group::WriteGroup;

pub use open::{create, read_superblock};

/// Free segments the client head leaves for the reclaimer.
pub const CLIENT_KEEP: usize = 2;
/// Requests may address any byte: clients such as nbdfuse pass on
/// whatever the file system above them writes, without aligning it.
/// Parts of a 4 KiB block are read-modify-written.
pub const MIN_IO: u64 = 1;
/// Largest single request.
pub const MAX_REQUEST: u64 = 32 << 20;
const BS: u64 = BLOCK_SIZE as u64;

/// How a new volume is laid out.
#[derive(Debug, Clone, Copy)]
pub struct CreateOptions {
    pub logical_bytes: u64,
    pub segment_bytes: u64,
    /// Space beyond the logical size, as a fraction of it, for the log's
    /// garbage (the device holds `(1 + reserve)` times the logical size).
    pub reserve: f64,
    pub map: MapKind,
    /// Allocate the whole data log at creation, so a full file system is
    /// found then and never under a client's write.
    pub preallocate: bool,
}

impl CreateOptions {
    pub fn new(logical_bytes: u64) -> Self {
        Self {
            logical_bytes,
            segment_bytes: 64 << 20,
            reserve: 0.25,
            map: MapKind::Rask,
            preallocate: true,
        }
    }
}

/// How a volume is opened.
#[derive(Debug, Clone, Copy)]
pub struct VolumeOptions {
    pub direct_io: bool,
    pub reclaim: ReclaimTargets,
    /// The map is checkpointed (at a flush) once its log passes this.
    pub checkpoint_log_bytes: u64,
}

impl Default for VolumeOptions {
    fn default() -> Self {
        Self {
            direct_io: true,
            reclaim: ReclaimTargets::default(),
            checkpoint_log_bytes: 64 << 20,
        }
    }
}

#[derive(Default)]
struct Counters {
    client_blocks: AtomicU64,
    reclaim_blocks: AtomicU64,
    reclaimed_segments: AtomicU64,
    data_writes: AtomicU64,
    flushes: AtomicU64,
}

/// Which head an allocation appends to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeadKind {
    Client,
    Reclaim,
}

#[derive(Debug, Clone, Copy)]
struct Head {
    seg: u32,
    next: u32,
}

pub(crate) struct Space {
    pub(crate) table: SegmentTable,
    client: Option<Head>,
    reclaim: Option<Head>,
    /// Set when a reclaim pass found no victim; a waiting writer then
    /// fails with `NoSpace` instead of waiting.
    pub(crate) stuck: bool,
}

pub(crate) struct Inner {
    pub(crate) sb: Superblock,
    pub(crate) data: Arc<dyn BlockDevice>,
    pub(crate) map: Box<dyn BlockMap>,
    pub(crate) space: Mutex<Space>,
    /// Signalled when segments are freed or reclamation gives up.
    pub(crate) space_changed: Condvar,
    group: WriteGroup,
    pub(crate) reuse_gate: RwLock<()>,
    rmw: Mutex<()>,
    flush_lock: Mutex<()>,
    /// Flush requests so far, and how many of them the last completed
    /// flush covered: a request waiting on `flush_lock` that a flush begun
    /// after its arrival covered is done (flushes group-commit).
    flush_requests: AtomicU64,
    flushes_cover: AtomicU64,
    /// One reclaim pass at a time: passes budget the same free segments.
    pub(crate) reclaim_lock: Mutex<()>,
    poison: Mutex<Option<String>>,
    counters: Counters,
    pub(crate) opts: VolumeOptions,
    pub(crate) stop: AtomicBool,
    pub(crate) wake: (Mutex<bool>, Condvar),
}

/// An open volume; share it as `Arc<Volume>` (every method takes `&self`).
pub struct Volume {
    inner: Arc<Inner>,
    reclaimer: Option<JoinHandle<()>>,
    /// The directory's lock (one process at a time), released on drop.
    _lock: Option<std::fs::File>,
}

/// Calls `f(segment, blocks)` for each segment the physical run of `n`
/// blocks from `phys` touches.
pub(crate) fn for_segments(seg_blocks: u64, phys: u64, n: u64, mut f: impl FnMut(u32, u64)) {
    let (mut at, end) = (phys, phys + n);
    while at < end {
        let seg = at / seg_blocks;
        let stop = ((seg + 1) * seg_blocks).min(end);
        f(seg as u32, stop - at);
        at = stop;
    }
}

fn check_request(sb: &Superblock, offset: u64, len: u64) -> Result<()> {
    if offset
        .checked_add(len)
        .is_none_or(|end| end > sb.logical_bytes)
    {
        return Err(VolumeError::OutOfRange {
            offset,
            len,
            size: sb.logical_bytes,
        });
    }
    Ok(())
}

/// The blocks a byte range touches, as an inclusive block range (none for
/// an empty request).
fn block_span(offset: u64, len: u64) -> Option<BlockRange> {
    (len > 0).then(|| BlockRange::new(offset / BS, (offset + len - 1) / BS).ok())?
}

/// The whole blocks inside a byte range.
fn inner_blocks(offset: u64, len: u64) -> Option<BlockRange> {
    let first = offset.div_ceil(BS);
    let end = (offset + len) / BS;
    (end > first).then(|| BlockRange::new(first, end - 1).ok())?
}

impl Inner {
    pub(crate) fn seg_blocks(&self) -> u64 {
        self.sb.segment_blocks as u64
    }

    fn check_poison(&self) -> Result<()> {
        match &*self.poison.lock() {
            Some(why) => Err(VolumeError::Poisoned(why.clone())),
            None => Ok(()),
        }
    }

    /// Records a failure after which the map or log can no longer be
    /// trusted to follow the device; the error is passed through.
    pub(crate) fn poisoned(&self, e: VolumeError) -> VolumeError {
        self.poison.lock().get_or_insert_with(|| e.to_string());
        self.map.abandon();
        e
    }

    pub(crate) fn wake_reclaimer(&self) {
        let (m, c) = &self.wake;
        *m.lock() = true;
        c.notify_one();
    }
}

impl Volume {
    pub fn superblock(&self) -> Superblock {
        self.inner.sb
    }

    pub fn size(&self) -> u64 {
        self.inner.sb.logical_bytes
    }

    /// Reads `out.len()` bytes from `offset`; unwritten and trimmed
    /// blocks read as zeroes.
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        self.inner.read(offset, out)
    }

    /// Writes `buf` at `offset`. With `fua` the write is durable when
    /// this returns.
    pub fn write(&self, offset: u64, buf: &[u8], fua: bool) -> Result<()> {
        self.inner.write(offset, buf, fua)
    }

    /// Forgets `len` bytes from `offset`: whole blocks inside the range
    /// read as zeroes afterwards (partial blocks at the edges are kept, as
    /// TRIM is advisory). No data is written.
    pub fn trim(&self, offset: u64, len: u64, fua: bool) -> Result<()> {
        self.inner.trim(offset, len, fua)
    }

    /// Makes `len` bytes from `offset` read as zeroes: whole blocks are
    /// unmapped (no data written) unless `no_hole`, edges are rewritten.
    pub fn write_zeroes(&self, offset: u64, len: u64, no_hole: bool, fua: bool) -> Result<()> {
        self.inner.write_zeroes(offset, len, no_hole, fua)
    }

    /// Makes every completed write durable.
    pub fn flush(&self) -> Result<()> {
        self.inner.flush()
    }

    /// Lets the map free what it retired (before a heap measurement).
    pub fn settle_map(&self) {
        self.inner.map.settle();
    }

    pub fn map_kind(&self) -> MapKind {
        self.inner.map.kind()
    }

    /// Per segment: its state and live blocks (for `volume inspect`).
    pub fn segments(&self) -> Vec<crate::segment_table::SegmentInfo> {
        self.inner.space.lock().table.infos().to_vec()
    }
}
