//! Bulk loading: building a tree bottom-up from sorted input.
//!
//! Leaves are filled left to right to a target fill factor, then each inner
//! level is built over the level below, until one page remains: the root.
//! Pages get consecutive fresh ids and are written in runs straight to the
//! page file (no checkpoint references them yet, so this is safe), and the
//! caller's checkpoint then installs the new root atomically. Input must be
//! strictly ascending; anything else is an error before the tree changes.

use std::collections::VecDeque;

use ferrite_core::engine::check_value;
use ferrite_core::{Error, Result};
use ferrite_io::AlignedBuf;

use crate::page::{self, PageId, StoredValue, KIND_INNER, KIND_LEAF};
use crate::shape::Shape;
use crate::tree::{separator, Tree};

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

/// The page being filled: its id, image, low fence and cell bytes so far.
struct Open {
    id: PageId,
    page: AlignedBuf,
    low: Option<Vec<u8>>,
    used: usize,
}

/// Cells waiting for a page, in key order.
type Pending = VecDeque<Vec<u8>>;

/// Closes `open` with high fence `high(page)`, moving trailing cells to the
/// front of `pending` until the fence fits; the page keeps at least one
/// cell (leaves) or its leftmost child (inner pages), which is why keys are
/// limited to a third of a page. Returns the high fence, which is the
/// next page's low fence.
fn close(
    open: &mut Open,
    pending: &mut Pending,
    high: &dyn Fn(&[u8], &Pending) -> Vec<u8>,
) -> Result<Vec<u8>> {
    loop {
        let h = high(&open.page, pending);
        if page::set_fences(&mut open.page, open.low.as_deref(), Some(&h)) {
            return Ok(h);
        }
        let n = page::count(&open.page);
        if n == 0 || (n == 1 && page::kind(&open.page) == KIND_LEAF) {
            return Err(Error::corruption(
                "bulk load",
                "a cell and its fence keys do not fit a page",
            ));
        }
        pending.push_front(page::raw_cell(&open.page, n - 1));
        page::remove(&mut open.page, n - 1);
    }
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
    let new_page = |id: PageId, kind: u8, level: u8, low: Option<&[u8]>| {
        let mut b = AlignedBuf::zeroed(ps);
        page::init(&mut b, id, kind, level);
        // An empty page always has room for one fence of a valid key.
        page::set_fences(&mut b, low, None);
        b
    };
    // Leaves: cells wait in `pending` (a closed page hands its trailing
    // cells back there) and go into the open leaf in order. Each leaf's
    // high fence is the shortest separator from its last key to the next
    // leaf's first, and the same key routes to the next leaf above.
    let mut pending: Pending = VecDeque::new();
    let mut open: Option<Open> = None;
    let mut children: Vec<(Vec<u8>, PageId)> = Vec::new();
    let mut prev_key: Option<Vec<u8>> = None;
    let mut count = 0u64;
    let leaf_high = |b: &[u8], pending: &Pending| {
        let last = page::key(b, page::count(b) - 1);
        let next = pending
            .front()
            .map_or(&[][..], |c| page::raw_cell_key(c, KIND_LEAF));
        separator(last, next)
    };
    for (k, v) in pairs {
        if k.is_empty() || k.len() > max_key {
            return Err(Error::KeyTooLarge {
                len: k.len(),
                max: max_key,
            });
        }
        check_value(&v)?;
        if prev_key.as_ref().is_some_and(|p| *p >= k) {
            return Err(Error::NotAscending { index: count });
        }
        let stored = if k.len() + v.len() <= tree.inline_max() {
            StoredValue::Inline(&v)
        } else {
            tree.write_overflow(shape, &v)?
        };
        pending.push_back(page::encode_leaf_cell(&k, &stored));
        prev_key = Some(k);
        count += 1;
        while let Some(cell) = pending.pop_front() {
            let o = match &mut open {
                Some(o) => o,
                None => {
                    let id = alloc(shape);
                    let low = children.last().map(|(k, _)| k.clone());
                    let page = new_page(id, KIND_LEAF, 0, low.as_deref());
                    children.push((low.clone().unwrap_or_default(), id));
                    open.insert(Open {
                        id,
                        page,
                        low,
                        used: 0,
                    })
                }
            };
            let need = page::raw_cell_size(&cell);
            let n = page::count(&o.page);
            if (n == 0 || o.used + need <= budget) && page::insert_raw(&mut o.page, n, &cell) {
                o.used += need;
                continue;
            }
            if n == 0 {
                return Err(Error::corruption(
                    "bulk load",
                    "a cell does not fit an empty leaf",
                ));
            }
            pending.push_front(cell);
            let high = close(o, &mut pending, &leaf_high)?;
            let next = alloc(shape);
            page::set_link(&mut o.page, next);
            let done = std::mem::take(&mut o.page);
            w.emit(o.id, done)?;
            let page = new_page(next, KIND_LEAF, 0, Some(&high));
            children.push((high.clone(), next));
            open = Some(Open {
                id: next,
                page,
                low: Some(high),
                used: 0,
            });
        }
    }
    let Some(last) = open.take() else {
        return Ok(0);
    };
    w.emit(last.id, last.page)?;
    // Inner levels until a single page remains. `below` pairs each page of
    // the level below with its low fence; a page's first child goes in its
    // link, the others as cells keyed by their low fences, and its high
    // fence is the low fence of the first child of the next page.
    let mut below = children;
    let mut level = 0u8;
    let inner_high = |_: &[u8], pending: &Pending| {
        pending
            .front()
            .map(|c| page::raw_cell_key(c, KIND_INNER).to_vec())
            .unwrap_or_default()
    };
    while below.len() > 1 {
        level += 1;
        let mut pending: Pending = below
            .iter()
            .map(|(k, id)| page::encode_inner_cell(k, *id))
            .collect();
        let mut above: Vec<(Vec<u8>, PageId)> = Vec::new();
        let mut open: Option<Open> = None;
        while let Some(cell) = pending.pop_front() {
            let Some(o) = &mut open else {
                let id = alloc(shape);
                let low =
                    (!above.is_empty()).then(|| page::raw_cell_key(&cell, KIND_INNER).to_vec());
                let mut page = new_page(id, KIND_INNER, level, low.as_deref());
                page::set_link(&mut page, page::raw_cell_child(&cell));
                above.push((low.clone().unwrap_or_default(), id));
                open = Some(Open {
                    id,
                    page,
                    low,
                    used: 0,
                });
                continue;
            };
            let need = page::raw_cell_size(&cell);
            let n = page::count(&o.page);
            if o.used + need <= budget && page::insert_raw(&mut o.page, n, &cell) {
                o.used += need;
                continue;
            }
            pending.push_front(cell);
            close(o, &mut pending, &inner_high)?;
            let done = std::mem::take(&mut o.page);
            w.emit(o.id, done)?;
            open = None;
        }
        if let Some(o) = open {
            w.emit(o.id, o.page)?;
        }
        below = above;
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
