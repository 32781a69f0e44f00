//! Background work in progress, process-wide: a board of counters saying
//! which kinds of engine work (memtable flushes, compactions, checkpoints,
//! SHORTCUT rebuilds and re-layouts, insert-buffer spills, reclamation)
//! are running right now and how many have started.
//!
//! Engines mark a piece of work with [`begin`], whose guard counts it as
//! running until it drops (on every path out, errors included). The
//! board lives in a static unless a process [`install`]s its own before
//! any work starts: the crash-test worker puts it in a shared file mapping,
//! so after a SIGKILL the driver still reads what was running at the
//! instant of the kill. Invariant: `running[k]` is the number of live
//! guards of kind `k`; `started[k]` never decreases; `finished[k]` and
//! `nanos[k]` count the guards dropped and the time they lived.
//!
//! A process may also set a hook called as each piece of work begins
//! ([`set_begin_hook`]): the crash test's whitebox mode uses it to kill
//! its own process part way through a chosen kind of work, as RocksDB's
//! kill points do.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// A kind of background work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Work {
    /// A memtable or buffer written out as a table or pages.
    Flush,
    /// Tables merged into the next level.
    Compaction,
    /// A consistent image made durable so the log behind it can go.
    Checkpoint,
    /// SHORTCUT's models retrained over the inner levels.
    Rebuild,
    /// SHORTCUT's pages moved to where its models predict them.
    Relayout,
    /// TurboIndex's buffered records applied to their pages.
    BufferSpill,
    /// Live data copied out of space being reclaimed.
    Reclamation,
}

impl Work {
    pub const ALL: [Work; 7] = [
        Work::Flush,
        Work::Compaction,
        Work::Checkpoint,
        Work::Rebuild,
        Work::Relayout,
        Work::BufferSpill,
        Work::Reclamation,
    ];
    pub const COUNT: usize = Self::ALL.len();

    pub fn name(self) -> &'static str {
        match self {
            Work::Flush => "flush",
            Work::Compaction => "compaction",
            Work::Checkpoint => "checkpoint",
            Work::Rebuild => "rebuild",
            Work::Relayout => "relayout",
            Work::BufferSpill => "buffer_spill",
            Work::Reclamation => "reclamation",
        }
    }

    /// The kind named `name` ([`Work::name`]).
    pub fn from_name(name: &str) -> Option<Work> {
        Self::ALL.into_iter().find(|w| w.name() == name)
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The counters. `repr(C)` and plain atomics: an all-zero mapping is a
/// valid empty board, and [`BoardImage::decode`] reads its bytes back.
#[repr(C)]
#[derive(Default)]
pub struct Board {
    running: [AtomicU32; Work::COUNT],
    started: [AtomicU64; Work::COUNT],
    finished: [AtomicU64; Work::COUNT],
    nanos: [AtomicU64; Work::COUNT],
}

/// Bytes a board occupies (the size of a file mapping that holds one).
pub const BOARD_BYTES: usize = std::mem::size_of::<Board>();

static OWN: Board = Board {
    running: [const { AtomicU32::new(0) }; Work::COUNT],
    started: [const { AtomicU64::new(0) }; Work::COUNT],
    finished: [const { AtomicU64::new(0) }; Work::COUNT],
    nanos: [const { AtomicU64::new(0) }; Work::COUNT],
};
static INSTALLED: OnceLock<&'static Board> = OnceLock::new();

type BeginHook = Box<dyn Fn(Work) + Send + Sync>;
static HOOK: OnceLock<BeginHook> = OnceLock::new();

/// Calls `hook` as each piece of work begins (after it counts as
/// running). Returns false if a hook was set already.
pub fn set_begin_hook(hook: impl Fn(Work) + Send + Sync + 'static) -> bool {
    HOOK.set(Box::new(hook)).is_ok()
}

/// Makes `board` the process's board. Returns false if one was installed
/// already (work counted before this call stays on the static board).
pub fn install(board: &'static Board) -> bool {
    INSTALLED.set(board).is_ok()
}

/// Makes a shared mapping of the file at `path` (created or grown to
/// [`BOARD_BYTES`]) the process's board, so another process reads what
/// this one was doing from the file, even after this one was killed (the
/// page cache keeps a dead process's stores to a shared mapping): how a
/// crash test learns which background work a kill landed in. Fails with
/// `AlreadyExists` if a board was installed already.
pub fn install_file(path: &std::path::Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    file.set_len(BOARD_BYTES as u64)?;
    // SAFETY: a fresh shared mapping of a file at least BOARD_BYTES long;
    // the kernel places it page-aligned, which satisfies Board's alignment.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            BOARD_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the mapping is never unmapped, so the reference is 'static;
    // Board is repr(C) atomics, valid for any bytes (the file starts
    // zeroed, an empty board), and every access to it is atomic.
    let board: &'static Board = unsafe { &*addr.cast::<Board>() };
    if !install(board) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            "a background-work board was installed already",
        ));
    }
    Ok(())
}

fn board() -> &'static Board {
    INSTALLED.get().copied().unwrap_or(&OWN)
}

/// Counts work of kind `w` as running until the guard drops.
#[must_use = "the work counts as running only while the guard lives"]
pub fn begin(w: Work) -> Running {
    let b = board();
    b.started[w.index()].fetch_add(1, Ordering::Relaxed);
    b.running[w.index()].fetch_add(1, Ordering::Relaxed);
    if let Some(hook) = HOOK.get() {
        hook(w);
    }
    Running {
        board: b,
        work: w,
        since: Instant::now(),
    }
}

/// A piece of work in progress (see [`begin`]).
pub struct Running {
    board: &'static Board,
    work: Work,
    since: Instant,
}

impl Drop for Running {
    fn drop(&mut self) {
        let i = self.work.index();
        let nanos = u64::try_from(self.since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.board.nanos[i].fetch_add(nanos, Ordering::Relaxed);
        self.board.finished[i].fetch_add(1, Ordering::Relaxed);
        self.board.running[i].fetch_sub(1, Ordering::Relaxed);
    }
}

/// What a board held, read from its bytes (a mapping left by a killed
/// process) or from the live board.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BoardImage {
    pub running: [u32; Work::COUNT],
    pub started: [u64; Work::COUNT],
    pub finished: [u64; Work::COUNT],
    pub nanos: [u64; Work::COUNT],
}

impl BoardImage {
    /// The current process's board.
    pub fn current() -> Self {
        let b = board();
        let mut img = Self::default();
        for w in Work::ALL {
            img.running[w.index()] = b.running[w.index()].load(Ordering::Relaxed);
            img.started[w.index()] = b.started[w.index()].load(Ordering::Relaxed);
            img.finished[w.index()] = b.finished[w.index()].load(Ordering::Relaxed);
            img.nanos[w.index()] = b.nanos[w.index()].load(Ordering::Relaxed);
        }
        img
    }

    /// A board's bytes as laid out in memory; `None` if too short.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let bytes = bytes.get(..BOARD_BYTES)?;
        let mut img = Self::default();
        let u64_at = |field: usize, i: usize| -> Option<u64> {
            let at = field + 8 * i;
            Some(u64::from_ne_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
        };
        for i in 0..Work::COUNT {
            img.running[i] = u32::from_ne_bytes(bytes.get(4 * i..4 * i + 4)?.try_into().ok()?);
            img.started[i] = u64_at(std::mem::offset_of!(Board, started), i)?;
            img.finished[i] = u64_at(std::mem::offset_of!(Board, finished), i)?;
            img.nanos[i] = u64_at(std::mem::offset_of!(Board, nanos), i)?;
        }
        Some(img)
    }

    /// The kinds with work running.
    pub fn running_kinds(&self) -> impl Iterator<Item = Work> + '_ {
        Work::ALL
            .into_iter()
            .filter(|w| self.running[w.index()] > 0)
    }

    pub fn started(&self, w: Work) -> u64 {
        self.started[w.index()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guard_counts_while_it_lives_and_bytes_decode_to_the_same_board() {
        let before = BoardImage::current();
        let g = begin(Work::Compaction);
        let during = BoardImage::current();
        assert_eq!(
            during.running[Work::Compaction.index()],
            before.running[Work::Compaction.index()] + 1
        );
        assert!(during.started(Work::Compaction) > before.started(Work::Compaction));
        drop(g);
        let after = BoardImage::current();
        assert_eq!(
            after.running[Work::Compaction.index()],
            before.running[Work::Compaction.index()]
        );
        assert!(
            after.finished[Work::Compaction.index()] > before.finished[Work::Compaction.index()]
        );
        assert_eq!(Work::from_name("relayout"), Some(Work::Relayout));
        assert_eq!(Work::from_name("nap"), None);

        let board = Board::default();
        board.running[Work::Rebuild.index()].store(2, Ordering::Relaxed);
        board.started[Work::Reclamation.index()].store(9, Ordering::Relaxed);
        // The bytes a mapping would hold: each field where the layout puts it.
        let mut bytes = vec![0u8; BOARD_BYTES];
        board.nanos[Work::Flush.index()].store(5, Ordering::Relaxed);
        for i in 0..Work::COUNT {
            let r = board.running[i].load(Ordering::Relaxed).to_ne_bytes();
            bytes[4 * i..4 * i + 4].copy_from_slice(&r);
            for (field, v) in [
                (std::mem::offset_of!(Board, started), &board.started[i]),
                (std::mem::offset_of!(Board, finished), &board.finished[i]),
                (std::mem::offset_of!(Board, nanos), &board.nanos[i]),
            ] {
                let at = field + 8 * i;
                bytes[at..at + 8].copy_from_slice(&v.load(Ordering::Relaxed).to_ne_bytes());
            }
        }
        let img = BoardImage::decode(&bytes).unwrap();
        assert_eq!(img.running_kinds().collect::<Vec<_>>(), vec![Work::Rebuild]);
        assert_eq!(img.started(Work::Reclamation), 9);
        assert_eq!(img.nanos[Work::Flush.index()], 5);
        assert_eq!(BoardImage::decode(&bytes[..BOARD_BYTES - 1]), None);
    }
}
