//! [`Devices`]: the files an LSM store lives on: one table space, two
//! manifest slots, and the WAL devices successive memtables take in turn.

use std::path::Path;
use std::sync::Arc;

use ferrite_core::Result;
use ferrite_io::{BlockDevice, DirectFile, DirectFileOptions};

use super::WAL_DEVICES;

/// The devices a store runs on.
pub struct Devices {
    pub tables: Arc<dyn BlockDevice>,
    pub manifest: [Arc<dyn BlockDevice>; 2],
    pub wal: [Arc<dyn BlockDevice>; WAL_DEVICES],
}

impl Devices {
    /// The store's files in `dir`, with O_DIRECT if `direct`.
    pub fn open_dir(dir: &Path, direct: bool) -> Result<Self> {
        let open_with = |name: &str, file_system_unit: bool| -> Result<Arc<dyn BlockDevice>> {
            let opts = DirectFileOptions {
                direct,
                block_size: 4096,
                file_system_unit,
                ..DirectFileOptions::default()
            };
            Ok(Arc::new(DirectFile::open_with(dir.join(name), opts)?))
        };
        let open = |name: &str| open_with(name, false);
        Ok(Self {
            // Compressed blocks are read as the sectors that hold them.
            tables: open_with("tables", true)?,
            manifest: [open("manifest-0")?, open("manifest-1")?],
            wal: [
                open("wal-0")?,
                open("wal-1")?,
                open("wal-2")?,
                open("wal-3")?,
            ],
        })
    }

    pub(super) fn all(&self) -> impl Iterator<Item = &Arc<dyn BlockDevice>> {
        std::iter::once(&self.tables)
            .chain(self.manifest.iter())
            .chain(self.wal.iter())
    }
}
