//! Slot formats: how a log stores its entries.
//!
//! A log picks one format when it is built: the smallest that holds every
//! entry it is built with. Ranges are kept as offsets from the log's base
//! block where they fit; values as 32-bit offsets from the log's base
//! image where the value type has images ([`RangeValue::to_image`]) and the
//! log's values lie within 2^32 - 1 of each other, as the runs a
//! log-structured backend hands out to writes of one region do.
//!
//! | format | range | value | bytes with an 8-byte value |
//! |---|---|---|---|
//! | narrow | two 16-bit offsets | 32-bit offset | 8 |
//! | packed | two 32-bit offsets | 32-bit offset | 12 |
//! | compact | two 32-bit offsets | the value | 16 |
//! | wide | the range | the value | 24 |
//!
//! Invariants: a slot is only written with what its format's
//! [`Slot::encode`] made of an entry (which refuses an entry that does not
//! fit), so reading it back returns that entry; the value
//! offset `u32::MAX` stands for the tombstone and no value is stored as
//! it. Slots are packed without padding and read unaligned.

use std::mem::size_of;

use crate::entry::Entry;
use crate::range::BlockRange;
use crate::value::RangeValue;

/// A log's slot format; its discriminant is what the log's shape stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    Narrow = 0,
    Packed = 1,
    Compact = 2,
    Wide = 3,
}

/// What a log's offsets count from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Bases {
    /// The block range offsets count from.
    pub block: u64,
    /// The image value offsets count from (formats that offset values).
    pub image: u64,
}

/// The stored value offset of a tombstone.
const TOMB: u32 = u32::MAX;

impl Format {
    /// The format stored as `bits` (the low two bits).
    pub fn from_bits(bits: u32) -> Self {
        match bits & 3 {
            0 => Format::Narrow,
            1 => Format::Packed,
            2 => Format::Compact,
            _ => Format::Wide,
        }
    }

    /// Bytes one slot takes.
    pub const fn slot_bytes<V>(self) -> usize {
        match self {
            Format::Narrow => 8,
            Format::Packed => 12,
            Format::Compact => 8 + size_of::<V>(),
            Format::Wide => 16 + size_of::<V>(),
        }
    }

    /// Whether values are stored as offsets from the base image.
    pub const fn offsets_values(self) -> bool {
        matches!(self, Format::Narrow | Format::Packed)
    }

    /// Bytes a log keeps before its first slot: the base image, for the
    /// formats that offset values.
    pub const fn prefix_bytes(self) -> usize {
        if self.offsets_values() {
            8
        } else {
            0
        }
    }

    /// Largest range offset the format stores; `None` if ranges are kept
    /// as they are.
    pub const fn max_offset(self) -> Option<u64> {
        match self {
            Format::Narrow => Some(u16::MAX as u64),
            Format::Packed | Format::Compact => Some(u32::MAX as u64),
            Format::Wide => None,
        }
    }

    /// Whether `e` can be stored in this format counted from `b`.
    #[cfg(test)]
    pub fn fits<V: RangeValue>(self, e: &Entry<V>, b: Bases) -> bool {
        with_slot!(self, |S| <S as Slot<V>>::encode(e, b).is_some())
    }

    /// The smallest format holding every one of `entries` of a leaf
    /// whose space is `[anchor, last]`, and its bases. Ranges count from
    /// the anchor, where appends land, unless the space spans 2^32 blocks
    /// or more; then from the lowest entry. No entries: compact (a value
    /// base needs a value to count from).
    pub fn choose<V: RangeValue>(anchor: u64, last: u64, entries: &[Entry<V>]) -> (Format, Bases) {
        let Some(first) = entries.first() else {
            return (
                Format::Compact,
                Bases {
                    block: anchor,
                    image: 0,
                },
            );
        };
        let (mut low, mut high) = (first.range.l(), first.range.r());
        // Smallest and largest image; None once a value has none.
        let mut images = Some((u64::MAX, 0u64));
        for e in entries {
            low = low.min(e.range.l());
            high = high.max(e.range.r());
            if !e.value.is_tombstone() {
                images = match (images, e.value.to_image()) {
                    (Some((lo, hi)), Some(i)) => Some((lo.min(i), hi.max(i))),
                    _ => None,
                };
            }
        }
        let block = if last - anchor > u32::MAX as u64 {
            low
        } else {
            anchor
        };
        // Tombstones alone store against any image base.
        let image = images.map(|(lo, hi)| if lo > hi { (0, 0) } else { (lo, hi) });
        let image = image
            .filter(|(lo, hi)| hi - lo < TOMB as u64)
            .map(|(lo, _)| lo);
        let span = high - block.min(low);
        let format = match (low >= block, span, image.is_some()) {
            (false, _, _) => Format::Wide,
            (true, s, true) if s <= u16::MAX as u64 => Format::Narrow,
            (true, s, true) if s <= u32::MAX as u64 => Format::Packed,
            (true, s, false) if s <= u32::MAX as u64 => Format::Compact,
            _ => Format::Wide,
        };
        let image = if format.offsets_values() {
            image.unwrap_or(0)
        } else {
            0
        };
        (format, Bases { block, image })
    }
}

/// `v` as an offset from `base`, if it has one that fits.
fn value_offset<V: RangeValue>(v: &V, base: u64) -> Option<u32> {
    if v.is_tombstone() {
        return Some(TOMB);
    }
    let d = v.to_image()?.checked_sub(base)?;
    (d < TOMB as u64).then_some(d as u32)
}

fn value_at<V: RangeValue>(base: u64, offset: u32) -> V {
    if offset == TOMB {
        V::TOMBSTONE
    } else {
        V::from_image(base.wrapping_add(offset as u64))
    }
}

/// One slot format's reading and writing.
///
/// # Safety
/// `bounds`, `load` and `write` take a pointer to `BYTES` bytes of one
/// slot; `load` and `bounds` read a slot `write` wrote with what `encode`
/// made with the same bases.
pub(crate) trait Slot<V: RangeValue> {
    const FORMAT: Format;

    /// An entry in stored form.
    type Stored: Copy;

    /// `e` in stored form counted from `b`; `None` if it does not fit.
    fn encode(e: &Entry<V>, b: Bases) -> Option<Self::Stored>;

    /// # Safety
    /// See the trait.
    unsafe fn write(p: *mut u8, s: Self::Stored);

    /// The slot's range bounds as stored: offsets from the base block,
    /// or blocks for the wide format.
    ///
    /// # Safety
    /// See the trait.
    unsafe fn bounds(p: *const u8) -> (u64, u64);

    /// # Safety
    /// See the trait.
    unsafe fn load(p: *const u8, b: Bases) -> Entry<V>;
}

/// `e`'s range as offsets from `b.block`, if both fit `max`.
fn offsets<V>(e: &Entry<V>, b: Bases, max: u64) -> Option<(u64, u64)> {
    let lo = e.range.l().checked_sub(b.block)?;
    let hi = e.range.r() - b.block;
    (hi <= max).then_some((lo, hi))
}

/// Reads `T` at byte `off` of `p`.
///
/// # Safety
/// `p + off .. p + off + size_of::<T>()` is readable and holds a `T`.
unsafe fn get<T: Copy>(p: *const u8, off: usize) -> T {
    // SAFETY: forwarded from the caller; slots carry no alignment.
    unsafe { p.add(off).cast::<T>().read_unaligned() }
}

/// Writes `v` at byte `off` of `p`.
///
/// # Safety
/// `p + off .. p + off + size_of::<T>()` is writable.
unsafe fn put<T: Copy>(p: *mut u8, off: usize, v: T) {
    // SAFETY: forwarded from the caller.
    unsafe { p.add(off).cast::<T>().write_unaligned(v) }
}

/// The two 32-bit range offsets packed and compact slots start with.
///
/// # Safety
/// `p` points at 8 readable bytes of such a slot.
unsafe fn offsets32(p: *const u8) -> (u64, u64) {
    // SAFETY: forwarded from the caller.
    let w: u64 = unsafe { get(p, 0) };
    (w & 0xffff_ffff, w >> 32)
}

/// Writes a packed or compact slot: the two range offsets, then `value`.
///
/// # Safety
/// `p` points at `8 + size_of::<T>()` writable bytes.
unsafe fn put_offsets_and<T: Copy>(p: *mut u8, (range, value): (u64, T)) {
    // SAFETY: forwarded from the caller.
    unsafe {
        put(p, 0, range);
        put(p, 8, value);
    }
}

pub(crate) struct NarrowSlot;
pub(crate) struct PackedSlot;
pub(crate) struct CompactSlot;
pub(crate) struct WideSlot;

fn range_at(b: Bases, lo: u64, hi: u64) -> BlockRange {
    BlockRange::ordered(b.block.wrapping_add(lo), b.block.wrapping_add(hi))
}

impl<V: RangeValue> Slot<V> for NarrowSlot {
    const FORMAT: Format = Format::Narrow;
    type Stored = u64;

    fn encode(e: &Entry<V>, b: Bases) -> Option<u64> {
        let (lo, hi) = offsets(e, b, u16::MAX as u64)?;
        let v = value_offset(&e.value, b.image)? as u64;
        Some(lo | (hi << 16) | (v << 32))
    }

    unsafe fn bounds(p: *const u8) -> (u64, u64) {
        // SAFETY: forwarded from the caller (see the trait).
        let w: u32 = unsafe { get(p, 0) };
        ((w & 0xffff) as u64, (w >> 16) as u64)
    }

    unsafe fn load(p: *const u8, b: Bases) -> Entry<V> {
        // SAFETY: forwarded from the caller.
        let w: u64 = unsafe { get(p, 0) };
        Entry {
            range: range_at(b, w & 0xffff, (w >> 16) & 0xffff),
            value: value_at(b.image, (w >> 32) as u32),
        }
    }

    unsafe fn write(p: *mut u8, s: u64) {
        // SAFETY: forwarded from the caller.
        unsafe { put(p, 0, s) };
    }
}

impl<V: RangeValue> Slot<V> for PackedSlot {
    const FORMAT: Format = Format::Packed;
    type Stored = (u64, u32);

    fn encode(e: &Entry<V>, b: Bases) -> Option<(u64, u32)> {
        let (lo, hi) = offsets(e, b, u32::MAX as u64)?;
        Some((lo | (hi << 32), value_offset(&e.value, b.image)?))
    }

    unsafe fn bounds(p: *const u8) -> (u64, u64) {
        // SAFETY: forwarded from the caller.
        unsafe { offsets32(p) }
    }

    unsafe fn load(p: *const u8, b: Bases) -> Entry<V> {
        // SAFETY: forwarded from the caller.
        let (lo, hi) = unsafe { <Self as Slot<V>>::bounds(p) };
        // SAFETY: forwarded from the caller.
        let v: u32 = unsafe { get(p, 8) };
        Entry {
            range: range_at(b, lo, hi),
            value: value_at(b.image, v),
        }
    }

    unsafe fn write(p: *mut u8, s: (u64, u32)) {
        // SAFETY: forwarded from the caller.
        unsafe { put_offsets_and(p, s) }
    }
}

impl<V: RangeValue> Slot<V> for CompactSlot {
    const FORMAT: Format = Format::Compact;
    type Stored = (u64, V);

    fn encode(e: &Entry<V>, b: Bases) -> Option<(u64, V)> {
        let (lo, hi) = offsets(e, b, u32::MAX as u64)?;
        Some((lo | (hi << 32), e.value))
    }

    unsafe fn bounds(p: *const u8) -> (u64, u64) {
        // SAFETY: forwarded from the caller.
        unsafe { offsets32(p) }
    }

    unsafe fn load(p: *const u8, b: Bases) -> Entry<V> {
        // SAFETY: forwarded from the caller.
        let (lo, hi) = unsafe { <Self as Slot<V>>::bounds(p) };
        Entry {
            range: range_at(b, lo, hi),
            // SAFETY: forwarded from the caller.
            value: unsafe { get(p, 8) },
        }
    }

    unsafe fn write(p: *mut u8, s: (u64, V)) {
        // SAFETY: forwarded from the caller.
        unsafe { put_offsets_and(p, s) }
    }
}

impl<V: RangeValue> Slot<V> for WideSlot {
    const FORMAT: Format = Format::Wide;
    type Stored = Entry<V>;

    fn encode(e: &Entry<V>, _: Bases) -> Option<Entry<V>> {
        Some(*e)
    }

    unsafe fn bounds(p: *const u8) -> (u64, u64) {
        // SAFETY: forwarded from the caller.
        unsafe { (get(p, 0), get(p, 8)) }
    }

    unsafe fn load(p: *const u8, _: Bases) -> Entry<V> {
        // SAFETY: forwarded from the caller.
        let (l, r) = unsafe { <Self as Slot<V>>::bounds(p) };
        Entry {
            range: BlockRange::ordered(l, r),
            // SAFETY: forwarded from the caller.
            value: unsafe { get(p, 16) },
        }
    }

    unsafe fn write(p: *mut u8, e: Entry<V>) {
        // SAFETY: forwarded from the caller.
        unsafe {
            put(p, 0, e.range.l());
            put(p, 8, e.range.r());
            put(p, 16, e.value);
        }
    }
}

/// Evaluates `$body` with `$s` naming the slot type of `$format`.
macro_rules! with_slot {
    ($format:expr, |$s:ident| $body:expr) => {
        match $format {
            $crate::slot::Format::Narrow => {
                type $s = $crate::slot::NarrowSlot;
                $body
            }
            $crate::slot::Format::Packed => {
                type $s = $crate::slot::PackedSlot;
                $body
            }
            $crate::slot::Format::Compact => {
                type $s = $crate::slot::CompactSlot;
                $body
            }
            $crate::slot::Format::Wide => {
                type $s = $crate::slot::WideSlot;
                $body
            }
        }
    };
}
pub(crate) use with_slot;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::PhysicalRun;

    fn e(l: u64, r: u64, file: u16, block: u64) -> Entry<PhysicalRun> {
        Entry::new(
            BlockRange::new(l, r).unwrap(),
            PhysicalRun::new(file, block).unwrap(),
        )
    }

    fn tomb(l: u64, r: u64) -> Entry<PhysicalRun> {
        Entry::new(BlockRange::new(l, r).unwrap(), PhysicalRun::TOMBSTONE)
    }

    fn round_trip<S: Slot<PhysicalRun>>(entries: &[Entry<PhysicalRun>], b: Bases) {
        let mut buf = vec![0u8; S::FORMAT.slot_bytes::<PhysicalRun>() + 3];
        for x in entries {
            assert!(S::FORMAT.fits(x, b), "{x:?} fits {:?}", S::FORMAT);
            // An odd offset: slots carry no alignment.
            let p = buf[3..].as_mut_ptr();
            let stored = S::encode(x, b).unwrap();
            // SAFETY: `buf` holds a slot's bytes past `p`.
            unsafe { S::write(p, stored) };
            // SAFETY: as above, written just now with `b`.
            assert_eq!(unsafe { S::load(p, b) }, *x);
            let (lo, hi) = unsafe { S::bounds(p) };
            let shift = if S::FORMAT == Format::Wide {
                0
            } else {
                b.block
            };
            assert_eq!((lo + shift, hi + shift), (x.range.l(), x.range.r()));
        }
    }

    #[test]
    fn every_format_reads_back_what_it_stored() {
        let base = 1 << 40;
        let run = PhysicalRun::new(2, 1000).unwrap().to_image().unwrap();
        let b = Bases {
            block: base,
            image: run,
        };
        let near = [
            e(base, base, 2, 1000),
            e(base + 5, base + 0xffff, 2, 1000 + (u32::MAX as u64 - 1)),
            tomb(base + 1, base + 2),
        ];
        round_trip::<NarrowSlot>(&near, b);
        let far = [
            near[0],
            e(base + 7, base + u32::MAX as u64, 2, 1001),
            near[2],
        ];
        round_trip::<PackedSlot>(&far, b);
        let other_file = [far[1], e(base, base + 9, 7, 3)];
        round_trip::<CompactSlot>(&other_file, b);
        round_trip::<WideSlot>(&[e(0, u64::MAX, 9, 1), tomb(3, 4)], b);
    }

    #[test]
    fn the_smallest_format_that_holds_every_entry_is_chosen() {
        let choose = |xs: &[Entry<PhysicalRun>]| Format::choose(100, 1 << 20, xs);
        assert_eq!(choose(&[]).0, Format::Compact);
        let (f, b) = choose(&[e(100, 200, 1, 50), e(300, 400, 1, 40)]);
        assert_eq!(f, Format::Narrow);
        let image = PhysicalRun::new(1, 40).unwrap().to_image().unwrap();
        assert_eq!(b, Bases { block: 100, image });
        assert_eq!(choose(&[e(100, 100 + (1 << 16), 1, 50)]).0, Format::Packed);
        // Values in two files are too far apart to offset.
        assert_eq!(
            choose(&[e(100, 200, 1, 50), e(300, 400, 2, 40)]).0,
            Format::Compact
        );
        assert_eq!(choose(&[e(100, 100 + (1 << 32), 1, 50)]).0, Format::Wide);
        // A leaf space too wide for offsets from the anchor counts from
        // the lowest entry.
        let (f, b) = Format::choose(100, u64::MAX, &[e(1 << 40, (1 << 40) + 9, 1, 50)]);
        assert_eq!((f, b.block), (Format::Narrow, 1 << 40));
        // Tombstones alone pack against any base.
        assert_eq!(choose(&[tomb(100, 105)]).0, Format::Narrow);
    }

    #[test]
    fn an_entry_outside_the_chosen_bases_does_not_fit() {
        let xs = [e(100, 200, 1, 50)];
        let (f, b) = Format::choose(100, 1 << 20, &xs);
        assert_eq!(f, Format::Narrow);
        assert!(f.fits(&e(150, 100 + 0xffff, 1, 50 + u32::MAX as u64 - 1), b));
        assert!(f.fits(&tomb(100, 101), b));
        assert!(!f.fits(&e(99, 150, 1, 60), b), "below the base block");
        assert!(!f.fits(&e(150, 100 + 0x10000, 1, 60), b), "past 16 bits");
        assert!(!f.fits(&e(150, 160, 1, 49), b), "below the base image");
        assert!(
            !f.fits(&e(150, 160, 1, 50 + u32::MAX as u64), b),
            "the tombstone's offset"
        );
        assert!(!f.fits(&e(150, 160, 3, 50), b), "another file");
    }
}
