//! The superblock: a volume's fixed geometry, one checksummed block.
//!
//! Written once, at creation, and never again; every later change of
//! state lives in the data log and the block map. Layout
//! (`docs/format/volume.md`), little-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 0..8 | magic `FRVOLUME` |
//! | 8..12 | format (1) |
//! | 12..16 | block size in bytes (4096) |
//! | 16..24 | logical size in bytes |
//! | 24..28 | blocks per segment |
//! | 28..32 | segments in the data log |
//! | 32..36 | block map kind (0 RASK, 1 per-block) |
//! | 36..40 | CRC32C of bytes 0..36 |
//!
//! The rest of the block is zero. A superblock that fails its checksum or
//! any geometry rule is refused as corrupt, never guessed around.

use crate::block_map::MapKind;
use crate::error::{Result, VolumeError};

const MAGIC: &[u8; 8] = b"FRVOLUME";
pub const FORMAT: u32 = 1;
/// Bytes the encoded superblock occupies before zero padding.
pub const ENCODED_LEN: usize = 40;
/// The one block size the volume maps (the map's unit and the log's).
pub const BLOCK_SIZE: u32 = 4096;
/// Largest logical size: the map's 48-bit physical block numbers bound the
/// data log, and the log is at most twice the logical size.
pub const MAX_LOGICAL_BYTES: u64 = 1 << 56;

/// A volume's geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Superblock {
    pub block_size: u32,
    pub logical_bytes: u64,
    pub segment_blocks: u32,
    pub segments: u32,
    pub map: MapKind,
}

impl Superblock {
    /// The geometry for a volume of `logical_bytes` in segments of
    /// `segment_bytes`, with `reserve` (a fraction of the logical size, at
    /// least `min_spare` segments) left over for the log's garbage.
    pub fn plan(
        logical_bytes: u64,
        segment_bytes: u64,
        reserve: f64,
        map: MapKind,
    ) -> Result<Self> {
        let bs = BLOCK_SIZE as u64;
        if logical_bytes == 0
            || !logical_bytes.is_multiple_of(bs)
            || logical_bytes > MAX_LOGICAL_BYTES
        {
            return Err(VolumeError::InvalidGeometry(format!(
                "size {logical_bytes} must be a positive multiple of {bs} bytes, at most {MAX_LOGICAL_BYTES}"
            )));
        }
        if segment_bytes < 16 * bs || !segment_bytes.is_multiple_of(bs) || segment_bytes > 1 << 30 {
            return Err(VolumeError::InvalidGeometry(format!(
                "segment size {segment_bytes} must be a multiple of {bs} bytes from 64 KiB to 1 GiB"
            )));
        }
        if !(0.05..=4.0).contains(&reserve) {
            return Err(VolumeError::InvalidGeometry(format!(
                "reserve {reserve} must be from 0.05 to 4 times the logical size"
            )));
        }
        let logical_segments = logical_bytes.div_ceil(segment_bytes);
        let spare = ((logical_segments as f64 * reserve).ceil() as u64).max(MIN_SPARE_SEGMENTS);
        let segments = logical_segments + spare;
        let segments = u32::try_from(segments).map_err(|_| {
            VolumeError::InvalidGeometry(format!(
                "{segments} segments of {segment_bytes} bytes; use larger segments"
            ))
        })?;
        let sb = Self {
            block_size: BLOCK_SIZE,
            logical_bytes,
            segment_blocks: (segment_bytes / bs) as u32,
            segments,
            map,
        };
        sb.validate()?;
        Ok(sb)
    }

    pub fn logical_blocks(&self) -> u64 {
        self.logical_bytes / self.block_size as u64
    }

    pub fn segment_bytes(&self) -> u64 {
        self.segment_blocks as u64 * self.block_size as u64
    }

    /// Bytes of the data log when every segment is in use.
    pub fn physical_bytes(&self) -> u64 {
        self.segments as u64 * self.segment_bytes()
    }

    pub fn encode(&self) -> [u8; ENCODED_LEN] {
        let mut out = [0u8; ENCODED_LEN];
        out[0..8].copy_from_slice(MAGIC);
        out[8..12].copy_from_slice(&FORMAT.to_le_bytes());
        out[12..16].copy_from_slice(&self.block_size.to_le_bytes());
        out[16..24].copy_from_slice(&self.logical_bytes.to_le_bytes());
        out[24..28].copy_from_slice(&self.segment_blocks.to_le_bytes());
        out[28..32].copy_from_slice(&self.segments.to_le_bytes());
        let kind: u32 = match self.map {
            MapKind::Rask => 0,
            MapKind::PerBlock => 1,
        };
        out[32..36].copy_from_slice(&kind.to_le_bytes());
        let crc = crc32c::crc32c(&out[..36]);
        out[36..40].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes and checks a superblock; never panics on any input.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let bad = |reason: String| VolumeError::corrupt("volume superblock", reason);
        let head = bytes
            .get(..ENCODED_LEN)
            .ok_or_else(|| bad(format!("{} bytes, need {ENCODED_LEN}", bytes.len())))?;
        if &head[0..8] != MAGIC {
            return Err(bad("bad magic".into()));
        }
        let u32_at = |at: usize| {
            let mut b = [0u8; 4];
            b.copy_from_slice(&head[at..at + 4]);
            u32::from_le_bytes(b)
        };
        let mut b8 = [0u8; 8];
        b8.copy_from_slice(&head[16..24]);
        let crc = u32_at(36);
        if crc != crc32c::crc32c(&head[..36]) {
            return Err(bad("checksum mismatch".into()));
        }
        let format = u32_at(8);
        if format != FORMAT {
            return Err(bad(format!("format {format}; this build reads {FORMAT}")));
        }
        let map = match u32_at(32) {
            0 => MapKind::Rask,
            1 => MapKind::PerBlock,
            k => return Err(bad(format!("unknown block map kind {k}"))),
        };
        let sb = Self {
            block_size: u32_at(12),
            logical_bytes: u64::from_le_bytes(b8),
            segment_blocks: u32_at(24),
            segments: u32_at(28),
            map,
        };
        sb.validate().map_err(|e| bad(e.to_string()))?;
        Ok(sb)
    }

    fn validate(&self) -> Result<()> {
        let bad = |s: String| Err(VolumeError::InvalidGeometry(s));
        if self.block_size != BLOCK_SIZE {
            return bad(format!(
                "block size {} (only {BLOCK_SIZE})",
                self.block_size
            ));
        }
        if self.logical_bytes == 0
            || !self.logical_bytes.is_multiple_of(BLOCK_SIZE as u64)
            || self.logical_bytes > MAX_LOGICAL_BYTES
        {
            return bad(format!("logical size {}", self.logical_bytes));
        }
        if self.segment_blocks < 16 || self.segment_blocks > (1 << 18) {
            return bad(format!("{} blocks per segment", self.segment_blocks));
        }
        let logical_segments = self.logical_bytes.div_ceil(self.segment_bytes());
        if (self.segments as u64) < logical_segments + MIN_SPARE_SEGMENTS {
            return bad(format!(
                "{} segments cannot hold {logical_segments} logical segments and {MIN_SPARE_SEGMENTS} spare",
                self.segments
            ));
        }
        if self.segments as u64 * self.segment_blocks as u64
            >= ferrite_rask::PhysicalRun::BLOCK_SPACE
        {
            return bad("the data log passes the map's 48-bit block space".into());
        }
        Ok(())
    }
}

/// Spare segments beyond the logical size, whatever the reserve: one for
/// the client head, one for the reclaimer's head, two to reclaim into.
pub const MIN_SPARE_SEGMENTS: u64 = 4;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn plan_round_trips_and_refuses_bad_sizes() {
        let sb = Superblock::plan(1 << 30, 64 << 20, 0.25, MapKind::Rask).unwrap();
        assert_eq!(sb.segments, 16 + 4);
        assert_eq!(Superblock::decode(&sb.encode()).unwrap(), sb);
        assert!(Superblock::plan(0, 64 << 20, 0.25, MapKind::Rask).is_err());
        assert!(Superblock::plan(4097, 64 << 20, 0.25, MapKind::Rask).is_err());
        assert!(Superblock::plan(1 << 30, 4096, 0.25, MapKind::Rask).is_err());
        assert!(Superblock::plan(1 << 30, 64 << 20, 0.0, MapKind::Rask).is_err());
        // A small volume still gets its minimum of spare segments.
        let small = Superblock::plan(1 << 20, 1 << 20, 0.25, MapKind::PerBlock).unwrap();
        assert_eq!(small.segments, 1 + MIN_SPARE_SEGMENTS as u32);
    }

    #[test]
    fn a_flipped_bit_is_corruption() {
        let img = Superblock::plan(1 << 30, 1 << 20, 0.25, MapKind::Rask)
            .unwrap()
            .encode();
        for i in 0..ENCODED_LEN {
            let mut bad = img;
            bad[i] ^= 0x10;
            assert!(matches!(
                Superblock::decode(&bad),
                Err(VolumeError::Corruption { .. })
            ));
        }
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Superblock::decode(&bytes);
        }
    }
}
