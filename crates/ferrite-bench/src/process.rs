//! Process-level measurements: resident memory, storage I/O, disk usage.
//! Linux `/proc` is read directly; elsewhere the functions return zero.

use std::path::Path;

/// Resident set size of this process, in bytes.
pub fn rss_bytes() -> u64 {
    let page = 4096u64;
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * page)
}

/// Bytes this process caused to be read from and written to storage
/// (`read_bytes` / `write_bytes` of `/proc/self/io`: device traffic, not
/// page-cache hits).
pub fn io_bytes() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    (field("read_bytes:"), field("write_bytes:"))
}

/// Disk space allocated to the files under `path` (sparse files count only
/// their allocated blocks).
pub fn disk_bytes(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    entries
        .filter_map(|e| e.ok())
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => disk_bytes(&e.path()),
            Ok(m) => m.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

/// The file system type and source device of the mount holding `path`.
pub fn device_of(path: &Path) -> String {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f.as_slice() {
                [src, mnt, fs, ..] if path.starts_with(mnt) => {
                    Some((mnt.len(), format!("{fs} on {src}")))
                }
                _ => None,
            }
        })
        .max_by_key(|(n, _)| *n)
        .map(|(_, d)| d)
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_this_process() {
        if !Path::new("/proc/self/statm").exists() {
            return;
        }
        assert!(rss_bytes() > 0);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), vec![1u8; 10_000]).unwrap();
        assert!(disk_bytes(dir.path()) >= 10_000);
        assert_ne!(device_of(dir.path()), "unknown");
    }
}
