//! Overflow chains: values too long for a leaf cell, stored on a linked
//! chain of overflow pages that the leaf cell names by first page and
//! value length.
//!
//! Invariants:
//! - a chain of a `len`-byte value has `max(1, ⌈len / usable⌉)` pages, each
//!   of kind overflow, sealed with its own id; the last links to 0;
//! - chains are written straight to the page file at ids the durable
//!   checkpoint does not use (clean ids, then fresh ones), never through
//!   the pool, so no frame may hold an older image of an id a chain takes:
//!   the writer forgets every id once its new image is on the device;
//! - a chain is laid out on consecutive ids where the clean list allows
//!   ([`take_ids`]), and read in as few overlapped batches as its layout
//!   allows: a whole contiguous chain costs one round of reads, not one
//!   dependent read per page;
//! - a leaf cell marks a chain on consecutive ids as a run, so freeing it
//!   needs no reads; any other chain is walked to learn its ids;
//! - freed chain ids are free, not clean: the durable checkpoint may still
//!   name them, so they are reused only after the next checkpoint;
//! - a chain's first page says how its bytes encode the value (byte 14,
//!   [`CHAIN_RAW`] or [`CHAIN_LZ4`]); the cell's length is the chain's
//!   byte count either way, so walking and freeing a chain never depend
//!   on its encoding. A value is stored compressed only when that takes
//!   at least one page fewer (`Tree::compress_values`): a value that
//!   compresses by less costs a decompression on every read and saves no
//!   device byte.

use std::ops::Range;

use ferrite_core::{Error, Result};
use ferrite_io::WriteReq;

use crate::page::{self, PageId, StoredValue, KIND_OVERFLOW};
use crate::shape::Shape;
use crate::tree::Tree;

/// The chain holds the value's bytes.
pub(crate) const CHAIN_RAW: u8 = 0;
/// The chain holds `value length: u32` then the value as an lz4 block.
pub(crate) const CHAIN_LZ4: u8 = 1;
/// Header byte of a chain's first page naming its encoding (the slot
/// layout byte of leaf and inner pages, unused by overflow pages).
const ENCODING_AT: usize = 14;

/// How many of the lowest clean ids [`take_ids`] looks through for a run.
const RUN_WINDOW: usize = 4096;

/// Most pages read in one batch: a chain of a few MiB is read in rounds
/// of at most this many pages, so it never pins much of the pool at once.
const MAX_BATCH: usize = 256;

/// Takes `n` ids for one chain from `clean` (sorted descending, so the
/// lowest ids are popped first) and returns them ascending. Among the
/// [`RUN_WINDOW`] lowest ids it takes the lowest run of `n` consecutive
/// ids; failing that, whole runs longest first (the lowest of equal ones),
/// so the chain has as few pieces as the list allows. Returns fewer than
/// `n` only when `clean` holds fewer; `clean` stays sorted.
pub(crate) fn take_ids(clean: &mut Vec<PageId>, n: usize) -> Vec<PageId> {
    if n == 0 {
        return Vec::new();
    }
    let from = clean.len().saturating_sub(RUN_WINDOW);
    // The window ascending, cut into runs of consecutive ids (as index
    // ranges into `low`).
    let low: Vec<PageId> = clean[from..].iter().rev().copied().collect();
    let mut runs: Vec<Range<usize>> = Vec::new();
    for (i, &id) in low.iter().enumerate() {
        match runs.last_mut() {
            Some(r) if low[r.end - 1] + 1 == id => r.end = i + 1,
            _ => runs.push(i..i + 1),
        }
    }
    let picked: Vec<Range<usize>> = match runs.iter().find(|r| r.len() >= n) {
        Some(r) => std::iter::once(r.start..r.start + n).collect(),
        None => {
            runs.sort_by_key(|r| (std::cmp::Reverse(r.len()), r.start));
            let mut left = n;
            let mut picked = Vec::new();
            for r in runs {
                if left == 0 {
                    break;
                }
                let take = r.len().min(left);
                picked.push(r.start..r.start + take);
                left -= take;
            }
            picked
        }
    };
    let mut taken = vec![false; low.len()];
    let mut ids = Vec::with_capacity(n);
    for r in picked {
        for i in r {
            taken[i] = true;
            ids.push(low[i]);
        }
    }
    ids.sort_unstable();
    clean.truncate(from);
    clean.extend(
        low.iter()
            .zip(&taken)
            .rev()
            .filter(|(_, &t)| !t)
            .map(|(&id, _)| id),
    );
    ids
}

/// Puts `id` back into `clean` (sorted descending) where it belongs.
fn return_id(clean: &mut Vec<PageId>, id: PageId) {
    let at = clean.partition_point(|&c| c > id);
    clean.insert(at, id);
}

/// The pages of a chain of a `len`-byte value in pages of `per` usable bytes.
fn chain_pages(len: u32, per: usize) -> usize {
    (len as usize).div_ceil(per).max(1)
}

/// How many pages the next batch of a chain walk asks for, starting at
/// page `next`, the one the chain goes on to, with `left` pages still to
/// come. `last` is the previous batch, if any: the end (exclusive) of the
/// ids it asked for and how many of them were chain pages. The first
/// batch, and one where the chain carries on right after the last, asks
/// for the rest of the chain as one run; after a jump the chain is
/// fragmented, so the guess is only twice what the last batch yielded,
/// which keeps the pages read beside the chain within a small multiple
/// of the chain itself.
pub(crate) fn next_batch(next: PageId, last: Option<(PageId, usize)>, left: usize) -> usize {
    let n = match last {
        Some((end, used)) if end != next => 2 * used.max(1),
        _ => left,
    };
    n.clamp(1, MAX_BATCH).min(left.max(1))
}

impl Tree {
    /// Most pages one batch of chain reads loads: [`MAX_BATCH`], and no
    /// more than a quarter of the pool, so a batch never crowds out the
    /// pages around it.
    fn batch_cap(&self) -> usize {
        (self.pool.capacity() / 4).clamp(1, MAX_BATCH)
    }

    /// Visits the pages of the `len`-byte chain starting at `first`, in
    /// order, with each page's id and payload, and returns the chain's
    /// encoding. Pages are loaded through the pool in overlapped batches
    /// guessed from the layout (see [`next_batch`]).
    pub(crate) fn walk_overflow(
        &self,
        first: PageId,
        len: u32,
        visit: &mut dyn FnMut(PageId, &[u8]) -> Result<()>,
    ) -> Result<u8> {
        let chain = || format!("overflow chain at page {first}");
        // No put stores a longer value: a longer length is damage, and is
        // not allocated for.
        if len as usize > ferrite_core::MAX_VALUE_LEN {
            return Err(Error::corruption(
                chain(),
                format!("a value of {len} bytes is longer than any put stores"),
            ));
        }
        let per = page::usable(self.page_size);
        // A lock-free lookup may follow a chain being freed and reused: it
        // must end (and be discarded) rather than loop.
        let mut left = chain_pages(len, per);
        let mut bytes_left = len as usize;
        let cap = self.batch_cap();
        let mut asked: Option<Range<PageId>> = None;
        let mut used = 0;
        let mut id = first;
        let mut encoding = None;
        while left > 0 {
            if id < 2 {
                return Err(Error::corruption(chain(), "chain ends early"));
            }
            if !asked.as_ref().is_some_and(|a| a.contains(&id)) {
                let last = asked.as_ref().map(|a| (a.end, used));
                let n = next_batch(id, last, left).min(cap) as u64;
                let run = id..id.saturating_add(n);
                used = 0;
                let ids: Vec<PageId> = run.clone().filter(|&p| !self.pool.is_resident(p)).collect();
                asked = Some(run);
                if ids.len() > 1 {
                    self.pool.load(&ids);
                }
            }
            let b = self.pool.read(id)?;
            if page::kind(&b) != KIND_OVERFLOW {
                return Err(Error::corruption(
                    format!("page {id}"),
                    "expected an overflow page",
                ));
            }
            if encoding.is_none() {
                encoding = Some(b.get(ENCODING_AT).copied().unwrap_or(CHAIN_RAW));
            }
            let n = page::count(&b).min(per).min(bytes_left);
            let payload = b.get(page::HEADER..page::HEADER + n).unwrap_or_default();
            visit(id, payload)?;
            bytes_left -= payload.len();
            id = page::link(&b);
            used += 1;
            left -= 1;
        }
        if bytes_left > 0 {
            return Err(Error::corruption(chain(), "chain ends early"));
        }
        Ok(encoding.unwrap_or(CHAIN_RAW))
    }

    /// Loads the chains `chains` (first page, value length) into the pool
    /// in one batch, guessing each laid out on consecutive ids, ahead of
    /// reading them one by one: the long values of a leaf a scan passes
    /// then cost one round of reads, not one per value. Pages the guess
    /// gets wrong are read again by the walk.
    pub(crate) fn preload_overflow(&self, chains: &[(PageId, u32)]) {
        let per = page::usable(self.page_size);
        let cap = self.batch_cap();
        let mut ids = Vec::new();
        for &(first, len) in chains {
            let n = chain_pages(len.min(ferrite_core::MAX_VALUE_LEN as u32), per);
            let room = cap.saturating_sub(ids.len());
            ids.extend(
                (first..first.saturating_add(n.min(room) as u64))
                    .filter(|&p| p >= 2 && !self.pool.is_resident(p)),
            );
            if ids.len() >= cap {
                break;
            }
        }
        if ids.len() > 1 {
            self.pool.load(&ids);
        }
    }

    /// The value stored on the `len`-byte chain at `first`.
    pub(crate) fn read_overflow(&self, first: PageId, len: u32) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity((len as usize).min(ferrite_core::MAX_VALUE_LEN));
        let encoding = self.walk_overflow(first, len, &mut |_, payload| {
            out.extend_from_slice(payload);
            Ok(())
        })?;
        match encoding {
            CHAIN_RAW => Ok(out),
            CHAIN_LZ4 => decompress(&out)
                .map_err(|why| Error::corruption(format!("overflow chain at page {first}"), why)),
            other => Err(Error::corruption(
                format!("overflow chain at page {first}"),
                format!("unknown chain encoding {other}"),
            )),
        }
    }

    /// Writes a value's overflow chain straight to the page file, at ids
    /// the durable checkpoint does not use (clean free ids first, then
    /// fresh ones), so it neither fills the pool nor endangers the durable
    /// checkpoint; the next checkpoint's sync makes it durable before any
    /// meta page points to it. Consecutive ids go out as one write, and a
    /// chain in several pieces as one batch of writes.
    pub(crate) fn write_overflow(
        &self,
        shape: &mut Shape,
        value: &[u8],
    ) -> Result<StoredValue<'static>> {
        let ps = self.page_size;
        let per = page::usable(ps);
        let packed = self
            .compress_values
            .then(|| compress_if_shorter(value, per))
            .flatten();
        let (encoding, value) = match &packed {
            Some(p) => (CHAIN_LZ4, p.as_slice()),
            None => (CHAIN_RAW, value),
        };
        // An empty value goes out of line when its key alone is long; it
        // still gets a page, so the reference names a chain it owns.
        let mut chunks: Vec<&[u8]> = value.chunks(per).collect();
        if chunks.is_empty() {
            chunks.push(&[]);
        }
        let mut ids = take_ids(&mut shape.clean, chunks.len());
        // A reused id may still have a frame from its previous life (the
        // freed chain was read to learn its links). One a lookup holds
        // right now waits for a later value.
        ids.retain(|&id| {
            let gone = self.pool.forget(id);
            if !gone {
                return_id(&mut shape.clean, id);
            }
            gone
        });
        while ids.len() < chunks.len() {
            ids.push(self.grow(shape, 1));
        }
        let mut image = ferrite_io::AlignedBuf::zeroed(chunks.len() * ps);
        for (i, chunk) in chunks.iter().enumerate() {
            let b = &mut image[i * ps..(i + 1) * ps];
            page::init(b, ids[i], KIND_OVERFLOW, 0);
            page::set_link(b, ids.get(i + 1).copied().unwrap_or(0));
            b[6..8].copy_from_slice(&(chunk.len() as u16).to_le_bytes());
            b[page::HEADER..page::HEADER + chunk.len()].copy_from_slice(chunk);
            if i == 0 {
                b[ENCODING_AT] = encoding;
            }
            page::seal(b);
        }
        // One write per run of consecutive ids, all in one overlapped batch.
        let mut reqs = Vec::new();
        let mut start = 0;
        for end in 1..=ids.len() {
            if end == ids.len() || ids[end] != ids[end - 1] + 1 {
                reqs.push(WriteReq::new(
                    ids[start] * ps as u64,
                    &image[start * ps..end * ps],
                ));
                start = end;
            }
        }
        self.pool.device().write_batch(&reqs)?;
        // A lookup still on the freed chain these ids came from may have
        // loaded an old image between the forgetting above and the write:
        // drop it too, once that lookup lets go (it holds a page only for
        // as long as one read takes).
        for &id in &ids {
            while !self.pool.forget(id) {
                std::thread::yield_now();
            }
        }
        Ok(StoredValue::Overflow {
            first: ids[0],
            len: value.len() as u32,
            run: ids.windows(2).all(|w| w[1] == w[0] + 1),
        })
    }

    /// Returns the chain of a `len`-byte value at `first` to the free list;
    /// its ids are reused only for tree pages until the next checkpoint. A
    /// chain on consecutive ids (`run`) needs no reads; another is walked
    /// to learn its ids, and one that cannot be walked frees nothing: a
    /// damaged link might name a live page.
    pub(crate) fn free_overflow(
        &self,
        shape: &mut Shape,
        first: PageId,
        len: u32,
        run: bool,
    ) -> Result<()> {
        // Freed ids may be written at once: a lookup reading the chain
        // must learn that it changed.
        let _change = self.version.change();
        let mut ids = Vec::new();
        if run {
            let n = chain_pages(len, page::usable(self.page_size)) as u64;
            if first < 2 || first.saturating_add(n) > shape.page_count {
                return Err(Error::corruption(
                    format!("overflow chain at page {first}"),
                    format!("a run of {n} pages past the {}-page file", shape.page_count),
                ));
            }
            ids.extend(first..first + n);
        } else {
            self.walk_overflow(first, len, &mut |id, _| {
                ids.push(id);
                Ok(())
            })?;
        }
        for id in ids {
            // Nothing reads a freed page again: its frame is free at once
            // (unless a lookup holds it now).
            self.pool.forget(id);
            shape.free.push(id);
        }
        Ok(())
    }
}

/// `value` as a compressed chain body (`length: u32`, then an lz4
/// block), if that takes fewer pages of `per` payload bytes.
fn compress_if_shorter(value: &[u8], per: usize) -> Option<Vec<u8>> {
    if value.len() <= per {
        return None;
    }
    let mut body = vec![0u8; 4 + lz4_flex::block::get_maximum_output_size(value.len())];
    body[..4].copy_from_slice(&(value.len() as u32).to_le_bytes());
    let n = lz4_flex::block::compress_into(value, &mut body[4..]).ok()?;
    body.truncate(4 + n);
    (chain_pages(body.len() as u32, per) < chain_pages(value.len() as u32, per)).then_some(body)
}

/// The value a compressed chain body holds, or why not: never more than
/// the longest value a put stores, whatever the length field says.
fn decompress(body: &[u8]) -> std::result::Result<Vec<u8>, String> {
    let (len, block) = body
        .split_first_chunk::<4>()
        .ok_or("compressed chain shorter than its length")?;
    let len = u32::from_le_bytes(*len) as usize;
    if len > ferrite_core::MAX_VALUE_LEN {
        return Err(format!("compressed chain claims a {len}-byte value"));
    }
    let mut out = vec![0u8; len];
    match lz4_flex::block::decompress_into(block, &mut out) {
        Ok(n) if n == len => Ok(out),
        Ok(n) => Err(format!("compressed chain holds {n} bytes, not {len}")),
        Err(e) => Err(format!("compressed chain does not decompress: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering::Relaxed;
    use std::sync::Arc;

    use ferrite_io::{AlignedBuf, BlockDevice, MemDevice};

    use crate::buffer_pool::{BufferPool, FRAME_OVERHEAD};
    use crate::probe_device::ProbeDevice;

    const PS: usize = 4096;

    /// A page file of `pages` pages (not overflow pages) and a tree over a
    /// fresh pool of 64 frames on it.
    fn setup(pages: u64) -> (Arc<ProbeDevice>, Tree, Shape) {
        let dev = Arc::new(ProbeDevice::new());
        let mut b = AlignedBuf::zeroed(PS);
        for id in 0..pages {
            page::init(&mut b, id, page::KIND_LEAF, 0);
            page::seal(&mut b);
            dev.write_at(&b, id * PS as u64).unwrap();
        }
        let tree = cold_tree(&dev);
        let shape = Shape {
            root: 2,
            height: 0,
            page_count: pages.max(2),
            free: Vec::new(),
            clean: Vec::new(),
            spare: Vec::new(),
            level_runs: Vec::new(),
        };
        (dev, tree, shape)
    }

    /// A tree with an empty pool over `dev`.
    fn cold_tree(dev: &Arc<ProbeDevice>) -> Tree {
        let pool = BufferPool::new(
            dev.clone(),
            Arc::new(MemDevice::new()),
            PS,
            64 * (PS + FRAME_OVERHEAD) as u64,
        );
        Tree::new(pool, PS, None)
    }

    fn value(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect()
    }

    /// The ids of the chain at `first`, read from the device.
    fn chain_ids(dev: &ProbeDevice, first: PageId) -> Vec<PageId> {
        let mut ids = Vec::new();
        let mut b = AlignedBuf::zeroed(PS);
        let mut id = first;
        while id != 0 {
            ids.push(id);
            dev.inner.read_at(&mut b, id * PS as u64).unwrap();
            id = page::link(&b);
        }
        ids
    }

    fn rounds(dev: &ProbeDevice) -> u64 {
        dev.read_rounds.load(Relaxed)
    }

    /// Writes `v`'s chain: its first page and whether it is a run.
    fn write(tree: &Tree, shape: &mut Shape, v: &[u8]) -> (PageId, bool) {
        match tree.write_overflow(shape, v).unwrap() {
            StoredValue::Overflow { first, len, run } => {
                assert_eq!(len as usize, v.len());
                (first, run)
            }
            StoredValue::Inline(_) => panic!("an overflow value"),
        }
    }

    #[test]
    fn a_contiguous_chain_is_read_in_one_round() {
        let (dev, tree, mut shape) = setup(10);
        let v = value(40_000, 1);
        let (first, run) = write(&tree, &mut shape, &v);
        assert_eq!(chain_ids(&dev, first), (10..20).collect::<Vec<_>>());
        assert!(run);
        let before = rounds(&dev);
        assert_eq!(tree.read_overflow(first, v.len() as u32).unwrap(), v);
        assert_eq!(rounds(&dev) - before, 1, "ten pages, one batch");
        // Now resident: no reads at all.
        let before = rounds(&dev);
        assert_eq!(tree.read_overflow(first, v.len() as u32).unwrap(), v);
        assert_eq!(rounds(&dev), before);
    }

    #[test]
    fn a_fragmented_chain_reads_back_whole_in_a_round_per_piece_at_most() {
        let (dev, tree, mut shape) = setup(120);
        // Runs of 1, 1, 2, 3 and 4 ids, scattered.
        shape.clean = vec![110, 100, 90, 91, 80, 81, 82, 70, 71, 72, 73];
        shape.clean.sort_unstable_by(|a, b| b.cmp(a));
        let v = value(9 * page::usable(PS) + 5, 2);
        let (first, run) = write(&tree, &mut shape, &v);
        assert!(!run);
        // Longest runs first, the lower of equal ones first.
        let ids = chain_ids(&dev, first);
        assert_eq!(ids, vec![70, 71, 72, 73, 80, 81, 82, 90, 91, 100]);
        assert_eq!(shape.clean, vec![110]);
        let tree = cold_tree(&dev);
        let before = rounds(&dev);
        assert_eq!(tree.read_overflow(first, v.len() as u32).unwrap(), v);
        let pieces = 4;
        assert!(rounds(&dev) - before <= pieces, "{}", rounds(&dev) - before);
        // Freeing it walks it, in as many rounds again at most.
        let before = rounds(&dev);
        let tree = cold_tree(&dev);
        tree.free_overflow(&mut shape, first, v.len() as u32, false)
            .unwrap();
        assert!(rounds(&dev) - before <= pieces);
        shape.free.sort_unstable();
        assert_eq!(shape.free, ids);
    }

    #[test]
    fn a_preload_reads_several_chains_in_one_round() {
        let (dev, tree, mut shape) = setup(4);
        let values: Vec<Vec<u8>> = (0..5).map(|i| value(3000 + 3000 * i, i as u8)).collect();
        let chains: Vec<(PageId, u32)> = values
            .iter()
            .map(|v| (write(&tree, &mut shape, v).0, v.len() as u32))
            .collect();
        let tree = cold_tree(&dev);
        // 13 pages: within one batch of a 64-frame pool.
        let before = rounds(&dev);
        tree.preload_overflow(&chains);
        for (&(first, len), v) in chains.iter().zip(&values) {
            assert_eq!(&tree.read_overflow(first, len).unwrap(), v);
        }
        assert_eq!(rounds(&dev) - before, 1);
    }

    #[test]
    fn a_freed_run_gives_back_exactly_its_pages_without_reads() {
        let (dev, tree, mut shape) = setup(4);
        let short = value(10, 3);
        let long = value(5 * page::usable(PS), 4);
        let (a, _) = write(&tree, &mut shape, &short);
        let (b, run) = write(&tree, &mut shape, &long);
        let (e, _) = write(&tree, &mut shape, &[]);
        assert!(run);
        let tree = cold_tree(&dev);
        let before = rounds(&dev);
        tree.free_overflow(&mut shape, b, long.len() as u32, true)
            .unwrap();
        assert_eq!(rounds(&dev), before);
        assert_eq!(shape.free, chain_ids(&dev, b));
        assert_eq!(shape.free.len(), 5);
        // An empty value still owns one page.
        tree.free_overflow(&mut shape, e, 0, true).unwrap();
        assert_eq!(shape.free.len(), 6);
        assert_eq!(tree.read_overflow(a, 10).unwrap(), short);
        // A run past the end of the file is damage, and frees nothing.
        let mut s2 = shape.clone();
        let past = shape.page_count - 1;
        assert!(tree.free_overflow(&mut s2, past, 9000, true).is_err());
        assert_eq!(s2.free, shape.free);
    }

    #[test]
    fn damaged_chains_are_typed_errors() {
        let (dev, tree, mut shape) = setup(4);
        let v = value(5 * page::usable(PS), 5);
        let (first, _) = write(&tree, &mut shape, &v);
        let ids = chain_ids(&dev, first);
        let len = v.len() as u32;
        let is_corruption = |r: Result<Vec<u8>>| match r {
            Err(Error::Corruption { .. }) => {}
            other => panic!("expected corruption, got {:?}", other.map(|v| v.len())),
        };
        // A length no put stores.
        is_corruption(tree.read_overflow(first, u32::MAX));
        // A chain shorter than its length: the third page ends it.
        let mut b = AlignedBuf::zeroed(PS);
        dev.inner.read_at(&mut b, ids[2] * PS as u64).unwrap();
        page::set_link(&mut b, 0);
        page::seal(&mut b);
        dev.inner.write_at(&b, ids[2] * PS as u64).unwrap();
        is_corruption(cold_tree(&dev).read_overflow(first, len));
        // A link into a tree page.
        page::set_link(&mut b, 1);
        page::seal(&mut b);
        dev.inner.write_at(&b, ids[2] * PS as u64).unwrap();
        is_corruption(cold_tree(&dev).read_overflow(first, len));
        // A flipped byte.
        page::set_link(&mut b, ids[3]);
        page::seal(&mut b);
        b[100] ^= 0xff;
        dev.inner.write_at(&b, ids[2] * PS as u64).unwrap();
        is_corruption(cold_tree(&dev).read_overflow(first, len));
        // Freeing a damaged chain frees none of its pages.
        let mut shape2 = shape.clone();
        assert!(cold_tree(&dev)
            .free_overflow(&mut shape2, first, len, false)
            .is_err());
        assert!(shape2.free.is_empty());
        // Repaired, it reads whole again.
        b[100] ^= 0xff;
        dev.inner.write_at(&b, ids[2] * PS as u64).unwrap();
        assert_eq!(cold_tree(&dev).read_overflow(first, len).unwrap(), v);
    }

    fn desc(mut ids: Vec<PageId>) -> Vec<PageId> {
        ids.sort_unstable_by(|a, b| b.cmp(a));
        ids
    }

    #[test]
    fn the_lowest_run_that_holds_the_chain_is_taken_whole() {
        let mut clean = desc(vec![3, 5, 6, 9, 10, 11, 12, 20, 21, 22, 23, 24]);
        assert_eq!(take_ids(&mut clean, 4), vec![9, 10, 11, 12]);
        assert_eq!(clean, desc(vec![3, 5, 6, 20, 21, 22, 23, 24]));
        assert_eq!(take_ids(&mut clean, 2), vec![5, 6]);
        assert_eq!(take_ids(&mut clean, 1), vec![3]);
        assert_eq!(clean, desc(vec![20, 21, 22, 23, 24]));
    }

    #[test]
    fn without_a_long_enough_run_the_longest_runs_go_first() {
        let mut clean = desc(vec![2, 4, 5, 7, 8, 9, 30, 31]);
        // Runs: [2], [4,5], [7,8,9], [30,31]: 7–9, then 4–5 (lower than
        // 30–31), then one of 30–31.
        assert_eq!(take_ids(&mut clean, 6), vec![4, 5, 7, 8, 9, 30]);
        assert_eq!(clean, desc(vec![2, 31]));
        // More than the list holds: all of it.
        assert_eq!(take_ids(&mut clean, 5), vec![2, 31]);
        assert!(clean.is_empty());
        assert!(take_ids(&mut clean, 3).is_empty());
    }

    #[test]
    fn only_the_window_of_lowest_ids_is_searched() {
        let n = RUN_WINDOW as u64;
        // The lowest RUN_WINDOW ids are every other id; a long run sits
        // above them, out of the window.
        let mut ids: Vec<PageId> = (0..n).map(|i| 2 + 2 * i).collect();
        ids.extend(10 * n..10 * n + 8);
        let mut clean = desc(ids);
        let before = clean.len();
        let got = take_ids(&mut clean, 3);
        assert_eq!(got, vec![2, 4, 6], "single runs, lowest first");
        assert_eq!(clean.len(), before - 3);
        assert!(clean.windows(2).all(|w| w[0] > w[1]), "still sorted");
    }

    #[test]
    fn an_id_given_back_keeps_the_list_sorted() {
        let mut clean = desc(vec![2, 5, 9]);
        return_id(&mut clean, 7);
        return_id(&mut clean, 1);
        return_id(&mut clean, 10);
        assert_eq!(clean, vec![10, 9, 7, 5, 2, 1]);
    }

    #[test]
    fn batches_follow_a_contiguous_chain_and_shrink_on_fragments() {
        // The first batch asks for the whole chain.
        assert_eq!(next_batch(100, None, 8), 8);
        // Carrying on where the last batch ended: the rest.
        assert_eq!(next_batch(108, Some((108, 8)), 30), 30);
        // A jump after two useful pages: four.
        assert_eq!(next_batch(500, Some((110, 2)), 30), 4);
        // Never more than is left, never more than a batch, at least one.
        assert_eq!(next_batch(500, Some((110, 20)), 3), 3);
        assert_eq!(next_batch(7, None, 10_000), MAX_BATCH);
        assert_eq!(next_batch(7, Some((9, 0)), 5), 2);
    }

    #[test]
    fn a_value_that_compresses_takes_a_shorter_chain_and_reads_back() {
        let (dev, tree, mut shape) = setup(10);
        let tree = tree.with_value_compression(true);
        // Text-like: a phrase repeated with a counter, about 4:1 in lz4.
        let v: Vec<u8> = (0..3000)
            .flat_map(|i| format!("Package: lib{i}\nVersion: 1.{i}\n").into_bytes())
            .collect();
        let StoredValue::Overflow { first, len, run } =
            tree.write_overflow(&mut shape, &v).unwrap()
        else {
            panic!("an overflow value");
        };
        let raw_pages = chain_pages(v.len() as u32, page::usable(PS));
        let pages = chain_ids(&dev, first).len();
        assert!(pages * 2 < raw_pages, "{pages} of {raw_pages} pages");
        assert_eq!(chain_pages(len, page::usable(PS)), pages);
        let tree = cold_tree(&dev);
        assert_eq!(tree.read_overflow(first, len).unwrap(), v);
        // Freeing needs only the chain's own length.
        tree.free_overflow(&mut shape, first, len, run).unwrap();
        assert_eq!(shape.free.len(), pages);

        // Random bytes do not compress: stored as they are.
        let mut x = 7u64;
        let noise: Vec<u8> = (0..20_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let tree = tree.with_value_compression(true);
        let StoredValue::Overflow { first, len, .. } =
            tree.write_overflow(&mut shape, &noise).unwrap()
        else {
            panic!("an overflow value");
        };
        assert_eq!(len as usize, noise.len());
        let mut b = AlignedBuf::zeroed(PS);
        dev.inner.read_at(&mut b, first * PS as u64).unwrap();
        assert_eq!(b[ENCODING_AT], CHAIN_RAW);
        assert_eq!(tree.read_overflow(first, len).unwrap(), noise);
    }

    #[test]
    fn a_damaged_compressed_body_is_an_error_not_a_value() {
        let v: Vec<u8> = b"abcdefgh".repeat(2000);
        let body = compress_if_shorter(&v, 4064).unwrap();
        assert_eq!(decompress(&body).unwrap(), v);
        for cut in [0, 3, 4, body.len() / 2, body.len() - 1] {
            assert!(decompress(&body[..cut]).is_err(), "cut at {cut}");
        }
        let mut long = body.clone();
        long[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decompress(&long).is_err(), "a length past any value");
        let mut short = body;
        short[..4].copy_from_slice(&100u32.to_le_bytes());
        assert!(decompress(&short).is_err(), "a length that disagrees");
    }

    #[test]
    fn an_empty_value_has_one_page() {
        assert_eq!(chain_pages(0, 4064), 1);
        assert_eq!(chain_pages(4064, 4064), 1);
        assert_eq!(chain_pages(4065, 4064), 2);
    }
}
