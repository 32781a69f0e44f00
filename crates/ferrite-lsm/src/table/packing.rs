//! Compressed tables: how a table's data blocks are packed into fewer
//! bytes than their pages.
//!
//! A table is always built as whole-page blocks (`block`), and its index,
//! learned or sparse, speaks only of those: ordinals, block numbers and
//! the *logical* pages a block spans. Compression happens after that, one
//! block at a time: each block becomes a frame, the frames are written back
//! to back, and a [`Packing`] (kept with the table's properties) records
//! where each frame ends. So a learned model keeps predicting positions in
//! the uncompressed domain, as the SwiftKV paper's models do, and finding a
//! block costs one array look-up more than in an uncompressed table.
//!
//! A frame is `codec: u8 | payload | crc32c: u32`, the checksum over the
//! codec byte and payload. Codec 0 is the block as it is (a block that
//! does not shrink by an eighth is stored raw, as RocksDB does), 1 is an
//! lz4 block, 2 a zstd frame. Invariants: frames are contiguous from byte
//! 0 of the data region, `ends` is strictly ascending, and the last end
//! lies within the data pages; [`Packing::decode`] refuses anything else,
//! and [`unpack`] never panics on damaged bytes.

use ferrite_io::AlignedBuf;

use super::block::PAGE;

/// A frame's codec byte and checksum.
const FRAME_OVERHEAD: usize = 1 + 4;

/// How the data blocks of tables written from now on are stored. Tables
/// already written keep theirs; every table records its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    /// Blocks as they are: one or more whole pages each.
    None,
    /// lz4 (the `lz4_flex` block format): fast enough to cost little on a
    /// read that goes to the device.
    #[default]
    Lz4,
    /// zstd at this level (1–22; 3 is zstd's default): fewer bytes, more
    /// CPU per block read.
    Zstd(i32),
}

impl Compression {
    /// The table codec byte: 0 for none.
    pub fn codec(self) -> u8 {
        match self {
            Compression::None => CODEC_RAW,
            Compression::Lz4 => CODEC_LZ4,
            Compression::Zstd(_) => CODEC_ZSTD,
        }
    }
}

impl std::str::FromStr for Compression {
    type Err = String;

    /// `none`, `lz4`, `zstd` or `zstd:LEVEL`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Compression::None),
            "lz4" => Ok(Compression::Lz4),
            "zstd" => Ok(Compression::Zstd(3)),
            _ => match s.strip_prefix("zstd:").map(str::parse::<i32>) {
                Some(Ok(level)) if (1..=22).contains(&level) => Ok(Compression::Zstd(level)),
                _ => Err(format!(
                    "unknown compression {s:?}: none, lz4, zstd or zstd:LEVEL (1-22)"
                )),
            },
        }
    }
}

impl std::fmt::Display for Compression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Compression::None => f.write_str("none"),
            Compression::Lz4 => f.write_str("lz4"),
            Compression::Zstd(level) => write!(f, "zstd:{level}"),
        }
    }
}

pub const CODEC_RAW: u8 = 0;
pub const CODEC_LZ4: u8 = 1;
pub const CODEC_ZSTD: u8 = 2;

/// Where each block's frame ends in a compressed table's data region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packing {
    /// The codec the table was written with (a frame may still be raw).
    pub codec: u8,
    /// Pages the blocks span uncompressed: what the index counts in.
    pub logical_pages: u32,
    /// Byte end of block `b`'s frame; block `b` starts where `b - 1` ends.
    pub ends: Vec<u32>,
}

impl Packing {
    /// Byte range of block `b`'s frame in the data region.
    pub fn frame(&self, b: usize) -> Option<(u64, u64)> {
        let end = *self.ends.get(b)? as u64;
        let start = match b {
            0 => 0,
            _ => *self.ends.get(b - 1)? as u64,
        };
        Some((start, end))
    }

    /// Bytes the packing holds in memory.
    pub fn memory_bytes(&self) -> usize {
        self.ends.capacity() * 4
    }

    /// `codec: u8 | logical pages: u32 | blocks: u32 | per block: end: u32`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.codec);
        out.extend_from_slice(&self.logical_pages.to_le_bytes());
        out.extend_from_slice(&(self.ends.len() as u32).to_le_bytes());
        for e in &self.ends {
            out.extend_from_slice(&e.to_le_bytes());
        }
    }

    /// A packing of exactly `b`, whose frames must fit in `data_pages`.
    pub fn decode(b: &[u8], data_pages: u32) -> Option<Self> {
        let codec = *b.first()?;
        if codec == CODEC_RAW || codec > CODEC_ZSTD {
            return None;
        }
        let u32_at = |at: usize| -> Option<u32> {
            Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
        };
        let logical_pages = u32_at(1)?;
        let n = u32_at(5)? as usize;
        if b.len() != 9usize.checked_add(n.checked_mul(4)?)? || n == 0 {
            return None;
        }
        let mut ends = Vec::with_capacity(n);
        let mut prev = 0u32;
        for i in 0..n {
            let e = u32_at(9 + 4 * i)?;
            if (e as usize) < prev as usize + FRAME_OVERHEAD {
                return None;
            }
            ends.push(e);
            prev = e;
        }
        let room = data_pages as u64 * PAGE as u64;
        (prev as u64 <= room && logical_pages as usize >= n).then_some(Self {
            codec,
            logical_pages,
            ends,
        })
    }
}

/// Reusable buffers of a builder that packs table after table.
#[derive(Default)]
pub struct Packer {
    frame: Vec<u8>,
    zstd: Option<zstd::bulk::Compressor<'static>>,
}

impl Packer {
    /// Packs `data` (whole-page blocks starting at the pages in `starts`)
    /// into `out`, zero-padded to whole pages, and says where each frame
    /// ends. `Err` only when zstd itself fails, which the caller answers by
    /// writing the table uncompressed.
    pub fn pack(
        &mut self,
        compression: Compression,
        data: &[u8],
        starts: &[u32],
        out: &mut Vec<u8>,
    ) -> std::io::Result<Packing> {
        out.clear();
        let logical_pages = (data.len() / PAGE) as u32;
        let mut ends = Vec::with_capacity(starts.len());
        for (b, &start) in starts.iter().enumerate() {
            let end = starts.get(b + 1).copied().unwrap_or(logical_pages);
            let block = &data[start as usize * PAGE..end as usize * PAGE];
            self.compress(compression, block)?;
            // Raw unless the block shrinks by at least an eighth: less
            // saves too few bytes to pay for decompressing it on every
            // read.
            let (codec, payload) = if self.frame.len() <= block.len() - block.len() / 8 {
                (compression.codec(), self.frame.as_slice())
            } else {
                (CODEC_RAW, block)
            };
            let at = out.len();
            out.push(codec);
            out.extend_from_slice(payload);
            let crc = crc32c::crc32c(&out[at..]);
            out.extend_from_slice(&crc.to_le_bytes());
            ends.push(out.len() as u32);
        }
        out.resize(out.len().div_ceil(PAGE) * PAGE, 0);
        Ok(Packing {
            codec: compression.codec(),
            logical_pages,
            ends,
        })
    }

    fn compress(&mut self, compression: Compression, block: &[u8]) -> std::io::Result<()> {
        let f = &mut self.frame;
        match compression {
            Compression::None => {
                f.clear();
                f.extend_from_slice(block);
            }
            Compression::Lz4 => {
                f.resize(lz4_flex::block::get_maximum_output_size(block.len()), 0);
                let n = lz4_flex::block::compress_into(block, f)
                    .map_err(|e| std::io::Error::other(e.to_string()))?;
                f.truncate(n);
            }
            Compression::Zstd(level) => {
                let z = match &mut self.zstd {
                    Some(z) => z,
                    none => none.insert(zstd::bulk::Compressor::new(level)?),
                };
                z.set_compression_level(level)?;
                f.resize(zstd::zstd_safe::compress_bound(block.len()), 0);
                let n = z.compress_to_buffer(block, f.as_mut_slice())?;
                f.truncate(n);
            }
        }
        Ok(())
    }
}

/// The block a frame holds, `pages` whole pages long, or why not.
pub fn unpack(frame: &[u8], pages: u32) -> Result<AlignedBuf, &'static str> {
    let len = pages as usize * PAGE;
    let split = frame
        .len()
        .checked_sub(4)
        .filter(|&s| s >= 1)
        .ok_or("frame too short")?;
    let (body, crc) = frame.split_at(split);
    let crc = u32::from_le_bytes(crc.try_into().map_err(|_| "frame too short")?);
    if crc32c::crc32c(body) != crc {
        return Err("frame checksum mismatch");
    }
    let (codec, payload) = (body[0], &body[1..]);
    let mut out = AlignedBuf::zeroed(len);
    let n = match codec {
        CODEC_RAW => {
            if payload.len() != len {
                return Err("raw frame of the wrong length");
            }
            out.copy_from_slice(payload);
            len
        }
        CODEC_LZ4 => lz4_flex::block::decompress_into(payload, &mut out)
            .map_err(|_| "lz4 frame does not decompress")?,
        CODEC_ZSTD => zstd::bulk::decompress_to_buffer(payload, &mut out)
            .map_err(|_| "zstd frame does not decompress")?,
        _ => return Err("unknown frame codec"),
    };
    if n != len {
        return Err("frame decompresses to the wrong length");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pages_of(blocks: &[Vec<u8>]) -> (Vec<u8>, Vec<u32>) {
        let mut data = Vec::new();
        let mut starts = Vec::new();
        for b in blocks {
            starts.push((data.len() / PAGE) as u32);
            data.extend_from_slice(b);
        }
        (data, starts)
    }

    fn block(seed: u8, pages: usize, random: bool) -> Vec<u8> {
        let mut x = seed as u64 | 1;
        (0..pages * PAGE)
            .map(|i| {
                if random {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                } else {
                    (i / 64) as u8 ^ seed
                }
            })
            .collect()
    }

    #[test]
    fn every_codec_round_trips_and_incompressible_blocks_stay_raw() {
        let blocks = vec![block(1, 1, false), block(2, 1, true), block(3, 3, false)];
        let (data, starts) = pages_of(&blocks);
        for c in [Compression::Lz4, Compression::Zstd(3), Compression::None] {
            let mut out = Vec::new();
            let p = Packer::default().pack(c, &data, &starts, &mut out).unwrap();
            assert_eq!(out.len() % PAGE, 0);
            assert_eq!(p.logical_pages, 5);
            for (b, want) in blocks.iter().enumerate() {
                let (s, e) = p.frame(b).unwrap();
                let frame = &out[s as usize..e as usize];
                let expect_raw = c == Compression::None || b == 1;
                assert_eq!(frame[0] == CODEC_RAW, expect_raw, "{c} block {b}");
                let pages = (want.len() / PAGE) as u32;
                assert_eq!(&unpack(frame, pages).unwrap()[..], &want[..]);
                assert!(unpack(frame, pages + 1).is_err());
            }
            if c != Compression::None {
                assert!(out.len() < data.len(), "{c} saves pages");
                let mut enc = Vec::new();
                p.encode(&mut enc);
                let pages = (out.len() / PAGE) as u32;
                assert_eq!(Packing::decode(&enc, pages), Some(p.clone()));
                assert_eq!(Packing::decode(&enc, pages - 1), None);
                assert_eq!(Packing::decode(&enc[..enc.len() - 1], pages), None);
            }
        }
    }

    #[test]
    fn names_parse_and_print() {
        for s in ["none", "lz4", "zstd:3", "zstd:19"] {
            assert_eq!(s.parse::<Compression>().unwrap().to_string(), s);
        }
        assert_eq!("zstd".parse(), Ok(Compression::Zstd(3)));
        assert!("zstd:0".parse::<Compression>().is_err());
        assert!("snappy".parse::<Compression>().is_err());
    }

    proptest! {
        #[test]
        fn damaged_frames_are_refused_never_misread(
            seed in any::<u8>(),
            flip in any::<usize>(),
            cut in any::<usize>(),
            zstd in any::<bool>(),
        ) {
            let (data, starts) = pages_of(&[block(seed, 1, false)]);
            let c = if zstd { Compression::Zstd(1) } else { Compression::Lz4 };
            let mut out = Vec::new();
            let p = Packer::default().pack(c, &data, &starts, &mut out).unwrap();
            let (s, e) = p.frame(0).unwrap();
            let mut frame = out[s as usize..e as usize].to_vec();
            let at = flip % frame.len();
            frame[at] ^= 1 << (flip % 8);
            prop_assert!(unpack(&frame, 1).is_err());
            let short = &out[s as usize..s as usize + cut % (e - s) as usize];
            prop_assert!(unpack(short, 1).is_err());
        }

        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64), pages in 0u32..4) {
            let _ = Packing::decode(&bytes, pages);
            let _ = unpack(&bytes, pages);
        }
    }
}
