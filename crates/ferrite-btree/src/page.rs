//! The slotted page: layout, search, insertion, deletion and splitting of
//! cells, with no I/O (spec: `docs/format/btree-page.md`).
//!
//! A page is a header, a slot array growing up from the header, and cells
//! growing down from the page end. Slots hold cell offsets in key order,
//! each with the key's *head*: the four bytes after the prefix every key
//! of the page shares (as long as its fences share), so a search runs over
//! the slot array alone and reads a cell only to settle equal heads and to
//! confirm the prefix (LeanStore's layout). Pages written by format 3 and
//! older have plain 2-byte slots; they are read as they are and take heads
//! when a split or bulk load rebuilds them.
//! Leaf cells hold a key and a value (inline, or a pointer to an overflow
//! chain); inner cells hold a separator key and the child for keys at or
//! above it, with the child for keys below the first separator in the
//! header's `link`. Every leaf and inner page also holds its *fence keys*:
//! the bounds `[low, high)` of the keys its subtree may hold (absent bound:
//! unbounded), equal to the separators its parent routes by, in one fence
//! cell in the cell area (not in the slot array). Invariants: slots are
//! sorted by key with no duplicates; every slot and the fence cell point
//! inside `[cell_start, page_size)`; `HEADER + stride·n ≤ cell_start`; every
//! key starts with the page's prefix and its slot's head is [`head_of`] it;
//! the prefix is no longer than what the fences share; `garbage`
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
/// Beside [`OVERFLOW_FLAG`]: the chain lies on consecutive ids. Cells
/// written before it have the bit clear and are followed by their links,
/// as readers that predate it follow every chain.
const RUN_FLAG: u32 = 0x4000_0000;
/// Bytes of an out-of-line value reference: first page (u64), length (u32).
pub const OVERFLOW_REF: usize = 12;
/// A fence length meaning "unbounded" (keys are far shorter).
const UNBOUNDED: u16 = u16::MAX;
/// Header offset of the fence cell's offset.
const FENCE_AT: usize = 12;
/// Header offset of the slot layout of a leaf or inner page.
const LAYOUT_AT: usize = 14;
/// Header offset of the prefix length that heads skip (head slots only).
const PREFIX_AT: usize = 15;
/// Plain slots: a 2-byte cell offset (format 3 and older).
const LAYOUT_PLAIN: u8 = 0;
/// Head slots: a 2-byte cell offset, then the key's 4-byte head.
const LAYOUT_HEADS: u8 = 1;
/// Bytes of a head slot, what [`raw_cell_size`] plans new pages with.
const HEAD_SLOT: usize = 6;
/// Longest prefix a head skips (it is kept in one header byte).
const MAX_PREFIX: usize = u8::MAX as usize;

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
    /// A chain of overflow pages from `first` holding `len` bytes; `run`
    /// when its pages are `first, first + 1, …` (see `overflow`).
    Overflow {
        first: PageId,
        len: u32,
        run: bool,
    },
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
        if let Some(x) = b.get_mut(LAYOUT_AT) {
            *x = LAYOUT_HEADS;
        }
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
/// Whether the page's slots carry heads.
pub(crate) fn has_heads(b: &[u8]) -> bool {
    b.get(LAYOUT_AT) == Some(&LAYOUT_HEADS)
}
/// Bytes one slot of the page takes.
fn stride(b: &[u8]) -> usize {
    if has_heads(b) {
        HEAD_SLOT
    } else {
        2
    }
}
/// Bytes of key prefix the heads skip (0 on a page of plain slots).
fn prefix_len(b: &[u8]) -> usize {
    if has_heads(b) {
        b.get(PREFIX_AT).copied().unwrap_or(0) as usize
    } else {
        0
    }
}
fn slot(b: &[u8], i: usize) -> usize {
    rd16(b, HEADER + stride(b) * i) as usize
}
fn set_slot(b: &mut [u8], i: usize, at: usize) {
    let s = stride(b);
    wr(b, HEADER + s * i, &(at as u16).to_le_bytes());
}
/// The head of slot `i` (head slots only).
fn slot_head(b: &[u8], i: usize) -> u32 {
    b.get(HEADER + HEAD_SLOT * i + 2..HEADER + HEAD_SLOT * i + 6)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u32::from_be_bytes)
}
fn set_slot_head(b: &mut [u8], i: usize, head: u32) {
    wr(b, HEADER + HEAD_SLOT * i + 2, &head.to_be_bytes());
}

/// The head of `k` on a page whose prefix is `prefix` bytes: the four key
/// bytes after it, zero-padded, as a big-endian integer. For keys sharing
/// the prefix, a smaller head means a smaller key, and a smaller key never
/// has a larger head.
fn head_of(k: &[u8], prefix: usize) -> u32 {
    let mut h = [0u8; 4];
    if let Some(rest) = k.get(prefix..) {
        let m = rest.len().min(4);
        h[..m].copy_from_slice(&rest[..m]);
    }
    u32::from_be_bytes(h)
}

fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The prefix a head page should skip: what its fences share (nothing if
/// one is unbounded), cut to what its first and last keys share.
fn wanted_prefix(b: &[u8]) -> usize {
    let p = match fences(b) {
        (Some(l), Some(h)) => common_prefix(l, h),
        _ => 0,
    };
    let n = count(b);
    let p = if n > 0 {
        let (first, last) = (key(b, 0), key(b, n - 1));
        p.min(common_prefix(first, last)).min(first.len())
    } else {
        p
    };
    p.min(MAX_PREFIX)
}

/// Sets a head page's prefix to `p` and recomputes every head.
fn set_prefix(b: &mut [u8], p: usize) {
    wr(b, PREFIX_AT, &[p.min(MAX_PREFIX) as u8]);
    for i in 0..count(b) {
        let h = head_of(key(b, i), p);
        set_slot_head(b, i, h);
    }
}

/// Shortens a head page's prefix so `k` shares it. Keys are placed within
/// their page's fences, so this is a guard: a key from outside them must
/// not leave heads that misorder it.
fn admit_prefix(b: &mut [u8], k: &[u8]) {
    let p = prefix_len(b);
    if p == 0 {
        return;
    }
    let shared = {
        let reference = if count(b) > 0 {
            key(b, 0)
        } else {
            fences(b).0.unwrap_or_default()
        };
        common_prefix(k, reference.get(..p).unwrap_or(reference))
    };
    if shared < p {
        set_prefix(b, shared);
    }
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
    if cell_start(b) < HEADER + stride(b) * count(b) + cell.len() {
        compact(b);
    }
    let at = cell_start(b) - cell.len();
    wr(b, at, &cell);
    wr(b, FENCE_AT, &(at as u16).to_le_bytes());
    set_cell_start(b, at);
    if has_heads(b) {
        let p = wanted_prefix(b);
        if p != prefix_len(b) {
            set_prefix(b, p);
        }
    }
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
            run: v & RUN_FLAG != 0,
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
    if has_heads(b) {
        search_heads(b, k)
    } else {
        search_keys(b, k, 0, count(b))
    }
}

/// The search on a page of head slots. The heads narrow the search to the
/// slots whose head equals `k`'s, usually none or one, without reading a
/// cell; cells are read only among those, and one more to check that `k`
/// has the page's prefix (a key without it lies below or above every key
/// of the page, whatever its head says). The cell read for that check is
/// the one the caller reads next: the match, or the slot before the gap,
/// whose child an inner page routes to.
fn search_heads(b: &[u8], k: &[u8]) -> std::result::Result<usize, usize> {
    let n = count(b);
    if n == 0 {
        return Err(0);
    }
    let p = prefix_len(b);
    let hk = head_of(k, p);
    // Lower bound of `hk`, noting the lowest slot seen with a greater head.
    let (mut lo, mut hi, mut above) = (0usize, n, n);
    while lo < hi {
        let mid = (lo + hi) / 2;
        let h = slot_head(b, mid);
        if h < hk {
            lo = mid + 1;
        } else {
            if h > hk {
                above = mid;
            }
            hi = mid;
        }
    }
    let (mut end, mut z) = (lo, above);
    while end < z {
        let mid = (end + z) / 2;
        if slot_head(b, mid) <= hk {
            end = mid + 1;
        } else {
            z = mid;
        }
    }
    let found = search_keys(b, k, lo, end);
    let Err(i) = found else {
        return found;
    };
    if p > 0 {
        let known = key(b, i.saturating_sub(1).min(n - 1));
        let m = k.len().min(p);
        match k[..m].cmp(known.get(..m).unwrap_or(known)) {
            std::cmp::Ordering::Less => return Err(0),
            std::cmp::Ordering::Greater => return Err(n),
            std::cmp::Ordering::Equal if k.len() < p => return Err(0),
            std::cmp::Ordering::Equal => {}
        }
    }
    Err(i)
}

/// Binary search by whole keys over slots `lo..hi`, where `k` belongs.
fn search_keys(b: &[u8], k: &[u8], lo: usize, hi: usize) -> std::result::Result<usize, usize> {
    let kstart = if kind(b) == KIND_INNER { 10 } else { 6 };
    let key_at = |i: usize| {
        let off = slot(b, i);
        let klen = rd16(b, off) as usize;
        b.get(off + kstart..off + kstart + klen).unwrap_or_default()
    };
    let (mut lo, mut hi) = (lo, hi);
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
    child_route(b, k).1
}

/// [`child_for`] with the child's position among the page's children: 0
/// for the `link`, `i + 1` for slot `i`'s child.
pub fn child_route(b: &[u8], k: &[u8]) -> (usize, PageId) {
    match search(b, k) {
        Ok(i) => (i + 1, child(b, i)),
        Err(0) => (0, link(b)),
        Err(i) => (i, child(b, i - 1)),
    }
}

/// The child holding the keys just below `k` (for a descent to the
/// largest key strictly less than `k`).
pub fn child_below(b: &[u8], k: &[u8]) -> PageId {
    match search(b, k) {
        Ok(0) | Err(0) => link(b),
        Ok(i) | Err(i) => child(b, i - 1),
    }
}

/// The child holding the largest keys.
pub fn last_child(b: &[u8]) -> PageId {
    match count(b) {
        0 => link(b),
        n => child(b, n - 1),
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
    (cell_start(b) + garbage(b)).saturating_sub(HEADER + stride(b) * count(b))
}

/// Bytes slot `i` and its cell take (what removing it frees).
pub fn slot_cell_size(b: &[u8], i: usize) -> usize {
    if i >= count(b) {
        return 0;
    }
    stride(b) + cell_len(b, slot(b, i))
}

/// Bytes a new leaf cell needs in page `b`, slot included.
pub fn leaf_cell_size(b: &[u8], klen: usize, v: &StoredValue<'_>) -> usize {
    let vlen = match v {
        StoredValue::Inline(x) => x.len(),
        StoredValue::Overflow { .. } => OVERFLOW_REF,
    };
    stride(b) + 2 + 4 + klen + vlen
}

/// Bytes a new inner cell needs in page `b`, slot included.
fn inner_cell_size(b: &[u8], klen: usize) -> usize {
    stride(b) + 2 + 8 + klen
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
        set_slot(b, i, at);
    }
    set_cell_start(b, at);
    set_garbage(b, 0);
}

/// Places raw cell bytes at slot position `i`. The caller checked space.
fn place(b: &mut [u8], i: usize, cell: &[u8]) {
    let heads = has_heads(b);
    let k = raw_cell_key(cell, kind(b));
    if heads {
        admit_prefix(b, k);
    }
    let n = count(b);
    let s = stride(b);
    if cell_start(b) < HEADER + s * (n + 1) + cell.len() {
        compact(b);
    }
    let at = cell_start(b) - cell.len();
    wr(b, at, cell);
    // Shift slots i.. right by one.
    let from = HEADER + s * i;
    let to = HEADER + s * n;
    if from <= to && to + s <= b.len() {
        b.copy_within(from..to, from + s);
    }
    set_slot(b, i, at);
    if heads {
        let h = head_of(k, prefix_len(b));
        set_slot_head(b, i, h);
    }
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
        StoredValue::Overflow { first, len, run } => {
            let flags = OVERFLOW_FLAG | if *run { RUN_FLAG } else { 0 };
            c.extend_from_slice(&flags.to_le_bytes());
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
    if free_space(b) < leaf_cell_size(b, k.len(), v) {
        return false;
    }
    place(b, i, &encode_leaf_cell(k, v));
    true
}

/// Inserts an inner cell at slot `i` if it fits.
pub fn inner_insert(b: &mut [u8], i: usize, k: &[u8], child: PageId) -> bool {
    if free_space(b) < inner_cell_size(b, k.len()) {
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
    let s = stride(b);
    let from = HEADER + s * (i + 1);
    let to = HEADER + s * n;
    if to <= b.len() {
        b.copy_within(from..to, from - s);
    }
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
    if free_space(b) < cell.len() + stride(b) {
        return false;
    }
    place(b, i, cell);
    true
}

/// Bytes a raw cell needs in a page that [`init`] or [`rebuild`] wrote
/// (head slots), slot included.
pub fn raw_cell_size(cell: &[u8]) -> usize {
    cell.len() + HEAD_SLOT
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
/// high)` (which must fit together, planned with [`raw_cell_size`]),
/// keeping the rest of the header. The page gets head slots whatever it
/// had before.
pub fn rebuild(b: &mut [u8], cells: &[Vec<u8>], low: Option<&[u8]>, high: Option<&[u8]>) {
    wr(b, LAYOUT_AT, &[LAYOUT_HEADS, 0]);
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
    let heads = match b.get(LAYOUT_AT..PREFIX_AT + 1) {
        Some([LAYOUT_HEADS, _]) => true,
        Some([LAYOUT_PLAIN, 0]) => false,
        _ => return bad("unknown slot layout".into()),
    };
    let n = count(b);
    let cs = cell_start(b);
    if HEADER + stride(b) * n > cs || cs > b.len() {
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
    if heads {
        // The search trusts the heads and reads the prefix from any one
        // key: every key must start with the same prefix, and inserts
        // within the fences must keep doing so.
        let p = prefix_len(b);
        let fenced = match (low, high) {
            (Some(l), Some(h)) => common_prefix(l, h),
            _ => 0,
        };
        let shared = match n {
            0 => p,
            _ => common_prefix(key(b, 0), key(b, n - 1)).min(key(b, 0).len()),
        };
        if p > fenced || p > shared {
            return bad(format!(
                "a {p}-byte key prefix where the fences share {fenced} bytes"
            ));
        }
        if let Some(i) = (0..n).find(|&i| slot_head(b, i) != head_of(key(b, i), p)) {
            return bad(format!("slot {i} holds a head its key does not have"));
        }
    }
    Ok(())
}

/// One cell of a decoded page.
#[cfg(any(test, feature = "bench-internals"))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodedCell {
    /// A leaf pair with its value inline.
    Pair { key: Vec<u8>, value: Vec<u8> },
    /// A leaf pair whose value is an overflow chain.
    OutOfLine {
        key: Vec<u8>,
        first: PageId,
        len: u32,
        /// The chain lies on consecutive ids.
        run: bool,
    },
    /// An inner page's separator and the child at or above it.
    Separator { key: Vec<u8>, child: PageId },
}

/// A page read from bytes, for inspection tools and fuzzing.
#[cfg(any(test, feature = "bench-internals"))]
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

#[cfg(any(test, feature = "bench-internals"))]
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
                    StoredValue::Overflow { first, len, run } => DecodedCell::OutOfLine {
                        key,
                        first,
                        len,
                        run,
                    },
                }
            }
        })
        .collect();
    Ok(out)
}

/// A copy of page `b` with the plain slots format 3 wrote, for tests of
/// stores that predate head slots.
#[cfg(test)]
pub(crate) fn to_plain(b: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; b.len()];
    init(&mut out, page_id(b), kind(b), level(b));
    if kind(b) != KIND_LEAF && kind(b) != KIND_INNER {
        return b.to_vec();
    }
    wr(&mut out, LAYOUT_AT, &[LAYOUT_PLAIN, 0]);
    let (low, high) = fences(b);
    assert!(set_fences(&mut out, low, high));
    set_link(&mut out, link(b));
    for (i, c) in raw_cells(b).iter().enumerate() {
        assert!(insert_raw(&mut out, i, c));
    }
    seal(&mut out);
    out
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

    /// Keys sharing a prefix of `0..24` bytes, with few distinct bytes
    /// after it so heads often tie; and probes that have the prefix,
    /// a shorter piece of it, or bytes below and above it.
    fn prefixed_keys() -> impl Strategy<Value = (Vec<u8>, Vec<Vec<u8>>, Vec<Vec<u8>>)> {
        (
            proptest::collection::vec(1u8..200, 0..24),
            proptest::collection::btree_set(proptest::collection::vec(0u8..3, 0..9), 0..60),
            proptest::collection::vec((0u8..4, proptest::collection::vec(0u8..4, 0..9)), 0..40),
        )
            .prop_map(|(prefix, suffixes, probes)| {
                let keys = suffixes
                    .into_iter()
                    .map(|s| [prefix.clone(), s].concat())
                    .collect();
                let probes = probes
                    .into_iter()
                    .map(|(how, s)| match how {
                        0 => [prefix.clone(), s].concat(),
                        1 => prefix[..prefix.len() / 2].to_vec(),
                        2 => [vec![0u8], s].concat(),
                        _ => [vec![255u8], s].concat(),
                    })
                    .collect();
                (prefix, keys, probes)
            })
    }

    proptest! {
        /// Searching by heads finds what a binary search over the keys
        /// finds, on leaf and inner pages, in head and plain slots, for
        /// keys inside the page and far outside it.
        #[test]
        fn heads_search_like_the_keys((prefix, keys, probes) in prefixed_keys(), inner in any::<bool>()) {
            let kind = if inner { KIND_INNER } else { KIND_LEAF };
            let mut b = vec![0u8; 4096];
            init(&mut b, 7, kind, u8::from(inner));
            let high = [prefix.clone(), vec![9]].concat();
            prop_assert!(set_fences(&mut b, Some(&prefix), Some(&high)));
            let keys: Vec<Vec<u8>> = keys.into_iter().filter(|k| !inner || *k != prefix).collect();
            for (i, k) in keys.iter().enumerate() {
                let ok = if inner {
                    inner_insert(&mut b, i, k, 100 + i as u64)
                } else {
                    leaf_insert(&mut b, i, k, &StoredValue::Inline(b"v"))
                };
                prop_assert!(ok);
            }
            seal(&mut b);
            check(&b, 7, &|| "heads".into()).unwrap();
            prop_assert_eq!(prefix_len(&b), prefix.len().min(MAX_PREFIX));
            let plain = to_plain(&b);
            check(&plain, 7, &|| "plain".into()).unwrap();
            prop_assert!(!has_heads(&plain));
            for k in keys.iter().chain(&probes) {
                let want = keys.binary_search(k);
                prop_assert_eq!(search(&b, k), want, "heads, probe {:?}", k);
                prop_assert_eq!(search(&plain, k), want, "plain, probe {:?}", k);
            }
        }

        /// A key placed outside the page's prefix (no caller does; the
        /// fences rule it out) shortens the prefix rather than leave heads
        /// that misorder it.
        #[test]
        fn a_key_without_the_prefix_shortens_it((prefix, keys, probes) in prefixed_keys()) {
            let mut b = leaf(4096);
            let high = [prefix.clone(), vec![9]].concat();
            prop_assert!(set_fences(&mut b, Some(&prefix), Some(&high)));
            let mut model: Vec<Vec<u8>> = Vec::new();
            for k in keys.iter().chain(&probes) {
                if let Err(i) = model.binary_search(k) {
                    if leaf_insert(&mut b, i, k, &StoredValue::Inline(b"v")) {
                        model.insert(i, k.clone());
                    }
                }
            }
            for k in keys.iter().chain(&probes) {
                prop_assert_eq!(search(&b, k), model.binary_search(k));
            }
        }
    }

    #[test]
    fn a_rebuild_gives_plain_pages_heads() {
        let mut b = leaf(4096);
        assert!(set_fences(&mut b, Some(b"user100"), Some(b"user2")));
        for (i, k) in [b"user1000", b"user1500", b"user1999"].iter().enumerate() {
            assert!(leaf_insert(&mut b, i, &k[..], &StoredValue::Inline(b"v")));
        }
        assert_eq!(prefix_len(&b), 4);
        let mut plain = to_plain(&b);
        assert_eq!(search(&plain, b"user1500"), Ok(1));
        let cells = raw_cells(&plain);
        // A plain page takes inserts in its own layout.
        assert!(leaf_insert(
            &mut plain,
            3,
            b"user1a",
            &StoredValue::Inline(b"w")
        ));
        assert!(!has_heads(&plain));
        rebuild(&mut plain, &cells, Some(b"user1"), Some(b"user1a"));
        seal(&mut plain);
        check(&plain, 7, &|| "rebuilt".into()).unwrap();
        assert!(has_heads(&plain));
        assert_eq!(prefix_len(&plain), 5);
        assert_eq!(search(&plain, b"user1999"), Ok(2));
        assert_eq!(search(&plain, b"user0"), Err(0));
        assert_eq!(search(&plain, b"user3"), Err(3));
    }

    #[test]
    fn heads_that_disagree_with_their_keys_are_damage() {
        let mut b = leaf(4096);
        assert!(set_fences(&mut b, Some(b"ab"), Some(b"ac")));
        assert!(leaf_insert(&mut b, 0, b"abc", &StoredValue::Inline(b"v")));
        assert!(leaf_insert(&mut b, 1, b"abd", &StoredValue::Inline(b"v")));
        seal(&mut b);
        check(&b, 7, &|| "p".into()).unwrap();
        let mut wrong_head = b.clone();
        set_slot_head(&mut wrong_head, 1, head_of(b"abc", 1));
        seal(&mut wrong_head);
        assert!(check(&wrong_head, 7, &|| "p".into()).is_err());
        let mut long_prefix = b.clone();
        set_prefix(&mut long_prefix, 0);
        seal(&mut long_prefix);
        check(&long_prefix, 7, &|| "p".into()).unwrap();
        set_prefix(&mut long_prefix, 2);
        seal(&mut long_prefix);
        assert!(
            check(&long_prefix, 7, &|| "p".into()).is_err(),
            "a prefix longer than the fences share"
        );
        let mut layout = b.clone();
        wr(&mut layout, LAYOUT_AT, &[7]);
        seal(&mut layout);
        assert!(check(&layout, 7, &|| "p".into()).is_err());
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
            run: true,
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
                    len: 900,
                    run: true
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
