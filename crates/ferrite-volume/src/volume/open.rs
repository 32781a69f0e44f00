//! Creating a volume's files, opening one (its map read back and counted
//! into the segments' live blocks, the reclaimer started) and closing it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use ferrite_io::{BlockDevice, DirectFile, DirectFileOptions};
use parking_lot::{Condvar, Mutex, RwLock};

use super::stats::live_counts;
use super::{Counters, CreateOptions, Inner, Space, Volume, VolumeOptions, BS};
use crate::block_map::{BlockMap, MapKind};
use crate::error::{Result, VolumeError};
use crate::per_block_map::PerBlockMap;
use crate::rask_map::RaskMap;
use crate::segment_table::SegmentTable;
use crate::superblock::Superblock;
use crate::write_group::WriteGroup;

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

impl Volume {
    /// Opens the volume in `dir` on O_DIRECT files (or buffered ones if
    /// `opts.direct_io` is off).
    pub fn open(dir: &Path, opts: VolumeOptions) -> Result<Self> {
        Self::open_wrapped(dir, opts, Ok)
    }

    /// [`Volume::open`] with its block map handed to `wrap` first, which
    /// may put a map of its own around it (the CLI's recording of map
    /// operations).
    pub fn open_wrapped(
        dir: &Path,
        opts: VolumeOptions,
        wrap: impl FnOnce(Box<dyn BlockMap>) -> Result<Box<dyn BlockMap>>,
    ) -> Result<Self> {
        let sb = read_superblock(dir)?;
        let lock = lock_dir(dir)?;
        let data = open_file(data_path(dir), opts.direct_io)?;
        let map = wrap(open_map(dir, sb.map, opts.direct_io)?)?;
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
