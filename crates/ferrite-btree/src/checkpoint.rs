//! Checkpoints: making the in-memory tree the durable one, atomically.
//!
//! The page file always holds one consistent checkpoint. A new one is
//! installed in five steps, each synced before the next:
//! 0. the page file is synced, so pages written straight to it since the
//!    last checkpoint (overflow values, bulk-loaded pages, all at ids the
//!    durable checkpoint does not use) are durable before anything refers
//!    to them;
//! 1. every dirty page, and the new meta page, go to the double-write file
//!    (header with epoch, count and checksum; then page images);
//! 2. the pages are written in place in the page file;
//! 3. the new meta page is written to its slot;
//! 4. the WAL is reset to the new epoch.
//!
//! Step 3 writes the meta page to its slot, syncs, then copies it to the
//! other slot, so at rest both slots name the newest checkpoint; the
//! double-write file is then emptied: at rest a store holds one copy of
//! its pages.
//!
//! A crash during step 2 or 3 tears the page file, so recovery redoes
//! steps 2–3 from the double-write file when it holds a complete, valid
//! checkpoint newer than the page file's meta. A crash during step 1 leaves
//! an invalid double-write file and an intact page file; the WAL (still in
//! the old epoch) then replays everything since the old checkpoint.
//! Recovery is idempotent: it may itself crash and run again.
//!
//! Both directions stream in chunks of pages (see [`chunk_pages`]), so a
//! checkpoint of any size holds one chunk in memory: the pages are gathered through a
//! callback (from the pool's frames or its spill file), and written in
//! place by reading the double-write file back.

use ferrite_core::engine::ByteReader;
use ferrite_core::{Error, Result};
use ferrite_io::{AlignedBuf, BlockDevice, WriteReq};

use crate::meta::Meta;
use crate::page::PageId;

const MAGIC: &[u8; 8] = b"FBTDWB01";

/// Most pages moved per write or read.
pub const MAX_CHUNK: usize = 256;

/// Pages per chunk for a pool of `frames` frames: a sixty-fourth of the
/// pool, from 16 to [`MAX_CHUNK`], so the buffer stays small beside it.
pub fn chunk_pages(frames: usize) -> usize {
    (frames / 64).clamp(16, MAX_CHUNK)
}

/// Fills a chunk's buffer with the sealed images of a group of pages, in
/// order.
pub type FillImages<'a> = dyn FnMut(&[PageId], &mut [u8]) -> Result<()> + 'a;

/// Writes a checkpoint of the pages `ids` (ascending), whose images
/// `fill(group, buf)` provides sealed a chunk at a time (the images of
/// `group`, in order, filling `buf`), and the meta page, through the
/// double-write file.
pub fn install(
    pages: &dyn BlockDevice,
    dwb: &dyn BlockDevice,
    ids: &[PageId],
    fill: &mut FillImages<'_>,
    meta: &Meta,
    chunk_pages: usize,
) -> Result<()> {
    let ps = meta.page_size as usize;
    pages.sync()?;
    let mut meta_page = AlignedBuf::zeroed(ps);
    meta.encode(&mut meta_page);
    // Step 1: header block, then the directory of ids, then the images,
    // then the meta page; the header goes last, and one sync covers all.
    let dir_len = (ids.len() * 8).div_ceil(ps) * ps;
    dwb.set_len(0)?;
    if dir_len > 0 {
        let mut dir = AlignedBuf::zeroed(dir_len);
        for (i, id) in ids.iter().enumerate() {
            if let Some(d) = dir.get_mut(i * 8..i * 8 + 8) {
                d.copy_from_slice(&id.to_le_bytes());
            }
        }
        dwb.write_at(&dir, ps as u64)?;
    }
    let images_at = (ps + dir_len) as u64;
    let mut crc = crc32c::crc32c(&meta_page);
    let mut chunk = AlignedBuf::zeroed(chunk_pages.min(ids.len().max(1)) * ps);
    for (ci, group) in ids.chunks(chunk_pages).enumerate() {
        let n = group.len() * ps;
        let images = chunk
            .get_mut(..n)
            .ok_or_else(|| Error::corruption("checkpoint", "chunk buffer too small"))?;
        fill(group, images)?;
        for (&id, page) in group.iter().zip(images.chunks(ps)) {
            crc = crc32c::crc32c_append(crc, &id.to_le_bytes());
            crc = crc32c::crc32c_append(crc, page);
        }
        dwb.write_at(&chunk[..n], images_at + (ci * chunk_pages * ps) as u64)?;
    }
    dwb.write_at(&meta_page, images_at + (ids.len() * ps) as u64)?;
    let mut header = AlignedBuf::zeroed(ps);
    let mut h = Vec::new();
    h.extend_from_slice(MAGIC);
    h.extend_from_slice(&meta.epoch.to_le_bytes());
    h.extend_from_slice(&(ids.len() as u64).to_le_bytes());
    h.extend_from_slice(&crc.to_le_bytes());
    let hcrc = crc32c::crc32c(&h);
    h.extend_from_slice(&hcrc.to_le_bytes());
    header[..h.len()].copy_from_slice(&h);
    dwb.write_at(&header, 0)?;
    dwb.sync()?;
    // Steps 2 and 3.
    write_in_place(pages, dwb, ids, images_at, &meta_page, meta, chunk_pages)?;
    release(dwb)
}

/// Empties the double-write file once the page file's meta names its
/// checkpoint: its images are then a second copy of pages the page file
/// holds, which at rest would double the store's bytes. Not synced: a file
/// that comes back after a crash holds a checkpoint no newer than the page
/// file's, which recovery ignores.
fn release(dwb: &dyn BlockDevice) -> Result<()> {
    if !dwb.is_empty() {
        dwb.set_len(0)?;
    }
    Ok(())
}

/// Copies the images of `ids` from the double-write file (at `images_at`)
/// to their places in the page file, then the meta page.
fn write_in_place(
    pages: &dyn BlockDevice,
    dwb: &dyn BlockDevice,
    ids: &[PageId],
    images_at: u64,
    meta_page: &[u8],
    meta: &Meta,
    chunk_pages: usize,
) -> Result<()> {
    let ps = meta.page_size as usize;
    let mut chunk = AlignedBuf::zeroed(chunk_pages.min(ids.len().max(1)) * ps);
    for (ci, group) in ids.chunks(chunk_pages).enumerate() {
        let n = group.len() * ps;
        dwb.read_at(&mut chunk[..n], images_at + (ci * chunk_pages * ps) as u64)?;
        // Runs of consecutive page ids become single writes, and a chunk's
        // writes go out as one overlapped batch.
        let mut reqs = Vec::new();
        let mut i = 0;
        while i < group.len() {
            let mut j = i + 1;
            while j < group.len() && group[j] == group[j - 1] + 1 {
                j += 1;
            }
            reqs.push(WriteReq::new(group[i] * ps as u64, &chunk[i * ps..j * ps]));
            i = j;
        }
        pages.write_batch(&reqs)?;
    }
    pages.sync()?;
    let mp = AlignedBuf::from_slice(meta_page);
    pages.write_at(&mp, meta.slot() * ps as u64)?;
    pages.sync()?;
    // The other slot gets a copy, so a flipped bit in either leaves the
    // newest checkpoint readable once the double-write file is emptied
    // (the older checkpoint's WAL is gone: falling back to it would lose
    // every write since). A copy torn by a crash leaves the first intact.
    pages.write_at(&mp, (1 - meta.slot()) * ps as u64)?;
    pages.sync()?;
    Ok(())
}

/// Reads the double-write file; if it holds a complete checkpoint newer
/// than `current`, redoes it in the page file and returns its meta. The
/// images are checked (one streaming pass) before any is written.
pub fn recover(
    pages: &dyn BlockDevice,
    dwb: &dyn BlockDevice,
    current: Option<&Meta>,
    ps: usize,
    chunk_pages: usize,
) -> Result<Option<Meta>> {
    let len = dwb.len() - dwb.len() % ps as u64;
    if len < 2 * ps as u64 {
        return Ok(None);
    }
    let mut head = AlignedBuf::zeroed(ps);
    dwb.read_at(&mut head, 0)?;
    let mut r = ByteReader::new(&head);
    let parsed = (|| {
        let magic = r.bytes(8)?;
        let epoch = r.u64()?;
        let count = r.u64()?;
        let crc = r.u32()?;
        let hcrc = r.u32()?;
        Some((magic == MAGIC, epoch, count, crc, hcrc))
    })();
    let Some((true, epoch, count, crc, hcrc)) = parsed else {
        return Ok(None);
    };
    if crc32c::crc32c(head.get(..28).unwrap_or_default()) != hcrc {
        return Ok(None);
    }
    if current.is_some_and(|m| m.epoch >= epoch) {
        return Ok(None);
    }
    let Ok(count) = usize::try_from(count) else {
        return Ok(None);
    };
    let dir_len = count.saturating_mul(8).div_ceil(ps).saturating_mul(ps);
    let need = ps as u64 + dir_len as u64 + (count as u64 + 1) * ps as u64;
    if len < need {
        return Ok(None);
    }
    let mut dir = AlignedBuf::zeroed(dir_len);
    if dir_len > 0 {
        dwb.read_at(&mut dir, ps as u64)?;
    }
    let ids: Vec<PageId> = (0..count)
        .map(|i| {
            let b = dir.get(i * 8..i * 8 + 8).unwrap_or_default();
            u64::from_le_bytes(b.try_into().unwrap_or_default())
        })
        .collect();
    let images_at = (ps + dir_len) as u64;
    let mut meta_page = AlignedBuf::zeroed(ps);
    dwb.read_at(&mut meta_page, images_at + (count * ps) as u64)?;
    let mut check = crc32c::crc32c(&meta_page);
    let mut chunk = AlignedBuf::zeroed(chunk_pages.min(count.max(1)) * ps);
    for (ci, group) in ids.chunks(chunk_pages).enumerate() {
        let n = group.len() * ps;
        dwb.read_at(&mut chunk[..n], images_at + (ci * chunk_pages * ps) as u64)?;
        for (k, id) in group.iter().enumerate() {
            check = crc32c::crc32c_append(check, &id.to_le_bytes());
            check = crc32c::crc32c_append(check, &chunk[k * ps..(k + 1) * ps]);
        }
    }
    if check != crc {
        return Ok(None);
    }
    let Some(meta) = Meta::decode(&meta_page) else {
        return Ok(None);
    };
    if meta.epoch != epoch || meta.page_size as usize != ps || ids.windows(2).any(|w| w[0] >= w[1])
    {
        return Ok(None);
    }
    write_in_place(pages, dwb, &ids, images_at, &meta_page, &meta, chunk_pages)?;
    release(dwb)?;
    Ok(Some(meta))
}
