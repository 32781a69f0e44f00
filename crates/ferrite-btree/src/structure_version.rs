//! The tree's structure version: a sequence lock over every change a
//! lookup could observe half-done, so lookups run without the tree's lock.
//!
//! A lookup descends by page latches alone, one page at a time (each page
//! is read under its shared latch, so every page it sees is whole). That is
//! enough for changes confined to one page, such as an insert into a leaf
//! with room, which a lookup sees entirely or not at all. A change that
//! spans pages — a split and its separator posted up, a root growing, an
//! overflow chain freed (its ids may be reused at once), a re-layout, a
//! bulk load, and every batch of more than one write (atomic to readers) —
//! runs inside a [`Change`]: the version is odd while it runs and moves on
//! when it ends. A lookup reads the version before and after; if it was odd
//! or moved, the lookup may have mixed pages from before and after, and it
//! runs again.
//!
//! Invariants: only the holder of the tree's write lock opens a change (so
//! changes never overlap, and a nested one joins the open one); the version
//! is even exactly when no change is open. Why the check is sound: a change
//! bumps the version before its first page write, and a lookup that reads
//! any page the change wrote acquires that page's latch after the change
//! released it, so its second reading sees the bump; a lookup whose first
//! reading sees the closing bump (release / acquire) sees every page the
//! change wrote.

#[cfg(feature = "loom")]
use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(feature = "loom"))]
use std::sync::atomic::{AtomicU64, Ordering};

/// Attempts a lookup makes optimistically before its caller falls back to
/// the tree's lock.
pub const OPTIMISTIC_ATTEMPTS: usize = 4;

#[derive(Debug, Default)]
pub struct StructureVersion {
    v: AtomicU64,
}

/// An open change: closes on drop. A nested change is inert.
#[must_use = "a change closes when dropped"]
pub struct Change<'v> {
    version: Option<&'v StructureVersion>,
}

impl Drop for Change<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.version {
            s.v.fetch_add(1, Ordering::Release);
        }
    }
}

impl StructureVersion {
    pub fn new() -> Self {
        Self::default()
    }

    /// Opens a change (callers hold the tree's write lock), or joins the
    /// one already open.
    pub fn change(&self) -> Change<'_> {
        if !self.v.load(Ordering::Relaxed).is_multiple_of(2) {
            return Change { version: None };
        }
        // AcqRel: the bump is ordered before the change's page writes.
        self.v.fetch_add(1, Ordering::AcqRel);
        Change {
            version: Some(self),
        }
    }

    /// The version to validate against, or `None` while a change is open.
    pub fn begin(&self) -> Option<u64> {
        let v = self.v.load(Ordering::Acquire);
        v.is_multiple_of(2).then_some(v)
    }

    /// Whether no change opened since `begin` returned `v`.
    pub fn validate(&self, v: u64) -> bool {
        self.v.load(Ordering::Acquire) == v
    }

    /// Runs `read` until it completes with no change overlapping it, at
    /// most [`OPTIMISTIC_ATTEMPTS`] times; `None` if every attempt was
    /// overlapped (the caller then reads under the tree's lock). An error
    /// from an overlapped attempt is discarded: the pages it saw may have
    /// been mid-change.
    pub fn optimistic<T, E>(&self, read: impl FnMut() -> Result<T, E>) -> Option<Result<T, E>> {
        self.optimistic_at(read).map(|(r, _)| r)
    }

    /// [`StructureVersion::optimistic`], also returning the version the
    /// read is valid at (a caller may later check that nothing changed
    /// since, to extend the read under the tree's lock).
    pub fn optimistic_at<T, E>(
        &self,
        mut read: impl FnMut() -> Result<T, E>,
    ) -> Option<(Result<T, E>, u64)> {
        for attempt in 0..OPTIMISTIC_ATTEMPTS {
            let Some(v) = self.begin() else {
                backoff(attempt);
                continue;
            };
            let r = read();
            if self.validate(v) {
                return Some((r, v));
            }
            backoff(attempt);
        }
        None
    }
}

fn backoff(attempt: usize) {
    #[cfg(feature = "loom")]
    {
        let _ = attempt;
        loom::thread::yield_now();
    }
    #[cfg(not(feature = "loom"))]
    for _ in 0..(1usize << attempt.min(6)) * 16 {
        std::hint::spin_loop();
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;

    #[test]
    fn odd_while_a_change_is_open_and_nested_changes_join() {
        let s = StructureVersion::new();
        let v = s.begin().unwrap();
        {
            let _c = s.change();
            assert_eq!(s.begin(), None);
            {
                let _inner = s.change();
                assert_eq!(s.begin(), None);
            }
            assert_eq!(s.begin(), None, "the inner change must not close the outer");
        }
        assert!(!s.validate(v));
        let w = s.begin().unwrap();
        assert_eq!(w, v + 2);
        assert!(s.validate(w));
    }

    #[test]
    fn an_overlapped_read_runs_again_and_gives_up_after_its_attempts() {
        let s = StructureVersion::new();
        let mut runs = 0;
        let r: Option<Result<u32, ()>> = s.optimistic(|| {
            runs += 1;
            if runs == 1 {
                // A change begins and ends during the first attempt.
                drop(s.change());
            }
            Ok(runs)
        });
        assert_eq!(r, Some(Ok(2)));
        let _open = s.change();
        let mut tries = 0;
        let r: Option<Result<(), ()>> = s.optimistic(|| {
            tries += 1;
            Ok(())
        });
        assert_eq!(
            (r, tries),
            (None, 0),
            "no attempt reads while a change is open"
        );
    }
}

/// The protocol under loom: a writer splits a leaf (moving a key to a new
/// leaf) and then points the root at it, inside a change and under the
/// tree's lock; a reader looks the moving key up by latches alone, falling
/// back to the tree's lock when its attempts are overlapped. In every
/// interleaving loom explores, the key is found: an unvalidated lookup can
/// read the old root and then the split leaf, and miss it.
#[cfg(all(test, feature = "loom"))]
mod loom_model {
    use super::*;
    use loom::sync::{Arc, RwLock};

    struct Tree {
        version: StructureVersion,
        /// The tree's lock: writers hold it exclusively.
        lock: RwLock<()>,
        /// The root: keys at or above the separator go to leaf 1.
        root: RwLock<u64>,
        leaves: [RwLock<Vec<u64>>; 2],
    }

    fn lookup(t: &Tree, key: u64) -> bool {
        let read = || -> Result<bool, ()> {
            let leaf = usize::from(key >= *t.root.read().map_err(drop)?);
            Ok(t.leaves[leaf].read().map_err(drop)?.contains(&key))
        };
        match t.version.optimistic(read) {
            Some(r) => r.unwrap_or(false),
            None => {
                let _shared = t.lock.read().map_err(drop);
                read().unwrap_or(false)
            }
        }
    }

    #[test]
    fn a_lookup_never_misses_a_key_a_split_moves() {
        loom::model(|| {
            let t = Arc::new(Tree {
                version: StructureVersion::new(),
                lock: RwLock::new(()),
                root: RwLock::new(u64::MAX),
                leaves: [RwLock::new(vec![1, 2, 3, 4]), RwLock::new(Vec::new())],
            });
            let w = t.clone();
            let writer = loom::thread::spawn(move || {
                let _exclusive = w.lock.write().map_err(drop);
                let _change = w.version.change();
                {
                    let mut left = w.leaves[0].write().unwrap_or_else(|e| e.into_inner());
                    let mut right = w.leaves[1].write().unwrap_or_else(|e| e.into_inner());
                    let moved: Vec<u64> = left.iter().copied().filter(|&k| k >= 3).collect();
                    left.retain(|&k| k < 3);
                    right.extend(moved);
                }
                *w.root.write().unwrap_or_else(|e| e.into_inner()) = 3;
            });
            assert!(lookup(&t, 3), "the moving key was missed");
            assert!(lookup(&t, 1));
            assert!(writer.join().is_ok(), "the writer panicked");
            assert!(lookup(&t, 4));
        });
    }
}
