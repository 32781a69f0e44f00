//! The disk space of every store an experiment ran, peers included: a
//! thread samples the work directory while the experiment runs, and the
//! report gives each store's peak and what it left at the end, with every
//! store closed.
//!
//! A *store directory* is a directory under the work directory that holds
//! a file itself, with no such directory above it (below the work
//! directory): a ferrite store, a RocksDB or LMDB directory, a volume's
//! files. Its bytes are the allocated blocks of everything under it, as
//! `du` counts them (a sparse file counts what it holds). Only the work
//! directory's entries the run creates or changes are walked (the work
//! directory may be a checkout, with its build directory), and a store
//! directory that was there before and never changed is left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::{Report, Table};
use crate::{process, user_data};

/// How often the work directory is measured: often enough to see a
/// compaction's inputs beside its outputs, rarely enough that walking the
/// stores' files costs the experiment nothing it would notice.
const EVERY: Duration = Duration::from_millis(100);

/// One store directory's bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreSpace {
    /// Relative to the work directory.
    pub dir: String,
    /// The most it held at any sample while the experiment ran.
    pub peak_bytes: u64,
    /// What it held when the experiment ended (0: removed).
    pub end_bytes: u64,
    /// The user keys and values its loader declared it holds
    /// (`crate::user_data`); absent where none did, and in reports from
    /// before the declarations.
    #[serde(default)]
    pub user_bytes: Option<u64>,
}

/// Samples a work directory until [`SpaceWatch::finish`].
pub struct SpaceWatch {
    stop: Arc<AtomicBool>,
    state: Arc<Mutex<Watched>>,
    thread: Option<JoinHandle<()>>,
}

/// What the sampler knows.
struct Watched {
    root: PathBuf,
    /// The work directory's entries when the run started, with their
    /// modification times: one the run never touches (a build directory,
    /// an earlier experiment's stores) is never walked.
    start: BTreeMap<String, Option<SystemTime>>,
    /// The store directories present when the run started.
    existed: BTreeSet<String>,
    /// Top-level entries the run created or changed.
    touched: BTreeSet<String>,
    /// Per store directory: its first sampled bytes and its peak.
    seen: BTreeMap<String, (u64, u64)>,
}

impl Watched {
    fn new(root: &Path) -> Self {
        let start = top_entries(root);
        let existed = start
            .keys()
            .flat_map(|top| store_dirs(&root.join(top), top))
            .map(|(name, _)| name)
            .collect();
        Self {
            root: root.to_path_buf(),
            start,
            existed,
            touched: BTreeSet::new(),
            seen: BTreeMap::new(),
        }
    }

    /// Measures every store directory under a touched entry; returns
    /// their bytes now.
    fn sample(&mut self) -> BTreeMap<String, u64> {
        for (top, mtime) in top_entries(&self.root) {
            if self.start.get(&top).is_none_or(|m| *m != mtime) {
                self.touched.insert(top);
            }
        }
        let mut now = BTreeMap::new();
        for top in &self.touched {
            for (name, path) in store_dirs(&self.root.join(top), top) {
                let bytes = process::disk_bytes(&path);
                let e = self.seen.entry(name.clone()).or_insert((bytes, 0));
                e.1 = e.1.max(bytes);
                now.insert(name, bytes);
            }
        }
        now
    }

    /// Every store directory the run created or changed. One that was
    /// there at the start and never differed from its first sample is an
    /// earlier run's, left beside one the run touched.
    fn report(&self, end: &BTreeMap<String, u64>) -> Vec<StoreSpace> {
        self.seen
            .iter()
            .map(|(dir, &(first, peak_bytes))| {
                let end_bytes = end.get(dir).copied().unwrap_or(0);
                (
                    first,
                    StoreSpace {
                        dir: dir.clone(),
                        peak_bytes,
                        end_bytes,
                        user_bytes: user_data::at_or_under(&self.root.join(dir)),
                    },
                )
            })
            .filter(|(first, s)| {
                !self.existed.contains(&s.dir) || *first != s.peak_bytes || *first != s.end_bytes
            })
            .map(|(_, s)| s)
            .collect()
    }
}

impl SpaceWatch {
    pub fn start(root: &Path) -> Self {
        let state = Arc::new(Mutex::new(Watched::new(root)));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (stop, state) = (stop.clone(), state.clone());
            std::thread::Builder::new()
                .name("repro-space".into())
                .spawn(move || {
                    while !stop.load(Ordering::Acquire) {
                        state.lock().sample();
                        std::thread::sleep(EVERY);
                    }
                })
                .ok()
        };
        Self {
            stop,
            state,
            thread,
        }
    }

    /// Stops sampling; every store directory the run created or changed,
    /// by name, with its peak and its bytes now.
    pub fn finish(mut self) -> Vec<StoreSpace> {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let mut st = self.state.lock();
        let end = st.sample();
        st.report(&end)
    }
}

impl Drop for SpaceWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// The entries of `root`, with their modification times.
fn top_entries(root: &Path) -> BTreeMap<String, Option<SystemTime>> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return BTreeMap::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| {
            let mtime = e.metadata().ok().and_then(|m| m.modified().ok());
            (e.file_name().to_string_lossy().into_owned(), mtime)
        })
        .collect()
}

/// The store directories at or under `dir` (named `name`): `dir` itself
/// if it holds a file, else those under its subdirectories.
fn store_dirs(dir: &Path, name: &str) -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let entries: Vec<_> = entries.flatten().collect();
    if entries
        .iter()
        .any(|e| e.file_type().is_ok_and(|t| t.is_file()))
    {
        return vec![(name.to_string(), dir.to_path_buf())];
    }
    entries
        .iter()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .flat_map(|e| {
            let child = format!("{name}/{}", e.file_name().to_string_lossy());
            store_dirs(&e.path(), &child)
        })
        .collect()
}

/// The report's section on disk space.
pub fn section(doc: &mut Report, space: &[StoreSpace]) {
    if space.is_empty() {
        return;
    }
    doc.h2("Disk space");
    doc.text(
        "Every store directory the run wrote under its work directory, ferrite's \
         and the peers': the most it held at any sample while the experiment ran \
         (every 100 ms, allocated blocks as `du` counts them) and what it held at \
         the end, every store closed, each also per byte of the user keys and \
         values its load wrote (\"user data\"; \"–\" where the experiment loads \
         a store by other means). A store removed before the end (a variant \
         opened afresh for its next phase) shows its peak only.",
    );
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1 << 20) as f64);
    let ratio = |a: u64, b: Option<u64>| match b {
        Some(b) if a > 0 && b > 0 => format!("{:.2}", a as f64 / b as f64),
        _ => "–".to_string(),
    };
    let mut t = Table::new([
        "store directory",
        "user data",
        "peak",
        "peak / user",
        "at the end",
        "end / user",
        "peak / end",
    ]);
    for s in space {
        let end = if s.end_bytes == 0 {
            "removed".to_string()
        } else {
            mib(s.end_bytes)
        };
        t.row([
            format!("`{}`", s.dir),
            s.user_bytes.map_or("–".to_string(), mib),
            mib(s.peak_bytes),
            ratio(s.peak_bytes, s.user_bytes),
            end,
            ratio(s.end_bytes, s.user_bytes),
            ratio(s.peak_bytes, Some(s.end_bytes)),
        ]);
    }
    doc.table(&t);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, bytes: usize) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, vec![7u8; bytes]).unwrap();
    }

    #[test]
    fn a_store_directory_is_the_highest_one_holding_a_file() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        write(&r.join("zkv/plain/FERRITE"), 10);
        write(&r.join("zkv/plain/part/0/table"), 8192);
        write(&r.join("zkv/gc/FERRITE"), 10);
        std::fs::create_dir_all(r.join("zkv/empty/deeper")).unwrap();
        let mut names: Vec<String> = store_dirs(&r.join("zkv"), "zkv")
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        names.sort();
        assert_eq!(names, ["zkv/gc", "zkv/plain"]);
    }

    #[test]
    fn the_watch_reports_what_the_run_touched_with_its_peak() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        // An earlier run's stores: one left alone, one beside a store the
        // run writes.
        write(&r.join("old/data"), 4096);
        write(&r.join("exp/earlier/data"), 4096);
        let watch = SpaceWatch::start(r);
        write(&r.join("exp/grew/data"), 1 << 20);
        write(&r.join("gone/data"), 1 << 20);
        user_data::declare(&r.join("exp/grew"), 512 << 10);
        std::thread::sleep(EVERY * 3);
        std::fs::remove_dir_all(r.join("gone")).unwrap();
        write(&r.join("exp/grew/data"), 4096);
        let space = watch.finish();
        let by: BTreeMap<_, _> = space.iter().map(|s| (s.dir.as_str(), s)).collect();
        assert!(!by.contains_key("old"), "{space:?}");
        assert!(!by.contains_key("exp/earlier"), "{space:?}");
        assert!(by["exp/grew"].peak_bytes >= 1 << 20, "{space:?}");
        assert!(by["exp/grew"].end_bytes < 1 << 20, "{space:?}");
        assert_eq!(by["exp/grew"].user_bytes, Some(512 << 10));
        assert_eq!(by["gone"].user_bytes, None);
        assert!(by["gone"].peak_bytes >= 1 << 20, "{space:?}");
        assert_eq!(by["gone"].end_bytes, 0);
    }

    #[test]
    fn the_section_gives_peak_end_and_their_ratio() {
        let out = tempfile::tempdir().unwrap();
        let mut doc = Report::new(out.path(), "demo").unwrap();
        section(
            &mut doc,
            &[
                StoreSpace {
                    dir: "btree".into(),
                    peak_bytes: 3 << 20,
                    end_bytes: 2 << 20,
                    user_bytes: Some(1 << 20),
                },
                StoreSpace {
                    dir: "scratch".into(),
                    peak_bytes: 1 << 20,
                    end_bytes: 0,
                    user_bytes: None,
                },
            ],
        );
        doc.finish().unwrap();
        let md = std::fs::read_to_string(out.path().join("demo.md")).unwrap();
        assert!(
            md.contains("| `btree` | 1.0 MiB | 3.0 MiB | 3.00 | 2.0 MiB | 2.00 | 1.50 |"),
            "{md}"
        );
        assert!(
            md.contains("| `scratch` | – | 1.0 MiB | – | removed | – | – |"),
            "{md}"
        );
    }
}
