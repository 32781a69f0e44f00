//! Small metadata files (store identity, manifests) written atomically.
//!
//! A metadata file is replaced as a whole: the new contents go to a
//! temporary sibling, which is synced, renamed over the old file, and the
//! directory is synced, so a crash leaves either the old or the new file,
//! never a mix. These files are tiny and rarely written, so they use
//! buffered I/O; their callers put a checksum inside.

use std::fs;
use std::io::Write;
use std::path::Path;

use crate::error::{DeviceError, IoOp, Result};

/// Atomically replaces `path` with `contents`.
pub fn write_meta_file(path: &Path, contents: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let os = |op, p: &Path, e| DeviceError::os(op, p, 0, e);
    let mut f = fs::File::create(&tmp).map_err(|e| os(IoOp::Open, &tmp, e))?;
    f.write_all(contents)
        .map_err(|e| os(IoOp::Write, &tmp, e))?;
    f.sync_all().map_err(|e| os(IoOp::Sync, &tmp, e))?;
    drop(f);
    fs::rename(&tmp, path).map_err(|e| os(IoOp::Write, path, e))?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        let d = fs::File::open(dir).map_err(|e| os(IoOp::Open, dir, e))?;
        d.sync_all().map_err(|e| os(IoOp::Sync, dir, e))?;
    }
    Ok(())
}

/// Reads a whole metadata file; `Ok(None)` if it does not exist.
pub fn read_meta_file(path: &Path) -> Result<Option<Vec<u8>>> {
    match fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(DeviceError::os(IoOp::Read, path, 0, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replace_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("META");
        assert_eq!(read_meta_file(&p).unwrap(), None);
        write_meta_file(&p, b"one").unwrap();
        write_meta_file(&p, b"two").unwrap();
        assert_eq!(read_meta_file(&p).unwrap().as_deref(), Some(&b"two"[..]));
        assert!(!p.with_extension("tmp").exists());
    }
}
