//! What a baseline's files hold, told by their names: the footprint of a
//! store that does not report its own (ferrite engines do, through
//! `Stats::footprint`). Allocated bytes per file, so the kinds add up to
//! the directory's size.

use std::path::Path;

use ferrite::{Footprint, SpaceKind};

use super::Target;

/// The kind of a baseline's file, by its name and the directory it is in.
fn kind(target: Target, path: &Path) -> SpaceKind {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let under = |dir: &str| path.components().any(|c| c.as_os_str() == dir);
    match target {
        Target::RocksDb if name.ends_with(".sst") => SpaceKind::Data,
        Target::RocksDb if name.ends_with(".log") => SpaceKind::Log,
        // MANIFEST, CURRENT, OPTIONS, LOCK, IDENTITY, the info LOG.
        Target::RocksDb => SpaceKind::Metadata,
        Target::Lmdb if name == "data.mdb" => SpaceKind::Data,
        Target::Lmdb => SpaceKind::Metadata,
        Target::Fjall if under("journals") => SpaceKind::Log,
        Target::Fjall if under("segments") || under("tables") || under("blobs") => SpaceKind::Data,
        Target::Fjall => SpaceKind::Metadata,
        _ => SpaceKind::Data,
    }
}

/// The files under `dir` by kind, as `target` lays them out.
pub fn footprint(target: Target, dir: &Path) -> Footprint {
    let mut f = Footprint::default();
    add_dir(target, dir, &mut f);
    f
}

fn add_dir(target: Target, dir: &Path, f: &mut Footprint) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.filter_map(|e| e.ok()) {
        match e.metadata() {
            Ok(m) if m.is_dir() => add_dir(target, &e.path(), f),
            Ok(m) => f.add(kind(target, &e.path()), m.blocks() * 512),
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rocksdb_and_lmdb_files_by_name() {
        let k = |t, p: &str| kind(t, Path::new(p));
        assert_eq!(k(Target::RocksDb, "/s/000012.sst"), SpaceKind::Data);
        assert_eq!(k(Target::RocksDb, "/s/000013.log"), SpaceKind::Log);
        assert_eq!(
            k(Target::RocksDb, "/s/MANIFEST-000005"),
            SpaceKind::Metadata
        );
        assert_eq!(k(Target::RocksDb, "/s/LOG"), SpaceKind::Metadata);
        assert_eq!(k(Target::Lmdb, "/s/data.mdb"), SpaceKind::Data);
        assert_eq!(k(Target::Lmdb, "/s/lock.mdb"), SpaceKind::Metadata);
        assert_eq!(k(Target::Fjall, "/s/journals/0"), SpaceKind::Log);
    }

    #[test]
    fn the_parts_add_up_to_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("000001.sst"), vec![1u8; 40_000]).unwrap();
        std::fs::write(dir.path().join("000002.log"), vec![1u8; 9_000]).unwrap();
        std::fs::write(dir.path().join("CURRENT"), b"MANIFEST-000001\n").unwrap();
        let f = footprint(Target::RocksDb, dir.path());
        assert!(f.get(SpaceKind::Data) >= 40_000);
        assert!(f.get(SpaceKind::Log) >= 9_000);
        assert!(f.get(SpaceKind::Metadata) > 0);
        assert_eq!(f.total(), crate::process::disk_bytes(dir.path()));
    }
}
