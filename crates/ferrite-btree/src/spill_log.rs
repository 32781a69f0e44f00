//! Where spilled pages live in the spill file, and which pages are there.
//!
//! The file is cut into stripes of [`STRIPE`] pages that alternate
//! between two regions:
//! - the *log*: page-sized slots handed out in address order, so a batch of
//!   spilled pages lands on consecutive slots and reaches the disk as one
//!   sequential write (per stripe it crosses) instead of one random write
//!   per page;
//! - the *mirror*: page `p` at its own place, as a sparse copy of the page
//!   file, for pages the log has no map entry for.
//!
//! The log's map (a slot number per page id) costs memory per page, so it
//! covers at most the page ids below `covered`, which the pool sizes from
//! its frames; the other pages go to the mirror, which costs one bit per
//! page. The map is made of chunks of equal size: the first is made with
//! the log (a page's worth, or less if `covered` needs less), the others
//! the pool gives it as the tree's page ids reach them
//! ([`SpillLog::add_chunk`]), out of frames it gives up, so a small tree's
//! map costs a few frames, not the most it could need; ids past the chunks
//! go to the mirror as ids past `covered` do.
//!
//! Pure bookkeeping, no I/O. Invariants:
//! - a spilled page is in exactly one place: a slot (`slot_of`) or the
//!   mirror (`mirror`), and no two pages map to the same slot;
//! - a slot is *taken* while a page maps to it, while a page spilled again
//!   has not yet had its new image written, or while an I/O on it is in
//!   flight (a *hold*); only free slots are handed out, so a slot is never
//!   written while another page's image in it may still be read;
//! - slots are handed out from a cursor that moves up through a ring of at
//!   most [`RING_FACTOR`] times the pages in slots (plus the batch), and
//!   wraps to slot 0 past it, so the log stays a small multiple of the
//!   pages in it; at that density the free slots ahead of the cursor mostly
//!   come in long runs. The ring also spans at most the cap plus a
//!   [`RING_SLACK`]th of it: a freed slot keeps its blocks in the file
//!   until the checkpoint truncates it, so the ring's span is the file's
//!   size, and near the cap the space matters more than the runs. A
//!   checkpoint empties both regions and the cursor starts again at 0.
//!
//! A page spilled again to the log gets a new slot and keeps the old one
//! until its new image is written ([`SpillLog::place`], then
//! [`SpillLog::finish`]): a failed write leaves it where it was.

use ferrite_io::AlignedBuf;
use smallvec::SmallVec;

use crate::page::PageId;

/// Pages per stripe of each region: long enough that a batch of sixteen
/// rarely crosses into the next log stripe (two writes instead of one),
/// short enough that the mirror keeps close to the page file's layout.
pub const STRIPE: u64 = 256;

/// The ring holds at most this many slots per page in the log: the
/// density of taken slots ahead of the cursor stays near
/// `1 / RING_FACTOR`, so a batch of sixteen pages mostly finds sixteen
/// consecutive free slots.
pub const RING_FACTOR: usize = 4;

/// The ring spans at most `cap + cap / RING_SLACK` slots: with the log
/// near its cap, a batch finds its slots in a few runs (two write
/// requests per batch of sixteen instead of one, measured), and the file
/// stays within a quarter of the most it may hold (see
/// `docs/results/space.md`).
pub const RING_SLACK: usize = 4;

/// The smallest ring, so a nearly empty log still writes long runs.
const MIN_RING: usize = 256;

/// Holds kept without a heap allocation: a few batches' writes and reads.
const INLINE_HOLDS: usize = 48;

/// A slot, as stored in `slot_of` (slot + 1; 0 means not in the log).
/// Two bytes keep the map small; the ring then spans at most
/// [`MAX_RING`] slots (256 MiB of 4 KiB pages): with more pages in the log
/// than a quarter of that its runs grow shorter, and pages that find no
/// free slot go to the mirror.
type Slot = u16;

/// Slots the ring may span.
const MAX_RING: u64 = Slot::MAX as u64;

/// Slots of the ring a log whose map covers `covered` ids may span.
fn ring_for(covered: u64) -> u64 {
    (RING_FACTOR as u64 * covered)
        .max(MIN_RING as u64)
        .min(MAX_RING)
}

/// Bytes of the first chunk of a log covering `covered` ids in chunks of
/// `chunk_bytes`.
fn first_chunk_bytes(covered: u64, chunk_bytes: usize) -> usize {
    let s = std::mem::size_of::<Slot>();
    usize::try_from(covered)
        .unwrap_or(usize::MAX)
        .saturating_mul(s)
        .min(chunk_bytes / s * s)
}

/// Chunks a log covering `covered` ids in chunks of `chunk_bytes` may
/// hold.
fn chunks_for(covered: u64, chunk_bytes: usize) -> usize {
    let first = first_chunk_bytes(covered, chunk_bytes) / std::mem::size_of::<Slot>();
    if first == 0 {
        return 0;
    }
    usize::try_from(covered.div_ceil(first as u64)).unwrap_or(usize::MAX)
}

/// Bytes a log covering `covered` ids in chunks of `chunk_bytes` makes
/// whatever its use: the ring's taken bits, the first chunk and the
/// chunks' list. What the pool sets aside for it.
pub fn own_bytes_for(covered: u64, chunk_bytes: usize) -> usize {
    ring_for(covered).div_ceil(64) as usize * 8
        + first_chunk_bytes(covered, chunk_bytes)
        + chunks_for(covered, chunk_bytes) * std::mem::size_of::<AlignedBuf>()
}

/// Where a spilled page's image is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spot {
    Slot(u64),
    Mirror(PageId),
}

impl Spot {
    /// The image's byte offset in the spill file, if it fits in 64 bits.
    pub fn offset(self, page_size: usize) -> Option<u64> {
        let (n, region) = match self {
            Spot::Mirror(id) => (id, 0),
            Spot::Slot(s) => (s, STRIPE),
        };
        (n / STRIPE)
            .checked_mul(2 * STRIPE)?
            .checked_add(region + n % STRIPE)?
            .checked_mul(page_size as u64)
    }
}

/// One page of a batch being spilled: where its new image goes, and where
/// its image was before (`None` if it was not spilled).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    pub id: PageId,
    pub to: Spot,
    before: Option<Spot>,
}

impl Placed {
    /// The slot the page leaves once its new image is written.
    fn old(&self) -> Option<u64> {
        match self.before {
            Some(Spot::Slot(s)) => Some(s),
            _ => None,
        }
    }
}

/// Which pages are spilled, and where.
#[derive(Debug, Default)]
pub struct SpillLog {
    /// By page id, in chunks of `per_chunk` ids (a [`Slot`] per id, native
    /// byte order): its slot + 1, or 0.
    slot_of: Vec<AlignedBuf>,
    per_chunk: usize,
    /// Bytes of the first chunk, which the log made (the others are the
    /// pool's frames).
    own_chunk: usize,
    /// One bit per page id: spilled to the mirror.
    mirror: Vec<u64>,
    /// One bit per slot: taken (see the module docs).
    taken: Vec<u64>,
    /// Slots with I/O in flight.
    holds: SmallVec<[Hold; INLINE_HOLDS]>,
    /// Page ids the log's map may cover (with chunks enough).
    covered: u64,
    /// Pages in slots, and in the mirror.
    in_slots: usize,
    in_mirror: usize,
    /// Slots whose bit is set.
    taken_slots: usize,
    /// Where the next batch starts looking.
    cursor: u64,
    /// One past the highest slot ever taken.
    extent: u64,
    /// The most pages that may be spilled (the caller's policy).
    pub cap: usize,
}

/// An I/O count on a slot, and whether the slot is freed when it ends.
#[derive(Debug, Clone, Copy)]
struct Hold {
    slot: u64,
    ios: u32,
    free_after: bool,
}

/// Sets bit `i` of `bits` to `on`; returns whether it changed.
fn set_bit(bits: &mut Vec<u64>, i: u64, on: bool) -> bool {
    let w = (i / 64) as usize;
    if w >= bits.len() {
        if !on {
            return false;
        }
        bits.resize(w + 1, 0);
    }
    let bit = 1u64 << (i % 64);
    let changed = (bits[w] & bit != 0) != on;
    if changed {
        bits[w] ^= bit;
    }
    changed
}

fn bit(bits: &[u64], i: u64) -> bool {
    bits.get((i / 64) as usize)
        .is_some_and(|w| w & (1 << (i % 64)) != 0)
}

impl SpillLog {
    /// A log whose map may cover page ids below `covered`, in chunks of
    /// `chunk_bytes`: the first made now, the others once given (ids past
    /// the chunks go to the mirror).
    pub fn new(cap: usize, covered: u64, chunk_bytes: usize) -> Self {
        // The ring's bits are made whole: a few KiB at most.
        let mut log = Self {
            cap,
            covered,
            taken: vec![0; ring_for(covered).div_ceil(64) as usize],
            ..Self::default()
        };
        let first = first_chunk_bytes(covered, chunk_bytes);
        if first > 0 {
            log.per_chunk = first / std::mem::size_of::<Slot>();
            // The list is made whole, so its size is known beforehand.
            log.slot_of = Vec::with_capacity(chunks_for(covered, chunk_bytes));
            log.slot_of.push(AlignedBuf::zeroed(first));
            log.own_chunk = first;
        }
        log
    }

    /// Page ids below this have a map entry.
    pub fn mapped(&self) -> u64 {
        ((self.slot_of.len() * self.per_chunk) as u64).min(self.covered)
    }

    /// Whether a chunk would give page `id` a map entry, or bring the map
    /// nearer to it: the map stops short of `id` and of `covered`.
    pub fn wants_chunk(&self, id: PageId) -> bool {
        let mapped = self.mapped();
        id >= mapped && mapped < self.covered
    }

    /// Extends the map by a chunk of `buf.len() / 2` ids (the first chunk
    /// sets the size; one of another size is refused and returned).
    pub fn add_chunk(&mut self, mut buf: AlignedBuf) -> Option<AlignedBuf> {
        let ids = buf.len() / std::mem::size_of::<Slot>();
        if ids == 0 || (self.per_chunk != 0 && ids != self.per_chunk) {
            return Some(buf);
        }
        self.per_chunk = ids;
        buf.fill(0);
        self.slot_of.push(buf);
        None
    }

    /// Where page `id`'s map entry is: its chunk and byte offset.
    fn entry(&self, id: PageId) -> Option<(usize, usize)> {
        let i = usize::try_from(id).ok()?;
        if id >= self.mapped() {
            return None;
        }
        let s = std::mem::size_of::<Slot>();
        Some((i / self.per_chunk, i % self.per_chunk * s))
    }

    fn read_entry(&self, (chunk, at): (usize, usize)) -> Slot {
        let c = &self.slot_of[chunk];
        Slot::from_ne_bytes([c[at], c[at + 1]])
    }

    /// Pages spilled.
    pub fn count(&self) -> usize {
        self.in_slots + self.in_mirror
    }

    pub fn has_room(&self) -> bool {
        self.count() < self.cap
    }

    /// Pages that may still be spilled before the cap.
    pub fn room(&self) -> usize {
        self.cap.saturating_sub(self.count())
    }

    pub fn contains(&self, id: PageId) -> bool {
        self.spot(id).is_some()
    }

    /// Where page `id`'s spilled image is.
    pub fn spot(&self, id: PageId) -> Option<Spot> {
        match self.slot(id) {
            Some(s) => Some(Spot::Slot(s)),
            None => bit(&self.mirror, id).then_some(Spot::Mirror(id)),
        }
    }

    fn slot(&self, id: PageId) -> Option<u64> {
        let s = self.read_entry(self.entry(id)?);
        (s != 0).then(|| u64::from(s - 1))
    }

    /// The spilled pages, ascending.
    pub fn ids(&self) -> Vec<PageId> {
        let mut ids: Vec<PageId> = (0..self.mapped())
            .filter(|&id| self.slot(id).is_some())
            .collect();
        for (w, &word) in self.mirror.iter().enumerate() {
            ids.extend(
                (0..64)
                    .filter(|b| word & (1 << b) != 0)
                    .map(|b| w as u64 * 64 + b),
            );
        }
        ids.sort_unstable();
        ids
    }

    /// Slots the log has ever spanned.
    pub fn extent(&self) -> u64 {
        self.extent
    }

    /// Heap bytes of the log beyond the chunks the pool gave it (which are
    /// frames it gave up): the ring's taken bits, the first chunk, the
    /// chunks' list, and any holds past the inline ones.
    pub fn heap_bytes(&self) -> usize {
        let holds = if self.holds.spilled() {
            self.holds.capacity() * std::mem::size_of::<Hold>()
        } else {
            0
        };
        self.slot_of.capacity() * std::mem::size_of::<AlignedBuf>()
            + self.own_chunk
            + self.taken.capacity() * 8
            + holds
    }

    /// Heap bytes of the mirror's bits (one per page id).
    pub fn mirror_bytes(&self) -> usize {
        self.mirror.capacity() * 8
    }

    fn is_taken(&self, slot: u64) -> bool {
        bit(&self.taken, slot)
    }

    fn set_taken(&mut self, slot: u64, on: bool) {
        if set_bit(&mut self.taken, slot, on) {
            if on {
                self.taken_slots += 1;
            } else {
                self.taken_slots -= 1;
            }
        }
    }

    fn hold(&mut self, slot: u64) {
        match self.holds.iter_mut().find(|h| h.slot == slot) {
            Some(h) => h.ios += 1,
            None => self.holds.push(Hold {
                slot,
                ios: 1,
                free_after: false,
            }),
        }
    }

    /// Frees `slot` now, or when the last I/O holding it ends.
    fn free(&mut self, slot: u64) {
        match self.holds.iter_mut().find(|h| h.slot == slot) {
            Some(h) => h.free_after = true,
            None => self.set_taken(slot, false),
        }
    }

    /// Ends one I/O holding `slot`.
    fn release_slot(&mut self, slot: u64) {
        if let Some(i) = self.holds.iter().position(|h| h.slot == slot) {
            self.holds[i].ios -= 1;
            if self.holds[i].ios == 0 {
                let h = self.holds.swap_remove(i);
                if h.free_after {
                    self.set_taken(slot, false);
                }
            }
        }
    }

    /// Where page `id`'s image is, held for a read until
    /// [`SpillLog::release`]: a slot is not handed to another page
    /// meanwhile, even if `id` leaves the log.
    pub fn hold_for_read(&mut self, id: PageId) -> Option<Spot> {
        let spot = self.spot(id)?;
        if let Spot::Slot(s) = spot {
            self.hold(s);
        }
        Some(spot)
    }

    /// Ends a read started with [`SpillLog::hold_for_read`].
    pub fn release(&mut self, spot: Spot) {
        if let Spot::Slot(s) = spot {
            self.release_slot(s);
        }
    }

    /// Sets page `id`'s map entry; callers only give slots to mapped ids.
    fn map_slot(&mut self, id: PageId, slot: Option<u64>) {
        let Some((chunk, at)) = self.entry(id) else {
            return;
        };
        let was = self.read_entry((chunk, at)) != 0;
        // Below `MAX_RING`, so slot + 1 fits.
        let v = slot.map_or(0, |s| s as Slot + 1);
        self.slot_of[chunk][at..at + 2].copy_from_slice(&v.to_ne_bytes());
        match (was, slot.is_some()) {
            (false, true) => self.in_slots += 1,
            (true, false) => self.in_slots -= 1,
            _ => {}
        }
    }

    fn set_mirror(&mut self, id: PageId, on: bool) {
        if set_bit(&mut self.mirror, id, on) {
            if on {
                self.in_mirror += 1;
            } else {
                self.in_mirror -= 1;
            }
        }
    }

    /// Decides where each of `ids` (distinct pages, none being spilled
    /// already) goes and records it at once: pages the map covers get a
    /// new slot each, held until [`SpillLog::finish`] (a page's old slot
    /// stays taken until then), the others their mirror place. Slots come
    /// from the cursor up, so they are consecutive where the ring is free.
    /// Returns the places in the order of `ids`.
    pub fn place(&mut self, ids: &[PageId]) -> Vec<Placed> {
        let mapped = self.mapped();
        let n = ids.iter().filter(|&&id| id < mapped).count();
        let slots = self.free_slots(n);
        let mut slots = slots.into_iter();
        let mut placed = Vec::with_capacity(ids.len());
        for &id in ids {
            let before = self.spot(id);
            let to = match (id < mapped).then(|| slots.next()).flatten() {
                Some(slot) => {
                    self.set_taken(slot, true);
                    self.hold(slot);
                    self.set_mirror(id, false);
                    self.map_slot(id, Some(slot));
                    self.extent = self.extent.max(slot + 1);
                    Spot::Slot(slot)
                }
                None => {
                    if let Some(Spot::Slot(old)) = before {
                        // Leaving the log: its slot is freed when written.
                        self.map_slot(id, None);
                        self.hold(old);
                    }
                    self.set_mirror(id, true);
                    Spot::Mirror(id)
                }
            };
            placed.push(Placed { id, to, before });
        }
        placed
    }

    /// `n` free slots from the cursor up, wrapping within the ring.
    fn free_slots(&mut self, n: usize) -> Vec<u64> {
        if n == 0 {
            return Vec::new();
        }
        let ring = ((RING_FACTOR * (self.in_slots + n))
            .min(self.cap.saturating_add(self.cap / RING_SLACK))
            .max(self.taken_slots + n)
            .max(MIN_RING) as u64)
            .min(MAX_RING);
        // Fewer than `ring - n` slots are taken, so at least `n` below
        // `ring` are free and one full turn from the cursor finds them;
        // unless the ring is at its largest, when the pages left without
        // a slot go to the mirror.
        let mut slots = Vec::with_capacity(n);
        let mut at = if self.cursor >= ring { 0 } else { self.cursor };
        for _ in 0..ring {
            if slots.len() == n {
                break;
            }
            if !self.is_taken(at) {
                slots.push(at);
            }
            at = if at + 1 >= ring { 0 } else { at + 1 };
        }
        self.cursor = at;
        slots
    }

    /// Ends the writes of a placed batch. Written (`ok`): each page stays
    /// where it was placed and its old slot is freed. Failed: each page goes
    /// back where it was (or out, if it was not spilled) and its new slot is
    /// freed. A page removed meanwhile stays out, and its slots are freed.
    pub fn finish(&mut self, placed: &[Placed], ok: bool) {
        for p in placed {
            let still = self.spot(p.id) == Some(p.to);
            if let Spot::Slot(s) = p.to {
                self.release_slot(s);
            } else if let Some(old) = p.old() {
                self.release_slot(old);
            }
            if still && !ok {
                // Back where it was.
                match p.to {
                    Spot::Slot(s) => {
                        self.map_slot(p.id, None);
                        self.free(s);
                    }
                    Spot::Mirror(_) => self.set_mirror(p.id, false),
                }
                match p.before {
                    Some(Spot::Slot(old)) => self.map_slot(p.id, Some(old)),
                    Some(Spot::Mirror(_)) => self.set_mirror(p.id, true),
                    None => {}
                }
                continue;
            }
            // Written, or removed meanwhile (then `remove` freed the new
            // slot, on the release above): the old slot is no one's.
            if let Some(old) = p.old() {
                self.free(old);
            }
        }
    }

    /// Takes page `id` out; its slot is freed once no I/O holds it.
    pub fn remove(&mut self, id: PageId) {
        match self.spot(id) {
            Some(Spot::Slot(slot)) => {
                self.map_slot(id, None);
                self.free(slot);
            }
            Some(Spot::Mirror(_)) => self.set_mirror(id, false),
            None => {}
        }
    }

    /// Empties both regions (after a checkpoint installed every page in
    /// them). No I/O may be in flight. The file keeps its extent: stale
    /// images are never read, and rewriting allocated blocks costs less
    /// than allocating them again.
    pub fn clear(&mut self) {
        for chunk in &mut self.slot_of {
            chunk.fill(0);
        }
        self.mirror.fill(0);
        self.taken.fill(0);
        self.holds.clear();
        self.in_slots = 0;
        self.in_mirror = 0;
        self.taken_slots = 0;
        self.cursor = 0;
    }
}

/// Groups placed pages into runs contiguous in the spill file, ascending
/// by offset: each run can be written as one request. Returns indices into
/// `placed`, or `None` if an offset does not fit in 64 bits.
pub fn runs(placed: &[Placed], page_size: usize) -> Option<Vec<(u64, Vec<usize>)>> {
    let mut order: Vec<(u64, usize)> = placed
        .iter()
        .enumerate()
        .map(|(i, p)| Some((p.to.offset(page_size)?, i)))
        .collect::<Option<_>>()?;
    order.sort_unstable();
    let ps = page_size as u64;
    let mut out: Vec<(u64, Vec<usize>)> = Vec::new();
    let mut end = 0u64;
    for (off, i) in order {
        match out.last_mut() {
            Some((_, run)) if off == end => run.push(i),
            _ => out.push((off, vec![i])),
        }
        end = off + ps;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PS: usize = 4096;

    /// A log whose map covers every id below `covered`, in 4 KiB chunks.
    fn mapped_log(cap: usize, covered: u64) -> SpillLog {
        let mut log = SpillLog::new(cap, covered, PS);
        while log.wants_chunk(covered - 1) {
            assert!(log.add_chunk(AlignedBuf::zeroed(PS)).is_none());
        }
        log
    }

    #[test]
    fn the_map_grows_by_chunks_and_pages_past_it_go_to_the_mirror() {
        // The first chunk comes with the log.
        let mut log = SpillLog::new(100, 5000, PS);
        assert_eq!(log.mapped(), 2048);
        assert!(!log.wants_chunk(2047) && log.wants_chunk(2048));
        assert_eq!(slots(&spill(&mut log, &[3, 2048])), [0, u64::MAX]);
        assert_eq!(log.spot(2048), Some(Spot::Mirror(2048)));
        // A chunk of another size is refused.
        assert!(log.add_chunk(AlignedBuf::zeroed(PS / 2)).is_some());
        assert!(log.add_chunk(AlignedBuf::zeroed(PS)).is_none());
        assert_eq!(log.mapped(), 4096);
        // A page newly mapped leaves the mirror for a slot when spilled
        // again.
        assert_eq!(slots(&spill(&mut log, &[2048])), [1]);
        assert_eq!(log.spot(2048), Some(Spot::Slot(1)));
        assert!(log.add_chunk(AlignedBuf::zeroed(PS)).is_none());
        // The map stops at `covered`, however many chunks it has.
        assert_eq!(log.mapped(), 5000);
        assert!(!log.wants_chunk(u64::MAX));
        assert_eq!(log.ids(), [3, 2048]);
        log.clear();
        assert_eq!((log.count(), log.spot(3)), (0, None));
        // A log covering less than a page's worth of ids has its whole map
        // at once, and needs no chunk.
        let log = SpillLog::new(100, 640, PS);
        assert_eq!((log.mapped(), log.wants_chunk(639)), (640, false));
        assert_eq!(log.heap_bytes(), own_bytes_for(640, PS));
    }

    fn slots(p: &[Placed]) -> Vec<u64> {
        p.iter()
            .map(|p| match p.to {
                Spot::Slot(s) => s,
                Spot::Mirror(_) => u64::MAX,
            })
            .collect()
    }

    fn spill(log: &mut SpillLog, ids: &[PageId]) -> Vec<Placed> {
        let p = log.place(ids);
        log.finish(&p, true);
        p
    }

    /// Batches of up to 16 distinct pages drawn from `0..pages`.
    fn batches(seed: u64, pages: u64) -> impl Iterator<Item = Vec<PageId>> {
        let mut x = seed;
        std::iter::repeat_with(move || {
            (0..16)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (x >> 33) % pages
                })
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect()
        })
    }

    #[test]
    fn stripes_alternate_between_the_mirror_and_the_log() {
        let page = |spot: Spot| spot.offset(PS).map(|o| o / PS as u64);
        let st = STRIPE;
        assert_eq!(page(Spot::Mirror(0)), Some(0));
        assert_eq!(page(Spot::Mirror(st - 1)), Some(st - 1));
        assert_eq!(page(Spot::Slot(0)), Some(st));
        assert_eq!(page(Spot::Slot(st - 1)), Some(2 * st - 1));
        assert_eq!(page(Spot::Mirror(st)), Some(2 * st));
        assert_eq!(page(Spot::Slot(st + 1)), Some(3 * st + 1));
        assert_eq!(Spot::Mirror(u64::MAX / 2).offset(PS), None);
    }

    #[test]
    fn a_batch_takes_consecutive_slots_from_the_cursor() {
        let mut log = mapped_log(100, 1000);
        assert_eq!(slots(&spill(&mut log, &[90, 3, 41])), [0, 1, 2]);
        assert_eq!(slots(&spill(&mut log, &[7, 8])), [3, 4]);
        assert_eq!(log.count(), 5);
        assert_eq!(log.spot(41), Some(Spot::Slot(2)));
        assert_eq!(log.ids(), [3, 7, 8, 41, 90]);
        assert_eq!(log.extent(), 5);
    }

    #[test]
    fn pages_past_the_map_go_to_the_mirror() {
        let mut log = mapped_log(100, 10);
        let p = spill(&mut log, &[12, 3, 10]);
        assert_eq!(
            p.iter().map(|p| p.to).collect::<Vec<_>>(),
            [Spot::Mirror(12), Spot::Slot(0), Spot::Mirror(10)]
        );
        assert_eq!(log.count(), 3);
        assert_eq!(log.ids(), [3, 10, 12]);
        log.remove(12);
        assert!(!log.contains(12));
        assert_eq!(log.count(), 2);
    }

    #[test]
    fn a_page_spilled_again_moves_and_frees_its_old_slot_once_written() {
        let mut log = mapped_log(100, 1000);
        spill(&mut log, &[5, 6]);
        let b = log.place(&[5]);
        assert_eq!(b[0].old(), Some(0));
        // Until the new image is written, the old slot is not handed out.
        assert!(log.is_taken(0));
        log.finish(&b, true);
        assert_eq!(log.spot(5), Some(Spot::Slot(2)));
        assert!(!log.is_taken(0));
        assert_eq!(log.count(), 2);
    }

    #[test]
    fn a_failed_write_leaves_pages_where_they_were() {
        let mut log = mapped_log(100, 20);
        spill(&mut log, &[5, 25]);
        let b = log.place(&[5, 9, 25, 30]);
        log.finish(&b, false);
        assert_eq!(log.spot(5), Some(Spot::Slot(0)), "back on its old image");
        assert_eq!(log.spot(25), Some(Spot::Mirror(25)), "still in the mirror");
        assert!(!log.contains(9) && !log.contains(30), "new pages stay out");
        assert_eq!(log.count(), 2);
        assert!(!log.is_taken(1) && !log.is_taken(2));
    }

    #[test]
    fn a_slot_held_by_a_read_is_not_handed_out_after_its_page_leaves() {
        let mut log = mapped_log(100, 1000);
        spill(&mut log, &[1, 2]);
        let spot = log.hold_for_read(1).unwrap();
        log.remove(1);
        log.cursor = 0;
        let b = spill(&mut log, &[3]);
        assert_ne!(b[0].to, spot, "the read still holds {spot:?}");
        log.release(spot);
        assert!(!log.is_taken(0));
    }

    #[test]
    fn a_page_removed_while_its_write_is_in_flight_stays_out() {
        let mut log = mapped_log(100, 1000);
        spill(&mut log, &[4]);
        let b = log.place(&[4]);
        log.remove(4);
        // Its new slot is still being written: not free yet.
        assert!(log.is_taken(1));
        log.finish(&b, true);
        assert!(!log.contains(4));
        assert_eq!(log.count(), 0);
        assert!(!log.is_taken(0) && !log.is_taken(1));
    }

    #[test]
    fn the_ring_stays_a_small_multiple_of_the_pages_in_it() {
        // One page spilled over and over: the cursor wraps within the
        // smallest ring.
        let mut log = mapped_log(10_000, 10_000);
        for _ in 0..10_000 {
            spill(&mut log, &[7]);
        }
        assert_eq!(log.count(), 1);
        assert!(log.extent() <= MIN_RING as u64, "{}", log.extent());
        // 1000 pages spilled again and again in batches of 16.
        let mut log = mapped_log(10_000, 10_000);
        for ids in batches(1, 1000).take(5_000) {
            spill(&mut log, &ids);
        }
        assert!(log.count() <= 1000);
        assert!(
            log.extent() <= (RING_FACTOR * 1016) as u64,
            "{}",
            log.extent()
        );
        // Beyond its chunks, the log holds the ring's bits the pool set
        // aside and a chunk list.
        assert!(
            log.heap_bytes() <= own_bytes_for(10_000, PS) + 8,
            "{}",
            log.heap_bytes()
        );
    }

    #[test]
    fn past_the_largest_ring_pages_go_to_the_mirror() {
        let mut log = mapped_log(usize::MAX, 100_000);
        let ids: Vec<PageId> = (0..70_000).collect();
        for chunk in ids.chunks(16) {
            spill(&mut log, chunk);
        }
        assert_eq!(log.count(), 70_000);
        let in_log = ids
            .iter()
            .filter(|&&id| matches!(log.spot(id), Some(Spot::Slot(_))))
            .count();
        assert_eq!(in_log, MAX_RING as usize);
        assert_eq!(log.extent(), MAX_RING);
        assert!(ids.iter().all(|&id| log.contains(id)));
    }

    #[test]
    fn batches_mostly_land_in_one_or_two_runs() {
        let mut log = mapped_log(10_000, 10_000);
        let (mut batches_seen, mut pieces) = (0, 0);
        for (round, ids) in batches(7, 1000).take(5_000).enumerate() {
            let p = spill(&mut log, &ids);
            if round >= 1_000 {
                batches_seen += 1;
                pieces += runs(&p, PS).unwrap().len();
            }
        }
        // A batch crosses at most one stripe boundary when its slots are
        // consecutive.
        let per = pieces as f64 / batches_seen as f64;
        assert!(per < 2.5, "{per} runs per batch");
    }

    #[test]
    fn runs_join_pages_contiguous_in_the_file() {
        let mk = |to| Placed {
            id: 0,
            to,
            before: None,
        };
        let st = STRIPE;
        let p = [
            mk(Spot::Slot(st - 1)),
            mk(Spot::Slot(3)),
            mk(Spot::Slot(4)),
            mk(Spot::Slot(st)),
            mk(Spot::Mirror(7)),
            mk(Spot::Mirror(8)),
        ];
        let r = runs(&p, PS).unwrap();
        let got: Vec<(u64, Vec<usize>)> = r.into_iter().map(|(o, v)| (o / PS as u64, v)).collect();
        // Mirror pages 7 and 8 lie together in the first stripe, slots 3
        // and 4 in the first log stripe, which the last slot of that stripe
        // ends; the next slot opens the second log stripe, past the second
        // mirror stripe.
        assert_eq!(
            got,
            [
                (7, vec![4, 5]),
                (st + 3, vec![1, 2]),
                (2 * st - 1, vec![0]),
                (3 * st, vec![3])
            ]
        );
    }

    #[test]
    fn clear_empties_the_log_and_restarts_the_cursor() {
        let mut log = mapped_log(100, 1000);
        spill(&mut log, &[1, 2, 3]);
        log.clear();
        assert_eq!(log.count(), 0);
        assert!(!log.contains(2));
        assert_eq!(slots(&spill(&mut log, &[8])), [0]);
        assert_eq!(log.extent(), 3);
    }

    #[test]
    fn the_ring_stays_within_a_quarter_past_the_cap() {
        // 1000 pages (the cap) spilled again and again in batches of 16:
        // the unbounded ring would span four times them.
        let mut log = mapped_log(1000, 10_000);
        for ids in batches(3, 1000).take(5_000) {
            spill(&mut log, &ids);
        }
        assert_eq!(log.count(), 1000);
        assert!(
            log.extent() <= (1000 + 1000 / RING_SLACK) as u64,
            "{}",
            log.extent()
        );
    }
}
