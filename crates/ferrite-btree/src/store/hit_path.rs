//! The in-cache hit path taken apart: what a lookup of a resident key
//! costs, part by part, measured on the store's own pages (for the
//! harness's `hit-path` benchmark; not a stable API).
//!
//! Each part runs alone over the same keys in the same order, and every
//! round runs every part once, so a slow moment of a shared machine falls
//! on all of them; each figure is the median over rounds. The parts do not
//! add up to the whole exactly: run alone, a part has the caches to itself
//! (the page table's lines are not pushed out by pages, and so on).

use std::time::Instant;

use ferrite_core::{Error, Result};

use super::BTreeStore;
use crate::page::{self, PageId};

/// Nanoseconds per lookup of each part of the hit path (medians over
/// rounds), with the pages a lookup passes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HitPath {
    /// `get`, whole: descent through routes, leaf search, value copy,
    /// validation and counters.
    pub get: f64,
    /// Root to leaf through routes, as `get` descends.
    pub descent_routed: f64,
    /// Root to leaf by the page table at every level.
    pub descent_table: f64,
    /// The page-table lookups of a lookup's pages, alone.
    pub table: f64,
    /// Latching and releasing the frames of a lookup's pages, alone.
    pub latches: f64,
    /// Searching a lookup's pages (inner routing and the leaf's search),
    /// latched, with no descent around it.
    pub search: f64,
    /// Latching the leaf's frame and copying the value out of its slot
    /// (found beforehand).
    pub copy: f64,
    /// Pages per lookup, root to leaf.
    pub pages: f64,
    pub rounds: usize,
    pub keys: usize,
}

impl BTreeStore {
    /// Measures [`HitPath`] over `keys`, which must all be resident (load
    /// the store within its pool and read them once first), in `rounds`
    /// rounds. Only for the plain tree (no insert buffer, no SHORTCUT).
    pub fn hit_path(&self, keys: &[Vec<u8>], rounds: usize) -> Result<HitPath> {
        let s = &self.shared;
        if !s.lock_free_lookups() {
            return Err(Error::InvalidOptions(
                "the hit path is measured on the plain tree".into(),
            ));
        }
        let tree = &s.tree;
        // Every key's pages, root to leaf, and their frames.
        let mut paths: Vec<Vec<(PageId, usize)>> = Vec::with_capacity(keys.len());
        for k in keys {
            let mut path = Vec::new();
            tree.path_published(k, &mut path)?;
            let mut framed = Vec::with_capacity(path.len());
            for id in path {
                let Some(f) = tree.pool.frame_of(id) else {
                    return Err(Error::InvalidOptions(format!(
                        "page {id} is not resident: warm the store first"
                    )));
                };
                framed.push((id, f));
            }
            paths.push(framed);
        }
        // Each key's leaf frame and slot, for the copy alone.
        let mut slots = Vec::with_capacity(keys.len());
        for (k, path) in keys.iter().zip(&paths) {
            let Some(&(_, f)) = path.last() else { continue };
            if let Some(i) = tree.pool.with_frame(f, |b| page::search(b, k).ok()) {
                slots.push((f, i));
            }
        }
        let pages = paths.iter().map(Vec::len).sum::<usize>() as f64 / keys.len().max(1) as f64;
        let per_key = |ns: u128| ns as f64 / keys.len().max(1) as f64;
        let mut parts: [Vec<f64>; 7] = Default::default();
        let mut sink = 0usize;
        for _ in 0..rounds {
            let t = Instant::now();
            for k in keys {
                sink += self.shared.get(k)?.map_or(0, |v| v.len());
            }
            parts[0].push(per_key(t.elapsed().as_nanos()));

            let t = Instant::now();
            for k in keys {
                sink += tree.route_published(k)?.leaf as usize;
            }
            parts[1].push(per_key(t.elapsed().as_nanos()));

            let t = Instant::now();
            for k in keys {
                sink += tree.leaf_by_table(k)? as usize;
            }
            parts[2].push(per_key(t.elapsed().as_nanos()));

            let t = Instant::now();
            for path in &paths {
                for &(id, _) in path {
                    sink += tree.pool.frame_of(id).unwrap_or(0);
                }
            }
            parts[3].push(per_key(t.elapsed().as_nanos()));

            let t = Instant::now();
            for path in &paths {
                for &(_, f) in path {
                    sink += usize::from(tree.pool.latch_frame(f));
                }
            }
            parts[4].push(per_key(t.elapsed().as_nanos()));

            let t = Instant::now();
            for (k, path) in keys.iter().zip(&paths) {
                for &(_, f) in path {
                    sink += tree.pool.with_frame(f, |b| match page::kind(b) {
                        page::KIND_INNER => page::child_route(b, k).0,
                        _ => page::search(b, k).unwrap_or(0),
                    });
                }
            }
            parts[5].push(per_key(t.elapsed().as_nanos()));

            let t = Instant::now();
            for &(f, i) in &slots {
                sink += tree.pool.with_frame(f, |b| match page::value(b, i) {
                    page::StoredValue::Inline(v) => v.to_vec().len(),
                    page::StoredValue::Overflow { .. } => 0,
                });
            }
            parts[6].push(per_key(t.elapsed().as_nanos()));
        }
        std::hint::black_box(sink);
        let m: Vec<f64> = parts.iter_mut().map(|p| median(p)).collect();
        Ok(HitPath {
            get: m[0],
            descent_routed: m[1],
            descent_table: m[2],
            table: m[3],
            latches: m[4],
            search: m[5],
            copy: m[6],
            pages,
            rounds,
            keys: keys.len(),
        })
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}
