//! The background-work board ([`ferrite::background`]) of a worker, kept
//! in a shared mapping of a file beside the store: the worker installs
//! the mapping as its process's board before it opens the store, so the
//! engines count their work there; once the worker is killed, the driver
//! reads the file and learns what was running at the instant of the kill
//! (the page cache keeps a dead process's stores to a shared mapping).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use ferrite::background::{self, BoardImage, BOARD_BYTES};

/// The board file of the store at `store`.
pub fn path_for(store: &Path) -> PathBuf {
    let mut p = store.as_os_str().to_owned();
    p.push(".board");
    PathBuf::from(p)
}

/// Empties the board file (a new worker starts with nothing counted).
pub fn reset(path: &Path) -> Result<()> {
    std::fs::write(path, vec![0u8; BOARD_BYTES])
        .with_context(|| format!("writing {}", path.display()))
}

/// What the board file says; `None` if it is missing or short.
pub fn read(path: &Path) -> Option<BoardImage> {
    BoardImage::decode(&std::fs::read(path).ok()?)
}

/// Maps the board file shared and makes it this process's board (see
/// [`background::install_file`]).
pub fn install(path: &Path) -> Result<()> {
    background::install_file(path).with_context(|| format!("mapping {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite::background::Work;

    #[test]
    fn work_counted_in_the_process_shows_in_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = path_for(&dir.path().join("db"));
        reset(&path).unwrap();
        assert_eq!(read(&path), Some(BoardImage::default()));
        install(&path).unwrap();
        let running = background::begin(Work::Relayout);
        let img = read(&path).unwrap();
        assert!(img.running_kinds().any(|w| w == Work::Relayout), "{img:?}");
        assert!(img.started(Work::Relayout) >= 1);
        drop(running);
        assert!(install(&path).is_err(), "a second board is refused");
        std::fs::write(&path, b"short").unwrap();
        assert_eq!(read(&path), None);
    }
}
