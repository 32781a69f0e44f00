//! The meta page: which checkpoint the page file holds and where its tree
//! starts. Pages 0 and 1 hold two copies; checkpoint `e` writes copy
//! `e mod 2` first, so a torn meta write leaves the previous one intact,
//! then, once that is durable, the other copy (see `checkpoint`).
//! Version 2 adds the free-list chain (see `free_space`); a version-1 page
//! (no chain) still decodes, with no free ids. Version 3 records whether
//! the checkpoint wrote a carry-over (see `carry_over`), so recovery can
//! tell a damaged one from none; a page of an older version decodes as
//! [`Carried::Unrecorded`]. A page whose fields
//! describe no tree (a root outside the file, a file no offset reaches)
//! does not decode, like one whose checksum fails.

use ferrite_core::engine::ByteReader;
use ferrite_core::{Error, Result};

use crate::free_space::ChainRef;
use crate::page::{self, PageId};

const MAGIC: &[u8; 8] = b"FBTMETA1";
const VERSION: u32 = 3;
const LEN_V1: usize = 8 + 4 + 4 + 8 + 8 + 4 + 4 + 8;
const LEN: usize = LEN_V1 + 8 + 8;

/// The durable root of the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    pub page_size: u32,
    /// Checkpoint number; the WAL's epoch is the same number.
    pub epoch: u64,
    pub root: PageId,
    pub height: u32,
    /// Pages in the file (ids `0..page_count` exist).
    pub page_count: u64,
    /// The unused ids' chain (`ChainRef::default()`: none).
    pub free: ChainRef,
    /// Whether the checkpoint wrote a carry-over to slot `epoch % 2`.
    pub carried: Carried,
}

/// What a meta page says of its checkpoint's carry-over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carried {
    /// A page from before version 3, which does not say: the slot is
    /// replayed if it holds a valid carry-over of the epoch.
    Unrecorded,
    /// The checkpoint carried nothing; the slot holds an older epoch's.
    Nothing,
    /// The checkpoint wrote one, synced before this page: it must be there.
    Written,
}

impl Meta {
    pub fn encode(&self, out: &mut [u8]) {
        let mut v = Vec::with_capacity(LEN + 4);
        // An unrecorded carry-over is what version 2 means by the same
        // bytes, so a decoded page encodes back to itself.
        let (version, carried) = match self.carried {
            Carried::Unrecorded => (2u32, 0u32),
            Carried::Nothing => (VERSION, 0),
            Carried::Written => (VERSION, 1),
        };
        v.extend_from_slice(MAGIC);
        v.extend_from_slice(&version.to_le_bytes());
        v.extend_from_slice(&self.page_size.to_le_bytes());
        v.extend_from_slice(&self.epoch.to_le_bytes());
        v.extend_from_slice(&self.root.to_le_bytes());
        v.extend_from_slice(&self.height.to_le_bytes());
        v.extend_from_slice(&carried.to_le_bytes());
        v.extend_from_slice(&self.page_count.to_le_bytes());
        v.extend_from_slice(&self.free.head.to_le_bytes());
        v.extend_from_slice(&self.free.len.to_le_bytes());
        let crc = crc32c::crc32c(&v);
        v.extend_from_slice(&crc.to_le_bytes());
        out.fill(0);
        if let Some(d) = out.get_mut(..v.len()) {
            d.copy_from_slice(&v);
        }
    }

    /// Decodes a meta page; `None` if it is not a valid one.
    pub fn decode(b: &[u8]) -> Option<Self> {
        let version = u32::from_le_bytes(b.get(8..12)?.try_into().ok()?);
        let len = match version {
            1 => LEN_V1,
            2 | VERSION => LEN,
            _ => return None,
        };
        let body = b.get(..len)?;
        let crc = u32::from_le_bytes(b.get(len..len + 4)?.try_into().ok()?);
        if crc != crc32c::crc32c(body) {
            return None;
        }
        let mut r = ByteReader::new(body);
        if r.bytes(8)? != MAGIC || r.u32()? != version {
            return None;
        }
        let page_size = r.u32()?;
        let epoch = r.counter()?;
        let root = r.u64()?;
        let height = r.u32()?;
        let carried = match (version, r.u32()?) {
            (1 | 2, _) => Carried::Unrecorded,
            (_, 0) => Carried::Nothing,
            (_, 1) => Carried::Written,
            _ => return None,
        };
        let page_count = r.u64()?;
        let free = if version == 1 {
            ChainRef::default()
        } else {
            ChainRef {
                head: r.u64()?,
                len: r.u64()?,
            }
        };
        // A checkpoint writes a shape its tree can have: pages of a size
        // the engine makes, a root and free-list head among the file's
        // tree pages, a height that page headers can name (they keep a
        // page's level in one byte), and a file whose pages all have
        // offsets.
        let sized = page_size.is_power_of_two() && (512..=1 << 16).contains(&page_size);
        let tree_pages = 2..page_count;
        let shaped = sized
            && page::offset(page_count, page_size as usize).is_some()
            && tree_pages.contains(&root)
            && u64::from(height) < page_count
            && height <= u32::from(u8::MAX)
            && (free.head == 0 || tree_pages.contains(&free.head));
        shaped.then_some(Self {
            page_size,
            epoch,
            root,
            height,
            page_count,
            free,
            carried,
        })
    }

    /// Refuses a meta page that would not read back: an epoch at the
    /// counter limit (risen from a damaged one) or a shape recovery
    /// refuses. Written, it would leave the store to fall back to an
    /// older checkpoint, or to none.
    pub fn check_persistable(&self) -> Result<()> {
        let mut probe = [0u8; LEN + 4];
        self.encode(&mut probe);
        if Self::decode(&probe) == Some(*self) {
            return Ok(());
        }
        ferrite_core::engine::persistable_counter(self.epoch, "btree meta page")?;
        Err(Error::corruption(
            "btree meta page",
            format!("the checkpoint's meta page would not read back: {self:?}"),
        ))
    }

    /// The meta page slot this checkpoint is written to.
    pub fn slot(&self) -> PageId {
        self.epoch % 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let m = Meta {
            page_size: 4096,
            epoch: 9,
            root: 5,
            height: 3,
            page_count: 77,
            free: ChainRef { head: 70, len: 900 },
            carried: Carried::Written,
        };
        let mut b = vec![0u8; 4096];
        m.encode(&mut b);
        assert_eq!(Meta::decode(&b), Some(m));
        b[20] ^= 4;
        assert_eq!(Meta::decode(&b), None);
        assert_eq!(Meta::decode(&[0u8; 10]), None);
    }

    #[test]
    fn an_epoch_no_checkpoint_reaches_is_damage() {
        let mut m = Meta {
            page_size: 4096,
            epoch: ferrite_core::engine::COUNTER_LIMIT - 1,
            root: 5,
            height: 0,
            page_count: 8,
            free: ChainRef::default(),
            carried: Carried::Nothing,
        };
        let mut b = vec![0u8; 4096];
        m.encode(&mut b);
        assert_eq!(Meta::decode(&b), Some(m));
        // Checksummed, yet the next checkpoint's epoch would overflow.
        m.epoch = u64::MAX;
        m.encode(&mut b);
        assert_eq!(Meta::decode(&b), None);
    }

    #[test]
    fn only_meta_pages_that_read_back_are_persisted() {
        let mut m = Meta {
            page_size: 4096,
            epoch: ferrite_core::engine::COUNTER_LIMIT - 1,
            root: 5,
            height: 1,
            page_count: 8,
            free: ChainRef::default(),
            carried: Carried::Nothing,
        };
        m.check_persistable().unwrap();
        m.epoch += 1;
        assert!(matches!(
            m.check_persistable(),
            Err(Error::Corruption { .. })
        ));
        m.epoch = 3;
        m.root = 9;
        assert!(m.check_persistable().is_err(), "a root past the file");
    }

    #[test]
    fn a_shape_no_tree_has_does_not_decode() {
        let good = Meta {
            page_size: 4096,
            epoch: 3,
            root: 5,
            height: 2,
            page_count: 77,
            free: ChainRef { head: 70, len: 900 },
            carried: Carried::Written,
        };
        let edits: [fn(&mut Meta); 8] = [
            |m| m.root = 1,
            |m| m.root = 77,
            |m| m.height = 77,
            |m| {
                m.page_count = 1 << 40;
                m.height = 256;
            },
            |m| m.page_count = u64::MAX / 2,
            |m| m.page_size = 3000,
            |m| m.free.head = 1,
            |m| m.free.head = 200,
        ];
        let mut b = vec![0u8; 4096];
        good.encode(&mut b);
        assert_eq!(Meta::decode(&b), Some(good));
        for edit in edits {
            let mut m = good;
            edit(&mut m);
            m.encode(&mut b);
            assert_eq!(Meta::decode(&b), None, "{m:?}");
        }
    }

    #[test]
    fn a_version_1_page_decodes_without_a_free_list() {
        let mut v = Vec::new();
        v.extend_from_slice(MAGIC);
        v.extend_from_slice(&1u32.to_le_bytes());
        v.extend_from_slice(&4096u32.to_le_bytes());
        v.extend_from_slice(&3u64.to_le_bytes());
        v.extend_from_slice(&2u64.to_le_bytes());
        v.extend_from_slice(&0u32.to_le_bytes());
        v.extend_from_slice(&0u32.to_le_bytes());
        v.extend_from_slice(&9u64.to_le_bytes());
        let crc = crc32c::crc32c(&v);
        v.extend_from_slice(&crc.to_le_bytes());
        v.resize(4096, 0);
        let m = Meta::decode(&v).unwrap();
        assert_eq!((m.epoch, m.page_count, m.free), (3, 9, ChainRef::default()));
        assert_eq!(m.carried, Carried::Unrecorded);
    }

    #[test]
    fn the_carry_over_record_round_trips_and_older_pages_leave_it_unrecorded() {
        let mut m = Meta {
            page_size: 4096,
            epoch: 9,
            root: 5,
            height: 3,
            page_count: 77,
            free: ChainRef::default(),
            carried: Carried::Nothing,
        };
        let mut b = vec![0u8; 4096];
        for carried in [Carried::Unrecorded, Carried::Nothing, Carried::Written] {
            m.carried = carried;
            m.encode(&mut b);
            assert_eq!(Meta::decode(&b), Some(m));
            m.check_persistable().unwrap();
        }
        // Version 2 bytes: the same page, which does not say.
        assert_eq!(&b[8..12], &3u32.to_le_bytes());
        b[8..12].copy_from_slice(&2u32.to_le_bytes());
        let crc = crc32c::crc32c(&b[..LEN]);
        b[LEN..LEN + 4].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            Meta::decode(&b).map(|m| m.carried),
            Some(Carried::Unrecorded)
        );
        // A version-3 record other than 0 or 1 is damage.
        b[8..12].copy_from_slice(&3u32.to_le_bytes());
        b[36..40].copy_from_slice(&2u32.to_le_bytes());
        let crc = crc32c::crc32c(&b[..LEN]);
        b[LEN..LEN + 4].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(Meta::decode(&b), None);
    }
}
