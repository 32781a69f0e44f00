//! The user data each store directory holds, as the code that loaded it
//! declares it: the key and value bytes its load wrote, which stay its
//! live data while later writes replace values of the same size. The
//! repro driver's disk-space table divides each store directory's bytes
//! by it, so every report gives bytes per user byte beside the peers'.
//!
//! Process-wide and keyed by absolute path: a loader need not carry the
//! experiment's context down to where it knows both the directory and the
//! bytes, and paths under distinct work directories never meet. A
//! directory loaded again (a fresh store under the same name) replaces
//! its figure; a store directory's user data is the sum of the
//! declarations at or under it (a store of several partitions, each
//! loaded on its own).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

static LEDGER: Mutex<BTreeMap<PathBuf, u64>> = Mutex::new(BTreeMap::new());

/// Lexically absolute: the watcher and the loaders join the same work
/// directory, relative or not, and must name a directory alike.
fn key(dir: &Path) -> PathBuf {
    std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf())
}

fn ledger() -> std::sync::MutexGuard<'static, BTreeMap<PathBuf, u64>> {
    // A panic elsewhere while holding it leaves a map that is still whole.
    LEDGER.lock().unwrap_or_else(|e| e.into_inner())
}

/// The store at `dir` now holds `bytes` of user keys and values.
pub fn declare(dir: &Path, bytes: u64) {
    ledger().insert(key(dir), bytes);
}

/// The user data declared at or under `dir`, if any was.
pub fn at_or_under(dir: &Path) -> Option<u64> {
    let dir = key(dir);
    let ledger = ledger();
    let mut found = None;
    for (_, &b) in ledger
        .range(dir.clone()..)
        .take_while(|(p, _)| p.starts_with(&dir))
    {
        *found.get_or_insert(0) += b;
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_sums_what_was_declared_at_or_under_it() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        declare(&r.join("lsm/part0"), 100);
        declare(&r.join("lsm/part1"), 50);
        declare(&r.join("lsm-other"), 7);
        declare(&r.join("btree"), 10);
        declare(&r.join("btree"), 30); // loaded afresh
        assert_eq!(at_or_under(&r.join("lsm")), Some(150));
        assert_eq!(at_or_under(&r.join("lsm/part1")), Some(50));
        assert_eq!(at_or_under(&r.join("btree")), Some(30));
        assert_eq!(at_or_under(&r.join("zkv")), None);
        assert_eq!(at_or_under(r), Some(187));
    }
}
