//! The durable form of the page ids the tree does not use: freed pages,
//! spare runs kept whole for re-layouts, and the runs re-laid-out levels
//! occupy (all of [`Shape`] that is not the tree itself).
//!
//! A checkpoint writes them as a chain of free-list pages (kind
//! [`KIND_FREELIST`]: the overflow page layout, payload bytes in `n`, the
//! next page in `link`) and the meta page names the chain's head and
//! length. The chain lives *in free pages*: its pages are ids of the free
//! list it stores, so persisting the list costs no page of its own, and
//! after a restart those ids are simply free again. This is safe because
//! the chain's pages reach the page file through the checkpoint's
//! double-write file like every other page, and nothing but a checkpoint
//! writes a free id in place (overflow chains and bulk loads take fresh
//! ids past the page count).
//!
//! Invariants of a decoded set (checked, never trusted): every id lies in
//! `2 .. page_count`, no id is listed twice, and no spare or level run
//! overlaps another or a free id.

use ferrite_core::engine::ByteReader;
use ferrite_core::{Error, Result};
use ferrite_io::{AlignedBuf, BlockDevice};

use crate::page::{self, PageId, KIND_FREELIST};
use crate::shape::Shape;

/// The unused-id part of a [`Shape`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FreeSpace {
    /// Every free id, whether or not the previous checkpoint used it.
    pub free: Vec<PageId>,
    pub spare: Vec<(PageId, u64)>,
    pub level_runs: Vec<Option<(PageId, u64)>>,
}

/// Where a checkpoint's free-list chain is: its first page and its
/// payload length in bytes (0 and 0: nothing to keep).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChainRef {
    pub head: PageId,
    pub len: u64,
}

impl FreeSpace {
    pub fn of(shape: &Shape) -> Self {
        Self {
            free: shape.clean.iter().chain(&shape.free).copied().collect(),
            spare: shape.spare.clone(),
            level_runs: shape.level_runs.clone(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.free.is_empty() && self.spare.is_empty() && self.level_runs.iter().all(Option::is_none)
    }

    /// Payload bytes of the encoded form.
    fn encoded_len(&self) -> usize {
        12 + self.free.len() * 8 + self.spare.len() * 16 + self.level_runs.len() * 17
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.encoded_len());
        v.extend_from_slice(&(self.free.len() as u32).to_le_bytes());
        v.extend_from_slice(&(self.spare.len() as u32).to_le_bytes());
        v.extend_from_slice(&(self.level_runs.len() as u32).to_le_bytes());
        for id in &self.free {
            v.extend_from_slice(&id.to_le_bytes());
        }
        for (first, len) in &self.spare {
            v.extend_from_slice(&first.to_le_bytes());
            v.extend_from_slice(&len.to_le_bytes());
        }
        for run in &self.level_runs {
            let (present, (first, cap)) = match run {
                Some(r) => (1u8, *r),
                None => (0u8, (0, 0)),
            };
            v.push(present);
            v.extend_from_slice(&first.to_le_bytes());
            v.extend_from_slice(&cap.to_le_bytes());
        }
        v
    }

    /// Decodes and validates the set for a file of `page_count` pages.
    pub fn decode(b: &[u8], page_count: u64) -> std::result::Result<Self, String> {
        let mut r = ByteReader::new(b);
        let short = || "free list ends early".to_string();
        let (nf, ns, nl) = (
            r.u32().ok_or_else(short)? as usize,
            r.u32().ok_or_else(short)? as usize,
            r.u32().ok_or_else(short)? as usize,
        );
        if 12 + nf * 8 + ns * 16 + nl * 17 != b.len() {
            return Err(format!(
                "free list of {} bytes does not hold {nf} ids, {ns} spare runs and {nl} level runs",
                b.len()
            ));
        }
        let mut s = FreeSpace::default();
        for _ in 0..nf {
            s.free.push(r.u64().ok_or_else(short)?);
        }
        for _ in 0..ns {
            s.spare
                .push((r.u64().ok_or_else(short)?, r.u64().ok_or_else(short)?));
        }
        for _ in 0..nl {
            let present = r.u8().ok_or_else(short)?;
            let run = (r.u64().ok_or_else(short)?, r.u64().ok_or_else(short)?);
            s.level_runs.push(match present {
                0 => None,
                1 => Some(run),
                p => return Err(format!("level run flag {p}")),
            });
        }
        s.validate(page_count)?;
        Ok(s)
    }

    /// Every id in range, nothing listed twice or overlapping.
    fn validate(&self, page_count: u64) -> std::result::Result<(), String> {
        let mut spans: Vec<(PageId, u64)> = self.free.iter().map(|&id| (id, 1)).collect();
        spans.extend(self.spare.iter().copied());
        spans.extend(self.level_runs.iter().flatten().copied());
        for &(first, len) in &spans {
            let end = first.checked_add(len).ok_or("run end overflows")?;
            if first < 2 || len == 0 || end > page_count {
                return Err(format!(
                    "ids {first}+{len} are not free ids of a {page_count}-page file"
                ));
            }
        }
        spans.sort_unstable();
        for w in spans.windows(2) {
            if w[0].0 + w[0].1 > w[1].0 {
                return Err(format!("ids {}+{} listed twice", w[1].0, w[1].1));
            }
        }
        Ok(())
    }

    /// Makes this the unused part of `shape`, read from a checkpoint whose
    /// chain is on pages `chain` (ascending): those stay tree-only until
    /// the next checkpoint replaces the chain, the rest are clean.
    pub fn install(self, shape: &mut Shape, chain: &[PageId]) {
        let (free, clean) = self
            .free
            .into_iter()
            .partition(|id| chain.binary_search(id).is_ok());
        shape.free = free;
        shape.clean = clean;
        sort_clean(shape);
        shape.spare = self.spare;
        shape.level_runs = self.level_runs;
    }
}

/// After a checkpoint with chain `chain` (ascending ids) is durable: every
/// free id but the chain's pages is clean.
pub fn settle(shape: &mut Shape, chain: &[(PageId, AlignedBuf)]) {
    let mut all = std::mem::take(&mut shape.free);
    all.append(&mut shape.clean);
    let (free, clean) = all
        .into_iter()
        .partition(|id| chain.binary_search_by_key(id, |(c, _)| *c).is_ok());
    shape.free = free;
    shape.clean = clean;
    sort_clean(shape);
}

/// Restores the order `Shape::clean` keeps: descending.
fn sort_clean(shape: &mut Shape) {
    shape.clean.sort_unstable_by(|a, b| b.cmp(a));
}

/// The chain a checkpoint writes for `shape`'s unused ids, as sealed page
/// images in ascending id order. Its pages are free ids (the last ones of
/// the list, tree-only ids before clean ones, left in it); when there are
/// fewer free ids than the chain needs, fresh ids are added first.
pub fn chain(shape: &mut Shape, page_size: usize) -> (ChainRef, Vec<(PageId, AlignedBuf)>) {
    let per = page::usable(page_size);
    if FreeSpace::of(shape).is_empty() {
        return (ChainRef::default(), Vec::new());
    }
    // Each fresh id lengthens the list by 8 bytes, so settle the count.
    let mut set = FreeSpace::of(shape);
    while set.free.len() < set.encoded_len().div_ceil(per) {
        shape.free.push(shape.page_count);
        set.free.push(shape.page_count);
        shape.page_count += 1;
    }
    let bytes = set.encode();
    let pieces: Vec<&[u8]> = bytes.chunks(per).collect();
    let ids = &set.free[set.free.len() - pieces.len()..];
    let mut images: Vec<(PageId, AlignedBuf)> = Vec::with_capacity(pieces.len());
    for (i, piece) in pieces.iter().enumerate() {
        let id = ids[i];
        let mut b = AlignedBuf::zeroed(page_size);
        page::init(&mut b, id, KIND_FREELIST, 0);
        page::set_link(&mut b, ids.get(i + 1).copied().unwrap_or(0));
        b[6..8].copy_from_slice(&(piece.len() as u16).to_le_bytes());
        b[page::HEADER..page::HEADER + piece.len()].copy_from_slice(piece);
        page::seal(&mut b);
        images.push((id, b));
    }
    let head = ChainRef {
        head: ids[0],
        len: bytes.len() as u64,
    };
    images.sort_unstable_by_key(|(id, _)| *id);
    (head, images)
}

/// Reads the chain `at` from the page file of a checkpoint with
/// `page_count` pages, and the chain's page ids (ascending).
pub fn read(
    dev: &dyn BlockDevice,
    at: ChainRef,
    page_count: u64,
    page_size: usize,
) -> Result<(FreeSpace, Vec<PageId>)> {
    if at.head == 0 {
        return Ok((FreeSpace::default(), Vec::new()));
    }
    let loc = || format!("free list at page {}", at.head);
    let per = page::usable(page_size) as u64;
    if at.len > page_count.saturating_mul(per) {
        return Err(Error::corruption(
            loc(),
            format!("length {} exceeds the file", at.len),
        ));
    }
    // The length is checked against the pages as they are read; until
    // then it reserves no more than a few pages' worth.
    let mut bytes = Vec::with_capacity(at.len.min(per * 64) as usize);
    let mut pages = Vec::new();
    let mut id = at.head;
    let mut b = AlignedBuf::zeroed(page_size);
    while (bytes.len() as u64) < at.len {
        if !(2..page_count).contains(&id) {
            return Err(Error::corruption(loc(), format!("chain reaches page {id}")));
        }
        dev.read_at(&mut b, id * page_size as u64)?;
        page::check(&b, id, &|| format!("free-list page {id}"))?;
        if page::kind(&b) != KIND_FREELIST {
            return Err(Error::corruption(
                format!("page {id}"),
                "expected a free-list page",
            ));
        }
        let n = page::count(&b);
        let want = (at.len - bytes.len() as u64).min(per) as usize;
        if n != want {
            return Err(Error::corruption(
                format!("free-list page {id}"),
                format!("holds {n} bytes, the chain needs {want} here"),
            ));
        }
        bytes.extend_from_slice(&b[page::HEADER..page::HEADER + n]);
        pages.push(id);
        id = page::link(&b);
    }
    let set = FreeSpace::decode(&bytes, page_count).map_err(|why| Error::corruption(loc(), why))?;
    pages.sort_unstable();
    let mut listed = set.free.clone();
    listed.sort_unstable();
    if pages.iter().any(|id| listed.binary_search(id).is_err()) {
        return Err(Error::corruption(
            loc(),
            "the chain's pages are not on its list",
        ));
    }
    Ok((set, pages))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_io::MemDevice;

    fn shape(free: Vec<PageId>, page_count: u64) -> Shape {
        Shape {
            root: 2,
            height: 0,
            page_count,
            free,
            clean: vec![30, 31],
            spare: vec![(40, 5)],
            level_runs: vec![None, Some((50, 8))],
        }
    }

    fn write_all(dev: &MemDevice, images: &[(PageId, AlignedBuf)], ps: usize) {
        for (id, b) in images {
            dev.write_at(b, id * ps as u64).unwrap();
        }
    }

    #[test]
    fn nothing_to_keep_needs_no_chain() {
        let mut s = Shape {
            clean: vec![],
            spare: vec![],
            level_runs: vec![None],
            ..shape(vec![], 10)
        };
        let (at, images) = chain(&mut s, 1024);
        assert_eq!(
            (at, images.len(), s.page_count),
            (ChainRef::default(), 0, 10)
        );
    }

    #[test]
    fn round_trip_through_a_multi_page_chain_of_free_ids() {
        let ps = 1024;
        // 302 free ids need three 992-byte pages.
        let free: Vec<PageId> = (100..400).collect();
        let mut s = shape(free, 400);
        let before = s.clone();
        let (at, images) = chain(&mut s, ps);
        assert_eq!(s, before, "enough free ids: nothing added");
        assert_eq!(images.len(), 3);
        let chain_ids: Vec<PageId> = images.iter().map(|(id, _)| *id).collect();
        assert!(chain_ids.iter().all(|id| s.free.contains(id)));
        let dev = MemDevice::with_block_size(ps).unwrap();
        write_all(&dev, &images, ps);
        let (got, pages) = read(&dev, at, s.page_count, ps).unwrap();
        assert_eq!(pages, chain_ids);
        assert_eq!(got, FreeSpace::of(&s));
        // Reopened, the chain's pages are tree-only and the rest clean;
        // a settled checkpoint leaves the same split.
        let mut reopened = shape(vec![], 400);
        got.install(&mut reopened, &pages);
        assert_eq!(reopened.free, chain_ids);
        assert_eq!(reopened.clean.len(), 302 - 3);
        assert!(!reopened.clean.iter().any(|id| chain_ids.contains(id)));
        settle(&mut s, &images);
        assert_eq!((s.free.len(), s.clean.len()), (3, 299));
    }

    #[test]
    fn a_short_free_list_grows_by_fresh_ids_that_stay_free() {
        let ps = 1024;
        let mut s = Shape {
            clean: vec![],
            ..shape(vec![], 60)
        };
        let (at, images) = chain(&mut s, ps);
        assert_eq!(s.page_count, 61);
        assert_eq!(s.free, vec![60]);
        assert_eq!(images[0].0, 60);
        let dev = MemDevice::with_block_size(ps).unwrap();
        write_all(&dev, &images, ps);
        let (got, _) = read(&dev, at, s.page_count, ps).unwrap();
        assert_eq!(got, FreeSpace::of(&s));
    }

    #[test]
    fn damage_is_a_typed_error() {
        let ps = 1024;
        let mut s = shape((100..400).collect(), 400);
        let (at, images) = chain(&mut s, ps);
        let dev = MemDevice::with_block_size(ps).unwrap();
        write_all(&dev, &images, ps);
        // A flipped payload byte: checksum.
        let (id, mut b) = images[1].clone();
        b[100] ^= 1;
        dev.write_at(&b, id * ps as u64).unwrap();
        assert!(matches!(
            read(&dev, at, 400, ps),
            Err(Error::Corruption { .. })
        ));
        write_all(&dev, &images, ps);
        // A length the chain does not have, a head past the file.
        let longer = ChainRef {
            len: at.len + 8,
            ..at
        };
        assert!(read(&dev, longer, 400, ps).is_err());
        assert!(read(&dev, ChainRef { head: 500, ..at }, 400, ps).is_err());
        assert!(read(&dev, at, 400, ps).is_ok());
        // A meta page may claim a file of 2^50 pages and a chain to match:
        // the first page that disagrees ends the read, before anything of
        // that size is allocated.
        let huge = ChainRef { len: 1 << 58, ..at };
        assert!(matches!(
            read(&dev, huge, 1 << 50, ps),
            Err(Error::Corruption { .. })
        ));
    }

    #[test]
    fn decode_rejects_overlaps_and_ids_outside_the_file() {
        let ok = FreeSpace {
            free: vec![3, 9],
            spare: vec![(10, 4)],
            level_runs: vec![Some((20, 5)), None],
        };
        assert_eq!(FreeSpace::decode(&ok.encode(), 25), Ok(ok.clone()));
        assert!(FreeSpace::decode(&ok.encode(), 24).is_err());
        let twice = FreeSpace {
            free: vec![3, 11],
            ..ok.clone()
        };
        assert!(FreeSpace::decode(&twice.encode(), 25).is_err());
        let meta_page = FreeSpace {
            free: vec![1],
            ..ok.clone()
        };
        assert!(FreeSpace::decode(&meta_page.encode(), 25).is_err());
        let mut cut = ok.encode();
        cut.pop();
        assert!(FreeSpace::decode(&cut, 25).is_err());
    }
}
