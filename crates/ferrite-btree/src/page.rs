//! The slotted page: layout, search, insertion, deletion and splitting of
//! cells, with no I/O (spec: `docs/format/btree-page.md`).
//!
//! A page is a header, a slot array growing up from the header, and cells
//! growing down from the page end. Slots hold cell offsets in key order.
//! Leaf cells hold a key and a value (inline, or a pointer to an overflow
//! chain); inner cells hold a separator key and the child for keys at or
//! above it, with the child for keys below the first separator in the
//! header's `link`. Every leaf and inner page also holds its *fence keys*:
//! the bounds `[low, high)` of the keys its subtree may hold (absent bound:
//! unbounded), equal to the separators its parent routes by, in one fence
//! cell in the cell area (not in the slot array). Invariants: slots are
//! sorted by key with no duplicates; every slot and the fence cell point
//! inside `[cell_start, page_size)`; `HEADER + 2n ≤ cell_start`; `garbage`
//! counts dead bytes in the cell area, so the live cells, the fence cell
//! and the garbage together fit in it; a leaf's keys lie in `[low, high)`,
//! an inner page's separators in `(low, high)`.
//! [`check`] verifies all of this on every page read from disk, so the
//! accessors below can trust the layout; they still never index out of
//! bounds on a page that was not checked.

use ferrite_core::{Error, Result};

pub const HEADER: usize = 32;
pub const KIND_LEAF: u8 = 1;
pub const KIND_INNER: u8 = 2;
pub const KIND_OVERFLOW: u8 = 3;
/// A page of the free-list chain (see `free_space`): the overflow layout.
pub const KIND_FREELIST: u8 = 4;
/// Marks an out-of-line value in a leaf cell's length field.
const OVERFLOW_FLAG: u32 = 0x8000_0000;
/// Bytes of an out-of-line value reference: first page (u64), length (u32).
pub const OVERFLOW_REF: usize = 12;
/// A fence length meaning "unbounded" (keys are far shorter).
const UNBOUNDED: u16 = u16::MAX;
/// Header offset of the fence cell's offset.
const FENCE_AT: usize = 12;

/// A page id; 0 and 1 are the meta pages, so 0 also means "none".
pub type PageId = u64;

/// Bytes a page file may span: every page's offset is below this.
const MAX_FILE_BYTES: u64 = 1 << 62;

/// The byte offset of page `id` in a file of `page_size`-byte pages, or
/// `None` for an id no page file reaches (read from a damaged page: it
/// must become an error, not an overflowing offset).
pub fn offset(id: PageId, page_size: usize) -> Option<u64> {
    id.checked_mul(page_size as u64)
        .filter(|&off| off < MAX_FILE_BYTES)
}

fn rd16(b: &[u8], at: usize) -> u16 {
    b.get(at..at + 2)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u16::from_le_bytes)
}
fn rd32(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}
fn rd64(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}
fn wr(b: &mut [u8], at: usize, v: &[u8]) {
    if let Some(d) = b.get_mut(at..at + v.len()) {
        d.copy_from_slice(v);
    }
}

/// A leaf value as stored in a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoredValue<'a> {
    Inline(&'a [u8]),
    Overflow { first: PageId, len: u32 },
}

/// Formats `b` as an empty page of `kind` at `level`.
pub fn init(b: &mut [u8], id: PageId, kind: u8, level: u8) {
    b.fill(0);
    let n = b.len() as u16;
    if let Some(x) = b.get_mut(4) {
        *x = kind;
    }
    if let Some(x) = b.get_mut(5) {
        *x = level;
    }
    wr(b, 8, &n.to_le_bytes());
    wr(b, 24, &id.to_le_bytes());
    if kind == KIND_LEAF || kind == KIND_INNER {
        place_fences(b, None, None);
    }
}

pub fn kind(b: &[u8]) -> u8 {
    b.get(4).copied().unwrap_or(0)
}
pub fn level(b: &[u8]) -> u8 {
    b.get(5).copied().unwrap_or(0)
}
pub fn count(b: &[u8]) -> usize {
    rd16(b, 6) as usize
}
fn cell_start(b: &[u8]) -> usize {
    let v = rd16(b, 8) as usize;
    if v == 0 {
        b.len()
    } else {
        v
    }
}
fn garbage(b: &[u8]) -> usize {
    rd16(b, 10) as usize
}
/// Leaf: right sibling. Inner: child for keys below the first separator.
pub fn link(b: &[u8]) -> PageId {
    rd64(b, 16)
}
pub fn set_link(b: &mut [u8], id: PageId) {
    wr(b, 16, &id.to_le_bytes());
}
pub fn page_id(b: &[u8]) -> PageId {
    rd64(b, 24)
}
fn set_count(b: &mut [u8], n: usize) {
    wr(b, 6, &(n as u16).to_le_bytes());
}
fn set_cell_start(b: &mut [u8], v: usize) {
    // A full page_size of 65536 does not fit u16; pages are at most 16 KiB.
    wr(b, 8, &(v as u16).to_le_bytes());
}
fn set_garbage(b: &mut [u8], v: usize) {
    wr(b, 10, &(v as u16).to_le_bytes());
}
fn slot(b: &[u8], i: usize) -> usize {
    rd16(b, HEADER + 2 * i) as usize
}
fn fence_offset(b: &[u8]) -> usize {
    rd16(b, FENCE_AT) as usize
}

/// Bytes of a fence cell for these bounds.
pub fn fence_cell_size(low: Option<&[u8]>, high: Option<&[u8]>) -> usize {
    4 + low.map_or(0, <[u8]>::len) + high.map_or(0, <[u8]>::len)
}

fn encode_fences(low: Option<&[u8]>, high: Option<&[u8]>) -> Vec<u8> {
    let mut c = Vec::with_capacity(fence_cell_size(low, high));
    for f in [low, high] {
        c.extend_from_slice(&f.map_or(UNBOUNDED, |k| k.len() as u16).to_le_bytes());
    }
    for k in [low, high].into_iter().flatten() {
        c.extend_from_slice(k);
    }
    c
}

/// The fence cell's bytes, if its header fields lie inside the page.
fn fence_cell(b: &[u8]) -> Option<&[u8]> {
    let off = fence_offset(b);
    if off == 0 {
        return None;
    }
    let len = |at: usize| match rd16(b, at) {
        UNBOUNDED => 0,
        n => n as usize,
    };
    let total = 4 + len(off) + len(off + 2);
    b.get(off..off + total)
}

/// The page's fence keys `(low, high)`; `None` is an unbounded side.
pub fn fences(b: &[u8]) -> (Option<&[u8]>, Option<&[u8]>) {
    let Some(c) = fence_cell(b) else {
        return (None, None);
    };
    let (l, h) = (rd16(c, 0), rd16(c, 2));
    let lo = (l != UNBOUNDED).then(|| c.get(4..4 + l as usize).unwrap_or_default());
    let skip = if l == UNBOUNDED { 0 } else { l as usize };
    let hi = (h != UNBOUNDED).then(|| c.get(4 + skip..4 + skip + h as usize).unwrap_or_default());
    (lo, hi)
}

/// Owned copies of the page's fence keys.
pub fn fences_owned(b: &[u8]) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
    let (l, h) = fences(b);
    (l.map(<[u8]>::to_vec), h.map(<[u8]>::to_vec))
}

/// Replaces the page's fence keys if the new fence cell fits; returns
/// false (and changes nothing) if it does not.
pub fn set_fences(b: &mut [u8], low: Option<&[u8]>, high: Option<&[u8]>) -> bool {
    let old = fence_cell(b).map_or(0, <[u8]>::len);
    if free_space(b) + old < fence_cell_size(low, high) {
        return false;
    }
    if old > 0 {
        let off = fence_offset(b);
        wr(b, FENCE_AT, &0u16.to_le_bytes());
        if off == cell_start(b) {
            set_cell_start(b, off + old);
        } else {
            set_garbage(b, garbage(b) + old);
        }
    }
    place_fences(b, low, high);
    true
}

/// Writes a fence cell below the cell area. The caller checked space and
/// released any previous fence cell.
fn place_fences(b: &mut [u8], low: Option<&[u8]>, high: Option<&[u8]>) {
    let cell = encode_fences(low, high);
    if cell_start(b) < HEADER + 2 * count(b) + cell.len() {
        compact(b);
    }
    let at = cell_start(b) - cell.len();
    wr(b, at, &cell);
    wr(b, FENCE_AT, &(at as u16).to_le_bytes());
    set_cell_start(b, at);
}

/// Seals the page: writes its checksum.
pub fn seal(b: &mut [u8]) {
    let crc = crc32c::crc32c(b.get(4..).unwrap_or_default());
    wr(b, 0, &crc.to_le_bytes());
}

/// Bytes a cell takes in the cell area.
fn cell_len(b: &[u8], off: usize) -> usize {
    let klen = rd16(b, off) as usize;
    match kind(b) {
        KIND_INNER => 2 + 8 + klen,
        _ => {
            let v = rd32(b, off + 2);
            let vlen = if v & OVERFLOW_FLAG != 0 {
                OVERFLOW_REF
            } else {
                v as usize
            };
            2 + 4 + klen + vlen
        }
    }
}

/// The key of slot `i`.
pub fn key(b: &[u8], i: usize) -> &[u8] {
    let off = slot(b, i);
    let klen = rd16(b, off) as usize;
    let kstart = if kind(b) == KIND_INNER {
        off + 10
    } else {
        off + 6
    };
    b.get(kstart..kstart + klen).unwrap_or_default()
}

/// The value of leaf slot `i`.
pub fn value(b: &[u8], i: usize) -> StoredValue<'_> {
    let off = slot(b, i);
    let klen = rd16(b, off) as usize;
    let v = rd32(b, off + 2);
    let vstart = off + 6 + klen;
    if v & OVERFLOW_FLAG != 0 {
        StoredValue::Overflow {
            first: rd64(b, vstart),
            len: rd32(b, vstart + 8),
        }
    } else {
        StoredValue::Inline(b.get(vstart..vstart + v as usize).unwrap_or_default())
    }
}

/// The child of inner slot `i`.
pub fn child(b: &[u8], i: usize) -> PageId {
    rd64(b, slot(b, i) + 2)
}

/// Binary search: `Ok(i)` if slot `i` holds `k`, else `Err(i)` where it would go.
pub fn search(b: &[u8], k: &[u8]) -> std::result::Result<usize, usize> {
    let kstart = if kind(b) == KIND_INNER { 10 } else { 6 };
    let key_at = |i: usize| {
        let off = slot(b, i);
        let klen = rd16(b, off) as usize;
        b.get(off + kstart..off + kstart + klen).unwrap_or_default()
    };
    let (mut lo, mut hi) = (0usize, count(b));
    while lo < hi {
        let mid = (lo + hi) / 2;
        match cmp_keys(key_at(mid), k) {
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => hi = mid,
            std::cmp::Ordering::Equal => return Ok(mid),
        }
    }
    Err(lo)
}

/// Byte-string order, comparing the first eight bytes as one integer
/// first: most keys in a search differ there, and this skips a call to
/// `memcmp` per probe.
#[inline]
fn cmp_keys(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    if let (Some(x), Some(y)) = (a.first_chunk::<8>(), b.first_chunk::<8>()) {
        let (x, y) = (u64::from_be_bytes(*x), u64::from_be_bytes(*y));
        if x != y {
            return x.cmp(&y);
        }
    }
    a.cmp(b)
}

/// The child of an inner page to follow for `k`.
pub fn child_for(b: &[u8], k: &[u8]) -> PageId {
    match search(b, k) {
        Ok(i) => child(b, i),
        Err(0) => link(b),
        Err(i) => child(b, i - 1),
    }
}

/// Points the child that [`child_for`] follows for `k` at `id`.
pub fn set_child_for(b: &mut [u8], k: &[u8], id: PageId) {
    match search(b, k) {
        Ok(i) => {
            let at = slot(b, i) + 2;
            wr(b, at, &id.to_le_bytes());
        }
        Err(0) => set_link(b, id),
        Err(i) => {
            let at = slot(b, i - 1) + 2;
            wr(b, at, &id.to_le_bytes());
        }
    }
}

/// Renumbers the page (its header's id), for a page moved to `id`.
pub fn set_page_id(b: &mut [u8], id: PageId) {
    wr(b, 24, &id.to_le_bytes());
}

/// Free bytes if the page were compacted.
pub fn free_space(b: &[u8]) -> usize {
    (cell_start(b) + garbage(b)).saturating_sub(HEADER + 2 * count(b))
}

/// Bytes slot `i` and its cell take (what removing it frees).
pub fn slot_cell_size(b: &[u8], i: usize) -> usize {
    if i >= count(b) {
        return 0;
    }
    2 + cell_len(b, slot(b, i))
}

/// Bytes a new leaf cell needs, slot included.
pub fn leaf_cell_size(klen: usize, v: &StoredValue<'_>) -> usize {
    let vlen = match v {
        StoredValue::Inline(x) => x.len(),
        StoredValue::Overflow { .. } => OVERFLOW_REF,
    };
    2 + 2 + 4 + klen + vlen
}

/// Bytes a new inner cell needs, slot included.
pub fn inner_cell_size(klen: usize) -> usize {
    2 + 2 + 8 + klen
}

/// Rewrites the cell area without dead bytes.
fn compact(b: &mut [u8]) {
    let n = count(b);
    let cells: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            let off = slot(b, i);
            b.get(off..off + cell_len(b, off))
                .unwrap_or_default()
                .to_vec()
        })
        .collect();
    let fence = fence_cell(b).map(<[u8]>::to_vec);
    let mut at = b.len();
    if let Some(f) = fence {
        at -= f.len();
        wr(b, at, &f);
        wr(b, FENCE_AT, &(at as u16).to_le_bytes());
    }
    for (i, c) in cells.iter().enumerate() {
        at -= c.len();
        wr(b, at, c);
        wr(b, HEADER + 2 * i, &(at as u16).to_le_bytes());
    }
    set_cell_start(b, at);
    set_garbage(b, 0);
}

/// Places raw cell bytes at slot position `i`. The caller checked space.
fn place(b: &mut [u8], i: usize, cell: &[u8]) {
    let n = count(b);
    if cell_start(b) < HEADER + 2 * (n + 1) + cell.len() {
        compact(b);
    }
    let at = cell_start(b) - cell.len();
    wr(b, at, cell);
    // Shift slots i.. right by one.
    let from = HEADER + 2 * i;
    let to = HEADER + 2 * n;
    b.copy_within(from..to, from + 2);
    wr(b, from, &(at as u16).to_le_bytes());
    set_cell_start(b, at);
    set_count(b, n + 1);
}

pub fn encode_leaf_cell(k: &[u8], v: &StoredValue<'_>) -> Vec<u8> {
    let mut c = Vec::with_capacity(6 + k.len() + 12);
    c.extend_from_slice(&(k.len() as u16).to_le_bytes());
    match v {
        StoredValue::Inline(x) => {
            c.extend_from_slice(&(x.len() as u32).to_le_bytes());
            c.extend_from_slice(k);
            c.extend_from_slice(x);
        }
        StoredValue::Overflow { first, len } => {
            c.extend_from_slice(&OVERFLOW_FLAG.to_le_bytes());
            c.extend_from_slice(k);
            c.extend_from_slice(&first.to_le_bytes());
            c.extend_from_slice(&len.to_le_bytes());
        }
    }
    c
}

pub fn encode_inner_cell(k: &[u8], child: PageId) -> Vec<u8> {
    let mut c = Vec::with_capacity(10 + k.len());
    c.extend_from_slice(&(k.len() as u16).to_le_bytes());
    c.extend_from_slice(&child.to_le_bytes());
    c.extend_from_slice(k);
    c
}

/// Inserts a leaf cell at slot `i` if it fits; returns false if it does not.
pub fn leaf_insert(b: &mut [u8], i: usize, k: &[u8], v: &StoredValue<'_>) -> bool {
    if free_space(b) < leaf_cell_size(k.len(), v) {
        return false;
    }
    place(b, i, &encode_leaf_cell(k, v));
    true
}

/// Inserts an inner cell at slot `i` if it fits.
pub fn inner_insert(b: &mut [u8], i: usize, k: &[u8], child: PageId) -> bool {
    if free_space(b) < inner_cell_size(k.len()) {
        return false;
    }
    place(b, i, &encode_inner_cell(k, child));
    true
}

/// Removes slot `i`.
pub fn remove(b: &mut [u8], i: usize) {
    let n = count(b);
    if i >= n {
        return;
    }
    let off = slot(b, i);
    let len = cell_len(b, off);
    let from = HEADER + 2 * (i + 1);
    let to = HEADER + 2 * n;
    b.copy_within(from..to, from - 2);
    set_count(b, n - 1);
    if off == cell_start(b) {
        set_cell_start(b, off + len);
    } else {
        set_garbage(b, garbage(b) + len);
    }
}

/// Every cell of the page as raw bytes, in key order.
pub fn raw_cells(b: &[u8]) -> Vec<Vec<u8>> {
    (0..count(b)).map(|i| raw_cell(b, i)).collect()
}

/// The raw bytes of slot `i`'s cell.
pub fn raw_cell(b: &[u8], i: usize) -> Vec<u8> {
    if i >= count(b) {
        return Vec::new();
    }
    let off = slot(b, i);
    b.get(off..off + cell_len(b, off))
        .unwrap_or_default()
        .to_vec()
}

/// Inserts raw cell bytes (of this page's kind) at slot `i` if they fit.
pub fn insert_raw(b: &mut [u8], i: usize, cell: &[u8]) -> bool {
    if free_space(b) < raw_cell_size(cell) {
        return false;
    }
    place(b, i, cell);
    true
}

/// Bytes a raw cell needs in a page, slot included.
pub fn raw_cell_size(cell: &[u8]) -> usize {
    cell.len() + 2
}

/// The key of a raw cell of a page of `kind`.
pub fn raw_cell_key(cell: &[u8], kind: u8) -> &[u8] {
    let klen = rd16(cell, 0) as usize;
    let start = if kind == KIND_INNER { 10 } else { 6 };
    cell.get(start..start + klen).unwrap_or_default()
}

/// The child of a raw inner cell.
pub fn raw_cell_child(cell: &[u8]) -> PageId {
    rd64(cell, 2)
}

/// Replaces the page's cells with `cells` and its fences with `(low,
/// high)` (which must fit together), keeping the rest of the header.
pub fn rebuild(b: &mut [u8], cells: &[Vec<u8>], low: Option<&[u8]>, high: Option<&[u8]>) {
    set_count(b, 0);
    set_cell_start(b, b.len());
    set_garbage(b, 0);
    wr(b, FENCE_AT, &0u16.to_le_bytes());
    place_fences(b, low, high);
    for (i, c) in cells.iter().enumerate() {
        place(b, i, c);
    }
}

/// Usable bytes of a page of `page_size`.
pub fn usable(page_size: usize) -> usize {
    page_size - HEADER
}

/// Checks a page read from disk: checksum, id, kind and layout.
pub fn check(b: &[u8], expect_id: PageId, location: &dyn Fn() -> String) -> Result<()> {
    let bad = |why: String| Err(Error::corruption(location(), why));
    let crc = rd32(b, 0);
    if crc != crc32c::crc32c(b.get(4..).unwrap_or_default()) {
        return bad("page checksum mismatch".into());
    }
    if page_id(b) != expect_id {
        return bad(format!(
            "page claims id {} (misdirected write?)",
            page_id(b)
        ));
    }
    match (kind(b), level(b)) {
        // Leaves are the bottom level, inner pages above it.
        (KIND_LEAF, 0) => {}
        (KIND_INNER, l) if l > 0 => {}
        (k, l) if k == KIND_LEAF || k == KIND_INNER => {
            let name = if k == KIND_LEAF { "a leaf" } else { "an inner" };
            return bad(format!("{name} page at level {l}"));
        }
        (KIND_OVERFLOW | KIND_FREELIST, _) => return Ok(()),
        (k, _) => return bad(format!("unknown page kind {k}")),
    }
    let n = count(b);
    let cs = cell_start(b);
    if HEADER + 2 * n > cs || cs > b.len() {
        return bad(format!("{n} slots overlap the cell area at {cs}"));
    }
    for i in 0..n {
        let off = slot(b, i);
        if off < cs || off + 6 > b.len() {
            return bad(format!("slot {i} points outside the cell area"));
        }
        if off + cell_len(b, off) > b.len() {
            return bad(format!("cell {i} runs past the page end"));
        }
        if i > 0 && key(b, i - 1) >= key(b, i) {
            return bad(format!("keys out of order at slot {i}"));
        }
    }
    let off = fence_offset(b);
    let Some(fence) = fence_cell(b).filter(|_| off >= cs) else {
        return bad("fence cell missing or outside the cell area".into());
    };
    // Compaction packs the live cells and the fence cell into the cell
    // area and promises `garbage` bytes back: they must all fit in it.
    let live: usize = (0..n).map(|i| cell_len(b, slot(b, i))).sum();
    if live + fence.len() + garbage(b) > b.len() - cs {
        return bad(format!(
            "cells of {live} bytes, a fence of {} and {} bytes of garbage exceed the {}-byte cell area",
            fence.len(),
            garbage(b),
            b.len() - cs
        ));
    }
    let (low, high) = fences(b);
    if let (Some(l), Some(h)) = (low, high) {
        if l >= h {
            return bad("low fence not below high fence".into());
        }
    }
    if n > 0 {
        let (first, last) = (key(b, 0), key(b, n - 1));
        let below_low = match kind(b) {
            KIND_LEAF => low.is_some_and(|l| first < l),
            _ => low.is_some_and(|l| first <= l),
        };
        if below_low || high.is_some_and(|h| last >= h) {
            return bad("keys outside the page's fences".into());
        }
    }
    Ok(())
}

/// One cell of a decoded page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodedCell {
    /// A leaf pair with its value inline.
    Pair { key: Vec<u8>, value: Vec<u8> },
    /// A leaf pair whose value is an overflow chain.
    OutOfLine {
        key: Vec<u8>,
        first: PageId,
        len: u32,
    },
    /// An inner page's separator and the child at or above it.
    Separator { key: Vec<u8>, child: PageId },
}

/// A page read from bytes, for inspection tools and fuzzing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedPage {
    pub kind: u8,
    pub level: u8,
    /// Leaf: right sibling; inner: child below the first separator;
    /// overflow and free-list pages: next page of the chain.
    pub link: PageId,
    pub low: Option<Vec<u8>>,
    pub high: Option<Vec<u8>>,
    pub cells: Vec<DecodedCell>,
    /// Overflow and free-list pages: their payload bytes.
    pub payload: Vec<u8>,
}

/// Checks page `id`'s image `b` as a read from disk does ([`check`]) and
/// decodes it. A typed error for anything damaged; never a panic.
pub fn decode(b: &[u8], id: PageId) -> Result<DecodedPage> {
    if b.len() < HEADER || !b.len().is_power_of_two() {
        return Err(Error::corruption(
            format!("page {id}"),
            format!("{} bytes is no page size", b.len()),
        ));
    }
    check(b, id, &|| format!("page {id}"))?;
    let kind = kind(b);
    let (low, high) = fences_owned(b);
    let mut out = DecodedPage {
        kind,
        level: level(b),
        link: link(b),
        low,
        high,
        cells: Vec::new(),
        payload: Vec::new(),
    };
    if kind == KIND_OVERFLOW || kind == KIND_FREELIST {
        let n = count(b).min(b.len() - HEADER);
        out.payload = b.get(HEADER..HEADER + n).unwrap_or_default().to_vec();
        return Ok(out);
    }
    out.cells = (0..count(b))
        .map(|i| {
            let key = key(b, i).to_vec();
            if kind == KIND_INNER {
                DecodedCell::Separator {
                    key,
                    child: child(b, i),
                }
            } else {
                match value(b, i) {
                    StoredValue::Inline(v) => DecodedCell::Pair {
                        key,
                        value: v.to_vec(),
                    },
                    StoredValue::Overflow { first, len } => {
                        DecodedCell::OutOfLine { key, first, len }
                    }
                }
            }
        })
        .collect();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn leaf(size: usize) -> Vec<u8> {
        let mut b = vec![0u8; size];
        init(&mut b, 7, KIND_LEAF, 0);
        b
    }

    fn contents(b: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        (0..count(b))
            .map(|i| match value(b, i) {
                StoredValue::Inline(v) => (key(b, i).to_vec(), v.to_vec()),
                StoredValue::Overflow { .. } => panic!("unexpected overflow"),
            })
            .collect()
    }

    fn short_key() -> impl Strategy<Value = Vec<u8>> {
        // Few distinct bytes, so keys often share their first eight.
        proptest::collection::vec(0u8..3, 0..14)
    }

    proptest! {
        #[test]
        fn key_order_is_byte_order(a in short_key(), b in short_key()) {
            prop_assert_eq!(cmp_keys(&a, &b), a.cmp(&b));
            prop_assert_eq!(cmp_keys(&b, &a), b.cmp(&a));
        }
    }

    proptest! {
        /// Inserts and removes against a BTreeMap; the page stays sorted,
        /// checkable, and equal to the model; splits preserve every cell.
        #[test]
        fn page_matches_a_map(ops in proptest::collection::vec(
            (0u8..8, proptest::collection::vec(1u8..8, 1..12), proptest::collection::vec(any::<u8>(), 0..60)), 1..300)) {
            let mut b = leaf(4096);
            let mut model = BTreeMap::new();
            let mut want_fences: (Option<Vec<u8>>, Option<Vec<u8>>) = (None, None);
            for (op, k, v) in ops {
                if op == 7 {
                    // New fences around every possible key, of varying
                    // length, so old fence cells become garbage.
                    let high = vec![9u8; 1 + v.len() % 40];
                    if set_fences(&mut b, Some(&[1]), Some(&high)) {
                        want_fences = (Some(vec![1]), Some(high));
                    }
                    prop_assert_eq!(fences_owned(&b), want_fences.clone());
                    continue;
                }
                let ins = op < 4;
                match search(&b, &k) {
                    Ok(i) => {
                        remove(&mut b, i);
                        model.remove(&k);
                        if ins && leaf_insert(&mut b, i, &k, &StoredValue::Inline(&v)) {
                            model.insert(k, v);
                        }
                    }
                    Err(i) => {
                        if ins && leaf_insert(&mut b, i, &k, &StoredValue::Inline(&v)) {
                            model.insert(k, v);
                        }
                    }
                }
                seal(&mut b);
                check(&b, 7, &|| "test".into()).unwrap();
                prop_assert_eq!(fences_owned(&b), want_fences.clone());
            }
            let want: Vec<_> = model.into_iter().collect();
            prop_assert_eq!(contents(&b), want.clone());
            if count(&b) >= 2 {
                let mut cells = raw_cells(&b);
                let upper = cells.split_off(cells.len() / 2);
                let sep = crate::tree::separator(
                    raw_cell_key(cells.last().unwrap(), KIND_LEAF),
                    raw_cell_key(&upper[0], KIND_LEAF),
                );
                let mut right = leaf(4096);
                set_page_id(&mut right, 7);
                rebuild(&mut b, &cells, None, Some(&sep));
                rebuild(&mut right, &upper, Some(&sep), None);
                for p in [&mut b, &mut right] {
                    seal(p);
                    check(p, 7, &|| "half".into()).unwrap();
                }
                prop_assert_eq!(fences(&b), (None, Some(&sep[..])));
                prop_assert_eq!(fences(&right), (Some(&sep[..]), None));
                let mut both = contents(&b);
                both.extend(contents(&right));
                prop_assert_eq!(both, want);
            }
        }

        #[test]
        fn check_never_panics(bytes in proptest::collection::vec(any::<u8>(), 4096)) {
            let _ = check(&bytes, 0, &|| "fuzz".into());
        }

        /// A valid page with a few bytes flipped decodes or gives a typed
        /// error, never a panic; what decodes keeps its keys in order.
        #[test]
        fn damaged_pages_decode_or_fail_cleanly(
            keys in proptest::collection::btree_set(proptest::collection::vec(1u8..4, 1..8), 1..40),
            flips in proptest::collection::vec((0usize..1024, any::<u8>()), 1..6),
        ) {
            let mut b = leaf(1024);
            for (i, k) in keys.iter().enumerate() {
                leaf_insert(&mut b, i, k, &StoredValue::Inline(&[5; 3]));
            }
            for (at, x) in flips {
                b[at] ^= x;
            }
            // Sealed after the damage, so the layout checks (not the
            // checksum) are what stand between the bytes and a panic.
            seal(&mut b);
            if let Ok(d) = decode(&b, page_id(&b)) {
                let ks: Vec<Vec<u8>> = d.cells.iter().map(|c| match c {
                    DecodedCell::Pair { key, .. }
                    | DecodedCell::OutOfLine { key, .. }
                    | DecodedCell::Separator { key, .. } => key.clone(),
                }).collect();
                prop_assert!(ks.windows(2).all(|w| w[0] < w[1]));
            }
        }
    }

    #[test]
    fn inner_pages_route_keys() {
        let mut b = vec![0u8; 4096];
        init(&mut b, 3, KIND_INNER, 1);
        set_link(&mut b, 10);
        assert!(inner_insert(&mut b, 0, b"m", 11));
        assert!(inner_insert(&mut b, 1, b"t", 12));
        assert_eq!(child_for(&b, b"a"), 10);
        assert_eq!(child_for(&b, b"m"), 11);
        assert_eq!(child_for(&b, b"n"), 11);
        assert_eq!(child_for(&b, b"zz"), 12);
    }

    #[test]
    fn damage_is_detected() {
        let mut b = leaf(4096);
        assert!(leaf_insert(&mut b, 0, b"k", &StoredValue::Inline(b"v")));
        seal(&mut b);
        check(&b, 7, &|| "p".into()).unwrap();
        assert!(check(&b, 8, &|| "p".into()).is_err(), "wrong id");
        b[100] ^= 1;
        assert!(check(&b, 7, &|| "p".into()).is_err(), "bit flip");
    }

    #[test]
    fn leaves_sit_at_level_zero_and_inner_pages_above() {
        for (kind, level, ok) in [
            (KIND_LEAF, 0, true),
            (KIND_LEAF, 255, false),
            (KIND_INNER, 1, true),
            (KIND_INNER, 0, false),
        ] {
            let mut b = vec![0u8; 1024];
            init(&mut b, 7, kind, level);
            assert!(set_fences(&mut b, None, None));
            seal(&mut b);
            assert_eq!(
                check(&b, 7, &|| "p".into()).is_ok(),
                ok,
                "kind {kind} level {level}"
            );
        }
    }

    #[test]
    fn garbage_the_cell_area_cannot_hold_is_damage() {
        let mut b = leaf(1024);
        for (i, k) in [b"a", b"b", b"c"].into_iter().enumerate() {
            assert!(leaf_insert(&mut b, i, k, &StoredValue::Inline(&[5; 100])));
        }
        remove(&mut b, 1);
        seal(&mut b);
        check(&b, 7, &|| "p".into()).unwrap();
        // Checksummed, yet it promises room that compaction cannot free:
        // inserting into it would write past the slot array.
        let dead = garbage(&b);
        set_garbage(&mut b, dead + 1024);
        seal(&mut b);
        assert!(check(&b, 7, &|| "p".into()).is_err());
    }

    #[test]
    fn decoding_gives_cells_fences_and_payloads() {
        let mut b = vec![0u8; 1024];
        init(&mut b, 9, KIND_LEAF, 0);
        assert!(leaf_insert(&mut b, 0, b"k", &StoredValue::Inline(b"v")));
        let over = StoredValue::Overflow {
            first: 12,
            len: 900,
        };
        assert!(leaf_insert(&mut b, 1, b"m", &over));
        assert!(set_fences(&mut b, Some(b"a"), Some(b"q")));
        seal(&mut b);
        let d = decode(&b, 9).unwrap();
        assert_eq!(
            (d.kind, d.low.as_deref(), d.high.as_deref()),
            (KIND_LEAF, Some(&b"a"[..]), Some(&b"q"[..]))
        );
        assert_eq!(
            d.cells,
            vec![
                DecodedCell::Pair {
                    key: b"k".to_vec(),
                    value: b"v".to_vec()
                },
                DecodedCell::OutOfLine {
                    key: b"m".to_vec(),
                    first: 12,
                    len: 900
                },
            ]
        );
        assert!(decode(&b, 10).is_err(), "wrong id");
        assert!(decode(&b[..1000], 9).is_err(), "no page size");
    }

    #[test]
    fn keys_must_lie_within_the_fences() {
        let mut b = leaf(4096);
        assert!(leaf_insert(&mut b, 0, b"k", &StoredValue::Inline(b"v")));
        let ok = |b: &mut Vec<u8>| {
            seal(b);
            check(b, 7, &|| "p".into()).is_ok()
        };
        assert!(set_fences(&mut b, Some(b"k"), Some(b"l")));
        assert!(ok(&mut b), "a leaf holds its low fence");
        assert!(set_fences(&mut b, Some(b"ka"), None));
        assert!(!ok(&mut b), "key below the low fence");
        assert!(set_fences(&mut b, None, Some(b"k")));
        assert!(!ok(&mut b), "key at the high fence");
        assert!(set_fences(&mut b, Some(b"m"), Some(b"c")));
        assert!(!ok(&mut b), "inverted fences");
        let mut inner = vec![0u8; 4096];
        init(&mut inner, 7, KIND_INNER, 1);
        assert!(inner_insert(&mut inner, 0, b"k", 9));
        assert!(set_fences(&mut inner, Some(b"k"), None));
        assert!(!ok(&mut inner), "a separator equal to the low fence");
        // A fence that does not fit is refused and changes nothing.
        let long = vec![b'z'; 5000];
        assert!(!set_fences(&mut b, Some(b"a"), Some(&long)));
        assert_eq!(fences(&b), (Some(&b"m"[..]), Some(&b"c"[..])));
        // A page without a fence cell is damaged.
        let mut bare = leaf(4096);
        wr(&mut bare, FENCE_AT, &0u16.to_le_bytes());
        assert!(!ok(&mut bare));
    }
}
