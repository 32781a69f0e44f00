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

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ferrite_io::{AlignedBuf, BlockDevice, DirectFile, DirectFileOptions, GatherReq, ReadReq};
use ferrite_rask::{BlockRange, PhysicalRun, Segment};
use parking_lot::{Condvar, Mutex, RwLock};

use crate::block_map::{BlockMap, MapKind};
use crate::error::{Result, VolumeError};
use crate::per_block_map::PerBlockMap;
use crate::rask_map::RaskMap;
use crate::reclaim_policy::{self, ReclaimTargets};
use crate::recording_map::RecordingMap;
use crate::segment_table::SegmentTable;
use crate::superblock::{Superblock, BLOCK_SIZE};
use crate::write_group::{WriteGroup, WriteJob};

/// Free segments the client head leaves for the reclaimer.
pub const CLIENT_KEEP: usize = 2;
/// Requests may address any byte: clients such as nbdfuse pass on
/// whatever the file system above them writes, without aligning it.
/// Parts of a 4 KiB block are read-modify-written.
pub const MIN_IO: u64 = 1;
/// Largest single request.
pub const MAX_REQUEST: u64 = 32 << 20;
const BS: u64 = BLOCK_SIZE as u64;
/// How long a write waits for reclamation to make room before it fails
/// with `NoSpace`.
const ROOM_WAIT: Duration = Duration::from_secs(30);

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

/// Counters and sizes of an open volume.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct VolumeStats {
    pub logical_bytes: u64,
    pub physical_bytes: u64,
    pub segments: u32,
    pub free_segments: u32,
    pub live_blocks: u64,
    pub map_entries: u64,
    pub map_log_bytes: u64,
    /// Blocks clients wrote.
    pub client_blocks: u64,
    /// Blocks the reclaimer copied.
    pub reclaim_blocks: u64,
    pub reclaimed_segments: u64,
    /// Device writes carrying client data (one per batch and segment).
    pub data_writes: u64,
    pub flushes: u64,
    pub map_recovery_seconds: f64,
}

impl VolumeStats {
    /// Segments in use (not free) over the live data they hold.
    pub fn space_amplification(&self) -> f64 {
        let used = (self.segments - self.free_segments) as f64;
        let seg_blocks = self.physical_bytes as f64 / self.segments.max(1) as f64 / BS as f64;
        used * seg_blocks / self.live_blocks.max(1) as f64
    }

    /// Blocks written to the log per block clients wrote.
    pub fn write_amplification(&self) -> f64 {
        (self.client_blocks + self.reclaim_blocks) as f64 / self.client_blocks.max(1) as f64
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

/// Takes the volume directory's exclusive lock: a second server (or a
/// `check` while one serves) would corrupt the map.
fn lock_dir(dir: &Path) -> Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    let path = dir.join("LOCK");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io_err(format!("opening {}", path.display())))?;
    // SAFETY: flock on a descriptor this function owns; no memory involved.
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r != 0 {
        return Err(VolumeError::InUse {
            path: dir.to_path_buf(),
        });
    }
    Ok(f)
}

fn io_err(what: String) -> impl FnOnce(std::io::Error) -> VolumeError {
    move |source| VolumeError::Io { what, source }
}

fn data_path(dir: &Path) -> PathBuf {
    dir.join("data")
}

fn superblock_path(dir: &Path) -> PathBuf {
    dir.join("superblock")
}

fn map_path(dir: &Path) -> PathBuf {
    dir.join("map")
}

fn open_file(path: PathBuf, direct: bool) -> Result<Arc<dyn BlockDevice>> {
    let opts = DirectFileOptions {
        direct,
        ..DirectFileOptions::default()
    };
    Ok(Arc::new(DirectFile::open_with(path, opts)?))
}

/// Reads a volume's superblock.
pub fn read_superblock(dir: &Path) -> Result<Superblock> {
    let path = superblock_path(dir);
    let bytes = std::fs::read(&path).map_err(|e| VolumeError::NotAVolume {
        path: dir.to_path_buf(),
        reason: format!("{}: {e}", path.display()),
    })?;
    Superblock::decode(&bytes)
}

/// Lays out a new volume in `dir`. The superblock is written last, so a
/// creation cut short leaves a directory that `open` refuses and `create`
/// may reuse.
pub fn create(dir: &Path, o: &CreateOptions) -> Result<Superblock> {
    let sb = Superblock::plan(o.logical_bytes, o.segment_bytes, o.reserve, o.map)?;
    if superblock_path(dir).exists() {
        return Err(VolumeError::AlreadyExists {
            path: dir.to_path_buf(),
        });
    }
    std::fs::create_dir_all(dir).map_err(io_err(format!("creating {}", dir.display())))?;
    for leftover in [data_path(dir), map_path(dir)] {
        if leftover.is_dir() {
            std::fs::remove_dir_all(&leftover)
        } else if leftover.exists() {
            std::fs::remove_file(&leftover)
        } else {
            Ok(())
        }
        .map_err(io_err(format!("clearing {}", leftover.display())))?;
    }
    let data = DirectFile::open_with(
        data_path(dir),
        DirectFileOptions {
            direct: false,
            ..DirectFileOptions::default()
        },
    )?;
    data.set_len(sb.physical_bytes())?;
    if o.preallocate {
        data.allocate(0, sb.physical_bytes())?;
    }
    data.sync()?;
    drop(open_map(dir, sb.map, false)?);
    let tmp = dir.join("superblock.tmp");
    let mut img = vec![0u8; BS as usize];
    img[..crate::superblock::ENCODED_LEN].copy_from_slice(&sb.encode());
    std::fs::write(&tmp, &img).map_err(io_err(format!("writing {}", tmp.display())))?;
    let f = std::fs::File::open(&tmp).map_err(io_err(format!("opening {}", tmp.display())))?;
    f.sync_all()
        .map_err(io_err(format!("syncing {}", tmp.display())))?;
    std::fs::rename(&tmp, superblock_path(dir))
        .map_err(io_err(format!("renaming {}", tmp.display())))?;
    let d = std::fs::File::open(dir).map_err(io_err(format!("opening {}", dir.display())))?;
    d.sync_all()
        .map_err(io_err(format!("syncing {}", dir.display())))?;
    Ok(sb)
}

fn open_map(dir: &Path, kind: MapKind, direct: bool) -> Result<Box<dyn BlockMap>> {
    Ok(match kind {
        MapKind::Rask => Box::new(RaskMap::open(&map_path(dir), direct)?),
        MapKind::PerBlock => Box::new(PerBlockMap::open(&map_path(dir), direct)?),
    })
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

impl Volume {
    /// Opens the volume in `dir` on O_DIRECT files (or buffered ones if
    /// `opts.direct_io` is off).
    pub fn open(dir: &Path, opts: VolumeOptions) -> Result<Self> {
        Self::open_recorded(dir, opts, None)
    }

    /// [`Volume::open`], and with `record_map_ops` every operation on the
    /// map is recorded into that file (see [`crate::RecordingMap`]).
    pub fn open_recorded(
        dir: &Path,
        opts: VolumeOptions,
        record_map_ops: Option<&Path>,
    ) -> Result<Self> {
        let sb = read_superblock(dir)?;
        let lock = lock_dir(dir)?;
        let data = open_file(data_path(dir), opts.direct_io)?;
        let mut map = open_map(dir, sb.map, opts.direct_io)?;
        if let Some(path) = record_map_ops {
            map = Box::new(RecordingMap::new(map, path)?);
        }
        let mut v = Self::open_on(sb, data, map, opts)?;
        v._lock = Some(lock);
        Ok(v)
    }

    /// Opens a volume of geometry `sb` on the given data device and map
    /// (tests put a fault-injecting device here).
    pub fn open_on(
        sb: Superblock,
        data: Arc<dyn BlockDevice>,
        map: Box<dyn BlockMap>,
        opts: VolumeOptions,
    ) -> Result<Self> {
        if data.block_size() as u64 > BS {
            return Err(VolumeError::InvalidGeometry(format!(
                "device block size {} exceeds the volume's {BS}",
                data.block_size()
            )));
        }
        if data.len() < sb.physical_bytes() {
            data.set_len(sb.physical_bytes())?;
        }
        let live = live_counts(&sb, map.as_ref())?;
        let table = SegmentTable::from_live(live, sb.segment_blocks);
        let inner = Arc::new(Inner {
            sb,
            data,
            map,
            space: Mutex::new(Space {
                table,
                client: None,
                reclaim: None,
                stuck: false,
            }),
            space_changed: Condvar::new(),
            group: WriteGroup::default(),
            reuse_gate: RwLock::new(()),
            rmw: Mutex::new(()),
            flush_lock: Mutex::new(()),
            flush_requests: AtomicU64::new(0),
            flushes_cover: AtomicU64::new(0),
            reclaim_lock: Mutex::new(()),
            poison: Mutex::new(None),
            counters: Counters::default(),
            opts,
            stop: AtomicBool::new(false),
            wake: (Mutex::new(false), Condvar::new()),
        });
        let reclaimer = crate::reclaimer::spawn(inner.clone())?;
        Ok(Self {
            inner,
            reclaimer: Some(reclaimer),
            _lock: None,
        })
    }

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

    pub fn stats(&self) -> VolumeStats {
        self.inner.stats()
    }

    /// Lets the map free what it retired (before a heap measurement).
    pub fn settle_map(&self) {
        self.inner.map.settle();
    }

    pub fn map_kind(&self) -> MapKind {
        self.inner.map.kind()
    }

    /// Checks that every map entry lies inside the volume and the data
    /// log, and that the segment table's live counts match the map.
    pub fn check(&self) -> Result<CheckReport> {
        self.inner.check()
    }

    /// Per segment: its state and live blocks (for `volume inspect`).
    pub fn segments(&self) -> Vec<crate::segment_table::SegmentInfo> {
        self.inner.space.lock().table.infos().to_vec()
    }

    /// Runs reclamation until it finds nothing worth doing (tests and
    /// benchmarks; the background reclaimer does the same on its own).
    pub fn reclaim_now(&self) -> Result<u64> {
        let mut passes = 0;
        while crate::reclaimer::pass(&self.inner)? {
            passes += 1;
        }
        Ok(passes)
    }

    /// Stops reclamation, makes every write durable and closes the map.
    pub fn close(mut self) -> Result<()> {
        self.stop_reclaimer();
        self.inner.flush()
    }

    fn stop_reclaimer(&mut self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        self.inner.wake_reclaimer();
        if let Some(h) = self.reclaimer.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Volume {
    fn drop(&mut self) {
        if self.reclaimer.is_some() {
            self.stop_reclaimer();
            if let Err(e) = self.inner.flush() {
                log::warn!("closing flush of the volume failed: {e}");
            }
        }
    }
}

/// What `check` found.
#[derive(Debug, Clone, Default)]
pub struct CheckReport {
    pub entries: u64,
    pub mapped_blocks: u64,
    pub segments_in_use: u32,
    pub problems: Vec<String>,
}

fn live_counts(sb: &Superblock, map: &dyn BlockMap) -> Result<Vec<u32>> {
    let mut live = vec![0u32; sb.segments as usize];
    let seg_blocks = sb.segment_blocks as u64;
    let log_blocks = sb.segments as u64 * seg_blocks;
    let mut bad = None;
    map.for_each(&mut |range, run| {
        let end = run.block().checked_add(range.len());
        if run.file() != 0 || end.is_none_or(|e| e > log_blocks) || range.r() >= sb.logical_blocks()
        {
            bad.get_or_insert(format!(
                "{range} -> {run:?} lies outside the volume or its data log"
            ));
            return;
        }
        for_segments(seg_blocks, run.block(), range.len(), |seg, n| {
            live[seg as usize] += n as u32;
        });
    });
    match bad {
        Some(reason) => Err(VolumeError::corrupt("block map", reason)),
        None => Ok(live),
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

pub(crate) fn replicate(e: &VolumeError) -> VolumeError {
    match e {
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

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        check_request(&self.sb, offset, out.len() as u64)?;
        let Some(span) = block_span(offset, out.len() as u64) else {
            return Ok(());
        };
        let aligned = offset.is_multiple_of(BS)
            && (out.len() as u64).is_multiple_of(BS)
            && (out.as_ptr() as usize).is_multiple_of(ferrite_io::BUF_ALIGN);
        if aligned {
            return self.read_blocks(span, out);
        }
        let mut tmp = AlignedBuf::zeroed((span.len() * BS) as usize);
        self.read_blocks(span, &mut tmp)?;
        let skip = (offset - span.l() * BS) as usize;
        out.copy_from_slice(&tmp[skip..skip + out.len()]);
        Ok(())
    }

    /// Fills `out` (aligned, `span.len()` blocks) with the blocks of `span`.
    pub(crate) fn read_blocks(&self, span: BlockRange, out: &mut [u8]) -> Result<()> {
        let _gate = self.reuse_gate.read();
        let mut segs: Vec<Segment<PhysicalRun>> = Vec::new();
        self.map.lookup(span, &mut segs);
        let mut reqs = Vec::with_capacity(segs.len());
        let mut rest = out;
        for s in &segs {
            let (piece, tail) =
                std::mem::take(&mut rest).split_at_mut((s.range.len() * BS) as usize);
            rest = tail;
            match s.value {
                Some(run) => reqs.push(ReadReq::new(run.block() * BS, piece)),
                None => piece.fill(0),
            }
        }
        if !reqs.is_empty() {
            self.data.read_batch(&mut reqs)?;
        }
        Ok(())
    }

    fn write(&self, offset: u64, buf: &[u8], fua: bool) -> Result<()> {
        check_request(&self.sb, offset, buf.len() as u64)?;
        let Some(span) = block_span(offset, buf.len() as u64) else {
            return Ok(());
        };
        if offset.is_multiple_of(BS) && (buf.len() as u64).is_multiple_of(BS) {
            return self.write_blocks(span.l(), AlignedBuf::from_slice(buf), fua);
        }
        // A part of a block: read the blocks around it, patch, write back.
        // Overlapping writes in flight together have no defined order
        // (NBD leaves it to the client), but two sub-block writes to one
        // block must not lose each other's bytes: they take turns.
        let _rmw = self.rmw.lock();
        let mut img = AlignedBuf::zeroed((span.len() * BS) as usize);
        self.read_blocks(span, &mut img)?;
        let skip = (offset - span.l() * BS) as usize;
        img[skip..skip + buf.len()].copy_from_slice(buf);
        self.write_blocks(span.l(), img, fua)
    }

    /// Writes whole blocks from `lba`, batched with whatever other writes
    /// arrive meanwhile.
    pub(crate) fn write_blocks(&self, lba: u64, data: AlignedBuf, fua: bool) -> Result<()> {
        self.check_poison()?;
        let job = Arc::new(WriteJob::new(lba, data, fua));
        self.group.submit(job, |batch| self.commit_batch(batch))
    }

    /// Writes a batch of jobs as one append and maps them in order.
    fn commit_batch(&self, batch: &[Arc<WriteJob>]) -> Result<()> {
        self.check_poison()?;
        let total: u64 = batch.iter().map(|j| j.blocks()).sum();
        let extents = self.allocate_with_room(total)?;
        let result = self.place_batch(batch, &extents, total);
        self.land(&extents);
        result?;
        if batch.iter().any(|j| j.fua) {
            self.sync_all()?;
        }
        Ok(())
    }

    /// Ends the flight of allocated extents (their map entries are in, or
    /// never will be).
    pub(crate) fn land(&self, extents: &[(u64, u64)]) {
        let mut sp = self.space.lock();
        for &(at, n) in extents {
            sp.table.land((at / self.seg_blocks()) as u32, n as u32);
        }
    }

    /// Writes a batch's blocks onto `extents` and maps them.
    fn place_batch(
        &self,
        batch: &[Arc<WriteJob>],
        extents: &[(u64, u64)],
        total: u64,
    ) -> Result<()> {
        // Pair each job's blocks with the extents, in order.
        let mut pieces: Vec<(u64, u64, u64)> = Vec::new(); // (lba, blocks, phys)
        let mut gathers: Vec<(u64, Vec<&[u8]>)> = Vec::with_capacity(extents.len());
        let mut ext = extents.iter().copied();
        let (mut ext_at, mut ext_left) = ext.next().unwrap_or((0, 0));
        gathers.push((ext_at, Vec::new()));
        for job in batch {
            let (mut lba, mut left, mut from) = (job.lba, job.blocks(), 0usize);
            while left > 0 {
                if ext_left == 0 {
                    (ext_at, ext_left) = ext.next().ok_or_else(|| {
                        VolumeError::corrupt("write batch", "allocation shorter than the batch")
                    })?;
                    gathers.push((ext_at, Vec::new()));
                }
                let n = left.min(ext_left);
                let bytes = (n * BS) as usize;
                if let Some(g) = gathers.last_mut() {
                    g.1.push(&job.data[from..from + bytes]);
                }
                pieces.push((lba, n, ext_at));
                (lba, left, from) = (lba + n, left - n, from + bytes);
                (ext_at, ext_left) = (ext_at + n, ext_left - n);
            }
        }
        let reqs: Vec<GatherReq<'_>> = gathers
            .iter()
            .filter(|(_, b)| !b.is_empty())
            .map(|(at, bufs)| GatherReq::new(at * BS, bufs))
            .collect();
        // A full file system under a sparse log fails the write before
        // anything is mapped: refuse it, and stay usable.
        self.data.write_gathered(&reqs).map_err(|e| {
            let e = VolumeError::from(e);
            if e.is_no_space() {
                e
            } else {
                self.poisoned(e)
            }
        })?;
        self.counters
            .data_writes
            .fetch_add(reqs.len() as u64, Ordering::Relaxed);
        self.counters
            .client_blocks
            .fetch_add(total, Ordering::Relaxed);
        {
            let mut sp = self.space.lock();
            let mut scratch = Vec::new();
            for &(lba, n, phys) in &pieces {
                let range = BlockRange::with_len(lba, n)?;
                let run = PhysicalRun::new(0, phys).ok_or_else(|| {
                    VolumeError::corrupt("write batch", format!("physical block {phys}"))
                })?;
                self.remap(&mut sp, range, Some(run), &mut scratch)
                    .map_err(|e| self.poisoned(e))?;
            }
            if reclaim_policy::should_reclaim(
                sp.table.free_count(),
                sp.table.used_count(),
                sp.table.live_blocks(),
                sp.table.capacity(),
                &self.opts.reclaim,
            ) {
                self.wake_reclaimer();
            }
        }
        Ok(())
    }

    /// Changes the map for `range` to `new` (or unmaps it) and moves the
    /// live counts with it. Runs under the space lock.
    pub(crate) fn remap(
        &self,
        sp: &mut Space,
        range: BlockRange,
        new: Option<PhysicalRun>,
        scratch: &mut Vec<Segment<PhysicalRun>>,
    ) -> Result<()> {
        scratch.clear();
        self.map.lookup(range, scratch);
        let mapped = scratch.iter().any(|s| s.value.is_some());
        match new {
            Some(run) => self.map.map(range, run)?,
            None if mapped => self.map.unmap(range)?,
            None => return Ok(()),
        }
        let sb = self.seg_blocks();
        for s in scratch.iter() {
            if let Some(v) = s.value {
                for_segments(sb, v.block(), s.range.len(), |seg, n| {
                    sp.table.sub_live(seg, n as u32)
                });
            }
        }
        if let Some(run) = new {
            for_segments(sb, run.block(), range.len(), |seg, n| {
                sp.table.add_live(seg, n as u32)
            });
        }
        Ok(())
    }

    /// Allocates `blocks` on the client head, waiting for reclamation (or
    /// a flush that frees draining segments) when the log is full.
    fn allocate_with_room(&self, blocks: u64) -> Result<Vec<(u64, u64)>> {
        let started = Instant::now();
        let mut first = true;
        loop {
            let draining = {
                let mut sp = self.space.lock();
                if let Some(ext) = self.allocate(&mut sp, HeadKind::Client, blocks) {
                    return Ok(ext);
                }
                // Only a pass that ran after this write began to wait may
                // declare the log full.
                if first {
                    sp.stuck = false;
                    first = false;
                } else if sp.table.draining().is_empty() && sp.stuck {
                    return Err(VolumeError::NoSpace {
                        live_blocks: sp.table.live_blocks(),
                        segments: sp.table.len() as u32,
                    });
                }
                !sp.table.draining().is_empty()
            };
            if self.stop.load(Ordering::Relaxed) {
                return Err(VolumeError::ShuttingDown);
            }
            if started.elapsed() > ROOM_WAIT {
                let sp = self.space.lock();
                return Err(VolumeError::NoSpace {
                    live_blocks: sp.table.live_blocks(),
                    segments: sp.table.len() as u32,
                });
            }
            if draining {
                self.flush()?;
                continue;
            }
            let mut sp = self.space.lock();
            self.wake_reclaimer();
            self.space_changed
                .wait_for(&mut sp, Duration::from_millis(50));
        }
    }

    /// Blocks left in the reclaimer's head.
    pub(crate) fn reclaim_room(&self, sp: &Space) -> u64 {
        sp.reclaim
            .map_or(0, |h| (self.sb.segment_blocks - h.next) as u64)
    }

    /// Takes `blocks` from a head, all or nothing, opening free segments
    /// as heads fill. Extents never cross a segment.
    pub(crate) fn allocate(
        &self,
        sp: &mut Space,
        kind: HeadKind,
        blocks: u64,
    ) -> Option<Vec<(u64, u64)>> {
        let cap = self.sb.segment_blocks;
        let keep = match kind {
            HeadKind::Client => CLIENT_KEEP,
            HeadKind::Reclaim => 0,
        };
        let head = match kind {
            HeadKind::Client => sp.client,
            HeadKind::Reclaim => sp.reclaim,
        };
        let in_head = head.map_or(0, |h| (cap - h.next) as u64);
        let spare = sp.table.free_count().saturating_sub(keep) as u64 * cap as u64;
        if in_head + spare < blocks {
            // A client head too short for the request is sealed: its
            // garbage (and its unused rest) becomes a victim, where an
            // open head would hold it out of the reclaimer's reach while
            // every sealed segment is nearly all live.
            if let (HeadKind::Client, Some(h)) = (kind, head) {
                if h.next > 0 {
                    sp.table.seal(h.seg);
                    sp.client = None;
                }
            }
            return None;
        }
        let mut out = Vec::new();
        let mut head = head;
        let mut left = blocks;
        while left > 0 {
            let h = match head {
                Some(h) if h.next < cap => h,
                full => {
                    if let Some(h) = full {
                        sp.table.seal(h.seg);
                    }
                    let seg = sp.table.open_free(keep)?;
                    Head { seg, next: 0 }
                }
            };
            let n = left.min((cap - h.next) as u64);
            sp.table.reserve(h.seg, n as u32);
            out.push((h.seg as u64 * cap as u64 + h.next as u64, n));
            head = Some(Head {
                seg: h.seg,
                next: h.next + n as u32,
            });
            left -= n;
        }
        // A full head is sealed at once, not when the next allocation
        // opens another: its garbage must be a victim the reclaimer can
        // take even when that next allocation cannot be served.
        if let Some(h) = head.filter(|h| h.next == cap) {
            sp.table.seal(h.seg);
            head = None;
        }
        match kind {
            HeadKind::Client => sp.client = head,
            HeadKind::Reclaim => sp.reclaim = head,
        }
        Some(out)
    }

    fn trim(&self, offset: u64, len: u64, fua: bool) -> Result<()> {
        check_request(&self.sb, offset, len)?;
        self.check_poison()?;
        if let Some(blocks) = inner_blocks(offset, len) {
            let mut sp = self.space.lock();
            let mut scratch = Vec::new();
            self.remap(&mut sp, blocks, None, &mut scratch)
                .map_err(|e| self.poisoned(e))?;
        }
        if fua {
            self.sync_all()?;
        }
        Ok(())
    }

    fn write_zeroes(&self, offset: u64, len: u64, no_hole: bool, fua: bool) -> Result<()> {
        check_request(&self.sb, offset, len)?;
        if len == 0 {
            return Ok(());
        }
        if no_hole {
            // Zeroes written as data, a chunk at a time.
            let mut at = offset;
            while at < offset + len {
                let n = (offset + len - at).min(MAX_REQUEST);
                self.write(at, &vec![0u8; n as usize], false)?;
                at += n;
            }
        } else {
            let inner = inner_blocks(offset, len);
            let (head_end, tail_start) = match inner {
                Some(b) => (b.l() * BS, (b.r() + 1) * BS),
                None => (offset + len, offset + len),
            };
            if head_end > offset {
                self.write(offset, &vec![0u8; (head_end - offset) as usize], false)?;
            }
            if tail_start < offset + len {
                self.write(
                    tail_start,
                    &vec![0u8; (offset + len - tail_start) as usize],
                    false,
                )?;
            }
            if inner.is_some() {
                self.trim(head_end, tail_start - head_end, false)?;
            }
        }
        if fua {
            self.sync_all()?;
        }
        Ok(())
    }

    /// Syncs the data log, then the map's log (see the module invariants).
    fn sync_all(&self) -> Result<()> {
        self.check_poison()?;
        // As in `flush`: the map up to where it ends now, once the data
        // behind those entries is synced; writers go on meanwhile.
        let upto = {
            let _sp = self.space.lock();
            self.map.log_position()
        };
        self.data.sync().map_err(|e| self.poisoned(e.into()))?;
        self.map.sync_to(upto).map_err(|e| self.poisoned(e))
    }

    pub(crate) fn flush(&self) -> Result<()> {
        self.check_poison()?;
        let ticket = self.flush_requests.fetch_add(1, Ordering::SeqCst) + 1;
        let _one = self.flush_lock.lock();
        if self.flushes_cover.load(Ordering::SeqCst) >= ticket {
            // A flush that began after this request arrived covered it.
            return Ok(());
        }
        self.check_poison()?;
        // Every request that arrived so far, this one included.
        let covers = self.flush_requests.load(Ordering::SeqCst);
        self.counters.flushes.fetch_add(1, Ordering::Relaxed);
        // Map entries go in under the space lock, after their data was
        // written: every entry before `upto` has its data on the device,
        // so syncing the data log makes them safe to sync; entries after
        // `upto` (writes landing meanwhile) stay off the device. Writers
        // go on while the two syncs run. The segments draining now lost
        // their last reference in entries before `upto`.
        let (draining, upto) = {
            let sp = self.space.lock();
            (sp.table.draining(), self.map.log_position())
        };
        self.data.sync().map_err(|e| self.poisoned(e.into()))?;
        self.map.sync_to(upto).map_err(|e| self.poisoned(e))?;
        if self.map.log_bytes() > self.opts.checkpoint_log_bytes {
            // A checkpoint writes the whole map: no entry may come in
            // between the data sync and it.
            let _sp = self.space.lock();
            self.data.sync().map_err(|e| self.poisoned(e.into()))?;
            self.map.checkpoint().map_err(|e| self.poisoned(e))?;
        }
        if !draining.is_empty() {
            // No read that found an entry into these segments is still
            // reading them once the write side is ours.
            let _gate = self.reuse_gate.write();
            let mut sp = self.space.lock();
            sp.table.release(&draining);
            // A pass that found no victim while these were draining saw
            // a fuller log than there is now: a writer waiting for room
            // must not take its verdict for "full".
            sp.stuck = false;
            self.counters
                .reclaimed_segments
                .fetch_add(draining.len() as u64, Ordering::Relaxed);
            self.space_changed.notify_all();
        }
        self.flushes_cover.store(covers, Ordering::SeqCst);
        Ok(())
    }

    /// Called by the reclaimer when a pass gave up or made room.
    pub(crate) fn note_reclaim(&self, stuck: bool, copied: u64) {
        self.counters
            .reclaim_blocks
            .fetch_add(copied, Ordering::Relaxed);
        let mut sp = self.space.lock();
        sp.stuck = stuck;
        self.space_changed.notify_all();
    }

    fn stats(&self) -> VolumeStats {
        let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let sp = self.space.lock();
        VolumeStats {
            logical_bytes: self.sb.logical_bytes,
            physical_bytes: self.sb.physical_bytes(),
            segments: self.sb.segments,
            free_segments: sp.table.free_count() as u32,
            live_blocks: sp.table.live_blocks(),
            map_entries: self.map.entries(),
            map_log_bytes: self.map.log_bytes(),
            client_blocks: c(&self.counters.client_blocks),
            reclaim_blocks: c(&self.counters.reclaim_blocks),
            reclaimed_segments: c(&self.counters.reclaimed_segments),
            data_writes: c(&self.counters.data_writes),
            flushes: c(&self.counters.flushes),
            map_recovery_seconds: self.map.recovery_seconds(),
        }
    }

    fn check(&self) -> Result<CheckReport> {
        let sp = self.space.lock();
        let mut report = CheckReport::default();
        match live_counts(&self.sb, self.map.as_ref()) {
            Ok(live) => {
                for (seg, (&want, info)) in live.iter().zip(sp.table.infos()).enumerate() {
                    if want != info.live {
                        report.problems.push(format!(
                            "segment {seg}: the map points at {want} blocks, the table counts {}",
                            info.live
                        ));
                    }
                    if want > 0 && info.state == crate::segment_table::SegmentState::Free {
                        report.problems.push(format!(
                            "segment {seg} is free but holds {want} live blocks"
                        ));
                    }
                }
            }
            Err(e) => report.problems.push(e.to_string()),
        }
        let mut last: Option<u64> = None;
        self.map.for_each(&mut |range, _| {
            report.entries += 1;
            report.mapped_blocks += range.len();
            if last.is_some_and(|l| range.l() <= l) {
                report
                    .problems
                    .push(format!("entry {range} overlaps or precedes the one before"));
            }
            last = Some(range.r());
        });
        report.segments_in_use = sp.table.used_count() as u32;
        if report.mapped_blocks != sp.table.live_blocks() {
            report.problems.push(format!(
                "the map holds {} blocks, the segments count {} live",
                report.mapped_blocks,
                sp.table.live_blocks()
            ));
        }
        Ok(report)
    }
}
