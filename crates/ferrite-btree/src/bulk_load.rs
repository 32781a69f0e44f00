//! Bulk loading: building a tree bottom-up from sorted input.
//!
//! Leaves are filled left to right to a target fill factor, then each inner
//! level is built over the level below, until one page remains: the root.
//! Pages get consecutive fresh ids and are written in runs straight to the
//! page file (no checkpoint references them yet, so this is safe), and the
//! caller's checkpoint then installs the new root atomically. Input must be
//! strictly ascending; anything else is an error before the tree changes.

use ferrite_core::{check_value, Error, Result};
use ferrite_io::AlignedBuf;

use crate::page::{self, PageId, StoredValue, KIND_INNER, KIND_LEAF};
use crate::tree::{Shape, Tree};

/// Pages written per device write.
const RUN_PAGES: usize = 256;

struct Writer<'t> {
    tree: &'t Tree,
    run: Vec<(PageId, AlignedBuf)>,
}

impl Writer<'_> {
    fn emit(&mut self, id: PageId, mut b: AlignedBuf) -> Result<()> {
        page::seal(&mut b);
        if self.run.last().is_some_and(|(last, _)| *last + 1 != id) || self.run.len() >= RUN_PAGES {
            self.flush()?;
        }
        self.run.push((id, b));
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        let Some(&(first, _)) = self.run.first() else {
            return Ok(());
        };
        let ps = self.tree.page_size;
        let mut buf = AlignedBuf::zeroed(self.run.len() * ps);
        for (i, (_, p)) in self.run.iter().enumerate() {
            buf[i * ps..(i + 1) * ps].copy_from_slice(p);
        }
        self.tree.pool.device().write_at(&buf, first * ps as u64)?;
        self.run.clear();
        Ok(())
    }
}

/// One level under construction: the open page and what the level above
/// needs (first key and id of each finished page).
struct Level {
    kind: u8,
    level: u8,
    page: AlignedBuf,
    id: PageId,
    used: usize,
    children: Vec<(Vec<u8>, PageId)>,
}

pub fn load(
    tree: &Tree,
    shape: &mut Shape,
    pairs: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>,
    fill: f64,
    max_key: usize,
) -> Result<u64> {
    let ps = tree.page_size;
    let budget = ((page::usable(ps) as f64) * fill.clamp(0.5, 1.0)) as usize;
    let mut w = Writer {
        tree,
        run: Vec::new(),
    };
    let alloc = |shape: &mut Shape| {
        let id = shape.page_count;
        shape.page_count += 1;
        id
    };
    let new_page = |id: PageId, kind: u8, level: u8| {
        let mut b = AlignedBuf::zeroed(ps);
        page::init(&mut b, id, kind, level);
        b
    };
    let mut leaf = Level {
        kind: KIND_LEAF,
        level: 0,
        page: AlignedBuf::zeroed(0),
        id: 0,
        used: 0,
        children: Vec::new(),
    };
    let mut prev_key: Option<Vec<u8>> = None;
    let mut count = 0u64;
    for (k, v) in pairs {
        if k.is_empty() || k.len() > max_key {
            return Err(Error::KeyTooLarge {
                len: k.len(),
                max: max_key,
            });
        }
        check_value(&v)?;
        if prev_key.as_ref().is_some_and(|p| *p >= k) {
            return Err(Error::InvalidOptions(
                "bulk load input is not strictly ascending".into(),
            ));
        }
        let stored_first;
        let stored = if k.len() + v.len() <= tree.inline_max() {
            StoredValue::Inline(&v)
        } else {
            stored_first = tree.write_overflow(shape, &v)?;
            StoredValue::Overflow {
                first: stored_first,
                len: v.len() as u32,
            }
        };
        let need = page::leaf_cell_size(k.len(), &stored);
        if leaf.page.is_empty() || (leaf.used + need > budget && page::count(&leaf.page) > 0) {
            let id = alloc(shape);
            if !leaf.page.is_empty() {
                page::set_link(&mut leaf.page, id);
                let done = std::mem::replace(&mut leaf.page, new_page(id, KIND_LEAF, 0));
                w.emit(leaf.id, done)?;
            } else {
                leaf.page = new_page(id, KIND_LEAF, 0);
            }
            leaf.id = id;
            leaf.used = 0;
            leaf.children.push((k.clone(), id));
        }
        let n = page::count(&leaf.page);
        if !page::leaf_insert(&mut leaf.page, n, &k, &stored) {
            return Err(Error::corruption(
                "bulk load",
                "a cell does not fit an empty leaf",
            ));
        }
        leaf.used += need;
        prev_key = Some(k);
        count += 1;
    }
    if leaf.page.is_empty() {
        return Ok(0);
    }
    let last = std::mem::take(&mut leaf.page);
    w.emit(leaf.id, last)?;
    // Inner levels until a single page remains.
    let mut below = leaf.children;
    let mut level = 0u8;
    while below.len() > 1 {
        level += 1;
        let mut cur = Level {
            kind: KIND_INNER,
            level,
            page: AlignedBuf::zeroed(0),
            id: 0,
            used: 0,
            children: Vec::new(),
        };
        for (key, child) in below {
            let need = page::inner_cell_size(key.len());
            if cur.page.is_empty() || cur.used + need > budget {
                if !cur.page.is_empty() {
                    let done = std::mem::take(&mut cur.page);
                    w.emit(cur.id, done)?;
                }
                cur.id = alloc(shape);
                cur.page = new_page(cur.id, cur.kind, cur.level);
                page::set_link(&mut cur.page, child);
                cur.used = 0;
                cur.children.push((key, cur.id));
                continue;
            }
            let n = page::count(&cur.page);
            if !page::inner_insert(&mut cur.page, n, &key, child) {
                return Err(Error::corruption(
                    "bulk load",
                    "a separator does not fit an inner page",
                ));
            }
            cur.used += need;
        }
        let done = std::mem::take(&mut cur.page);
        w.emit(cur.id, done)?;
        below = cur.children;
    }
    w.flush()?;
    // The pages were written beside the pool; the new root replaces the
    // empty one in one change, so lookups see the old tree or the new.
    let _change = tree.version.change();
    shape.root = below.first().map_or(shape.root, |(_, id)| *id);
    shape.height = u32::from(level);
    tree.publish(shape);
    Ok(count)
}
