//! The identity file that marks a directory as a ferrite store.
//!
//! Every store directory holds a file named [`IDENTITY_FILE`] saying which
//! engine made it and which version of that engine's format it uses (spec:
//! `docs/format/store-identity.md`). Engines call [`StoreIdentity::establish`]
//! when they open a directory, which is how opening a directory made by
//! another engine, or by nothing, becomes a clear error instead of a
//! misread. The file is checksummed and replaced atomically.

use std::ops::RangeInclusive;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use ferrite_io::{read_meta_file, write_meta_file};

use crate::byte_reader::ByteReader;
use crate::engine_kind::EngineKind;
use crate::error::{Error, Result};
use crate::options::Options;

/// Name of the identity file inside a store directory.
pub const IDENTITY_FILE: &str = "FERRITE";
const MAGIC: &[u8; 8] = b"FERRITE\0";
const VERSION: u32 = 1;

/// What the identity file records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreIdentity {
    pub engine: EngineKind,
    /// The engine's own on-disk format version.
    pub engine_format: u32,
    /// Creation time, seconds since the Unix epoch.
    pub created_unix: u64,
}

/// Whether [`StoreIdentity::establish`] found a store or made one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Established {
    Created,
    Existing,
    /// An existing store of an older format this engine still reads; its
    /// identity now names the current format, which the engine writes from
    /// here on (so an engine that only knows the older one refuses it).
    Upgraded {
        from: u32,
    },
}

impl StoreIdentity {
    pub fn new(engine: EngineKind, engine_format: u32) -> Self {
        let created_unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        Self {
            engine,
            engine_format,
            created_unix,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let name = self.engine.name().as_bytes();
        let mut v = Vec::with_capacity(8 + 4 + 1 + name.len() + 4 + 8 + 4);
        v.extend_from_slice(MAGIC);
        v.extend_from_slice(&VERSION.to_le_bytes());
        v.push(name.len() as u8);
        v.extend_from_slice(name);
        v.extend_from_slice(&self.engine_format.to_le_bytes());
        v.extend_from_slice(&self.created_unix.to_le_bytes());
        let crc = crc32c::crc32c(&v);
        v.extend_from_slice(&crc.to_le_bytes());
        v
    }

    /// Decodes an identity file; `path` is only used in error messages.
    pub fn decode(bytes: &[u8], path: &Path) -> Result<Self> {
        let location = path.display().to_string();
        let bad = |why: &str| Error::corruption(location.clone(), why);
        let wrong = |found: String| Error::WrongFormat {
            path: path.to_path_buf(),
            expected: "a ferrite store identity file".into(),
            found,
        };
        if bytes.get(..8) != Some(&MAGIC[..]) {
            return Err(wrong("a file without the ferrite magic".into()));
        }
        let (body, crc) = bytes.split_at(bytes.len().saturating_sub(4).max(8));
        let crc: [u8; 4] = crc.try_into().map_err(|_| bad("truncated"))?;
        if crc32c::crc32c(body) != u32::from_le_bytes(crc) {
            return Err(bad("identity checksum mismatch"));
        }
        let mut r = ByteReader::new(body);
        let truncated = || bad("truncated");
        r.bytes(MAGIC.len()).ok_or_else(truncated)?;
        let version = r.u32().ok_or_else(truncated)?;
        if version != VERSION {
            return Err(wrong(format!("identity format version {version}")));
        }
        let name_len = r.u8().ok_or_else(truncated)? as usize;
        let name = r.bytes(name_len).ok_or_else(truncated)?;
        let name = std::str::from_utf8(name).map_err(|_| bad("engine name is not UTF-8"))?;
        let engine = name
            .parse::<EngineKind>()
            .map_err(|_| wrong(format!("a store of an unknown engine {name:?}")))?;
        let engine_format = r.u32().ok_or_else(truncated)?;
        let created_unix = r.u64().ok_or_else(truncated)?;
        if r.remaining() != 0 {
            return Err(bad("trailing bytes"));
        }
        Ok(Self {
            engine,
            engine_format,
            created_unix,
        })
    }

    /// Reads the identity of the store in `dir`, or `None` if there is none.
    pub fn read(dir: &Path) -> Result<Option<Self>> {
        let path = dir.join(IDENTITY_FILE);
        match read_meta_file(&path)? {
            None => Ok(None),
            Some(bytes) => Self::decode(&bytes, &path).map(Some),
        }
    }

    /// Writes the identity file into `dir` atomically.
    pub fn write(&self, dir: &Path) -> Result<()> {
        write_meta_file(&dir.join(IDENTITY_FILE), &self.encode())?;
        Ok(())
    }

    /// Opens or creates the store directory `dir` for `engine`, whose
    /// current format is the end of `formats` and which reads every format
    /// in it:
    /// - an existing store must be of `engine` at a format in `formats`;
    ///   an older one is upgraded (its identity rewritten to the current
    ///   format) before the engine writes anything;
    /// - a missing or empty directory becomes a new store if
    ///   `opts.create_if_missing`;
    /// - a non-empty directory without an identity file is refused, so a
    ///   store is never created on top of foreign files.
    pub fn establish(
        dir: &Path,
        engine: EngineKind,
        formats: RangeInclusive<u32>,
        opts: &Options,
    ) -> Result<Established> {
        let engine_format = *formats.end();
        if let Some(found) = Self::read(dir)? {
            if opts.error_if_exists {
                return Err(Error::AlreadyExists {
                    path: dir.to_path_buf(),
                });
            }
            if found.engine != engine || !formats.contains(&found.engine_format) {
                let expected = if formats.start() == formats.end() {
                    format!("a {engine} store (format {engine_format})")
                } else {
                    format!(
                        "a {engine} store (formats {} to {engine_format})",
                        formats.start()
                    )
                };
                return Err(Error::WrongFormat {
                    path: dir.to_path_buf(),
                    expected,
                    found: format!("a {} store (format {})", found.engine, found.engine_format),
                });
            }
            if found.engine_format == engine_format {
                return Ok(Established::Existing);
            }
            Self {
                engine_format,
                ..found.clone()
            }
            .write(dir)?;
            return Ok(Established::Upgraded {
                from: found.engine_format,
            });
        }
        // A creation that died before its identity was renamed into place
        // leaves only the identity's temporary file: still a fresh store.
        let leftover = Path::new(IDENTITY_FILE).with_extension("tmp");
        let empty = match std::fs::read_dir(dir) {
            Ok(entries) => entries
                .filter_map(std::result::Result::ok)
                .all(|e| e.file_name() == leftover.as_os_str()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
            Err(e) => {
                return Err(ferrite_io::DeviceError::os(ferrite_io::IoOp::Open, dir, 0, e).into())
            }
        };
        if !empty || !opts.create_if_missing {
            return Err(Error::NotAStore {
                path: dir.to_path_buf(),
            });
        }
        std::fs::create_dir_all(dir)
            .map_err(|e| ferrite_io::DeviceError::os(ferrite_io::IoOp::Open, dir, 0, e))?;
        Self::new(engine, engine_format).write(dir)?;
        Ok(Established::Created)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip_and_damage() {
        let id = StoreIdentity::new(EngineKind::Zkv, 3);
        let enc = id.encode();
        let p = Path::new("x/FERRITE");
        assert_eq!(StoreIdentity::decode(&enc, p).unwrap(), id);
        for i in 8..enc.len() {
            let mut bad = enc.clone();
            bad[i] ^= 0x01;
            assert!(StoreIdentity::decode(&bad, p).is_err(), "flip at {i}");
        }
        assert!(matches!(
            StoreIdentity::decode(b"SQLite format 3\0", p),
            Err(Error::WrongFormat { .. })
        ));
    }

    #[test]
    fn a_creation_killed_before_the_rename_is_still_fresh() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("store");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("FERRITE.tmp"), b"half").unwrap();
        let opts = Options::default();
        assert_eq!(
            StoreIdentity::establish(&dir, EngineKind::Lsm, 1..=1, &opts).unwrap(),
            Established::Created
        );
        // Anything else in the directory still makes it someone else's.
        let other = root.path().join("other");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join("notes.txt"), b"mine").unwrap();
        assert!(matches!(
            StoreIdentity::establish(&other, EngineKind::Lsm, 1..=1, &opts),
            Err(Error::NotAStore { .. })
        ));
    }

    #[test]
    fn establish_rules() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("store");
        let opts = Options::default();
        assert_eq!(
            StoreIdentity::establish(&dir, EngineKind::Btree, 1..=1, &opts).unwrap(),
            Established::Created
        );
        assert_eq!(
            StoreIdentity::establish(&dir, EngineKind::Btree, 1..=1, &opts).unwrap(),
            Established::Existing
        );
        assert!(matches!(
            StoreIdentity::establish(&dir, EngineKind::Lsm, 1..=1, &opts),
            Err(Error::WrongFormat { .. })
        ));
        assert!(matches!(
            StoreIdentity::establish(&dir, EngineKind::Btree, 2..=2, &opts),
            Err(Error::WrongFormat { .. })
        ));
        let strict = Options::default().error_if_exists(true);
        assert!(matches!(
            StoreIdentity::establish(&dir, EngineKind::Btree, 1..=1, &strict),
            Err(Error::AlreadyExists { .. })
        ));
        // An engine that reads formats 1 and 2 upgrades a format-1 store,
        // which an engine that knows only format 1 then refuses.
        let created = StoreIdentity::read(&dir).unwrap().unwrap().created_unix;
        assert_eq!(
            StoreIdentity::establish(&dir, EngineKind::Btree, 1..=2, &opts).unwrap(),
            Established::Upgraded { from: 1 }
        );
        let now = StoreIdentity::read(&dir).unwrap().unwrap();
        assert_eq!((now.engine_format, now.created_unix), (2, created));
        assert_eq!(
            StoreIdentity::establish(&dir, EngineKind::Btree, 1..=2, &opts).unwrap(),
            Established::Existing
        );
        assert!(matches!(
            StoreIdentity::establish(&dir, EngineKind::Btree, 1..=1, &opts),
            Err(Error::WrongFormat { .. })
        ));
        assert!(matches!(
            StoreIdentity::establish(&dir, EngineKind::Btree, 3..=4, &opts),
            Err(Error::WrongFormat { .. })
        ));
        // A directory with foreign files is never turned into a store.
        let foreign = root.path().join("photos");
        std::fs::create_dir(&foreign).unwrap();
        std::fs::write(foreign.join("cat.jpg"), b"meow").unwrap();
        assert!(matches!(
            StoreIdentity::establish(&foreign, EngineKind::Btree, 1..=1, &opts),
            Err(Error::NotAStore { .. })
        ));
        let no_create = Options::default().create_if_missing(false);
        assert!(matches!(
            StoreIdentity::establish(
                &root.path().join("new"),
                EngineKind::Btree,
                1..=1,
                &no_create
            ),
            Err(Error::NotAStore { .. })
        ));
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = StoreIdentity::decode(&bytes, Path::new("f"));
        }
    }
}
