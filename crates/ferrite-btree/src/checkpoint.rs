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
//! A crash during step 2 or 3 tears the page file, so recovery redoes
//! steps 2–3 from the double-write file when it holds a complete, valid
//! checkpoint newer than the page file's meta. A crash during step 1 leaves
//! an invalid double-write file and an intact page file; the WAL (still in
//! the old epoch) then replays everything since the old checkpoint.
//! Recovery is idempotent: it may itself crash and run again.

use ferrite_core::{ByteReader, Result};
use ferrite_io::{AlignedBuf, BlockDevice};

use crate::meta::Meta;
use crate::page::PageId;

const MAGIC: &[u8; 8] = b"FBTDWB01";

/// Writes a checkpoint's pages and meta through the double-write file.
pub fn install(
    pages: &dyn BlockDevice,
    dwb: &dyn BlockDevice,
    dirty: &[(PageId, AlignedBuf)],
    meta: &Meta,
) -> Result<()> {
    let ps = meta.page_size as usize;
    pages.sync()?;
    let mut meta_page = AlignedBuf::zeroed(ps);
    meta.encode(&mut meta_page);
    // Step 1: header block, then the directory of ids, then the images.
    let dir_len = (dirty.len() * 8).div_ceil(ps) * ps;
    let mut image = AlignedBuf::zeroed(ps + dir_len + (dirty.len() + 1) * ps);
    let mut crc = crc32c::crc32c(&meta_page);
    for (i, (id, page)) in dirty.iter().enumerate() {
        let at = ps + i * 8;
        if let Some(d) = image.get_mut(at..at + 8) {
            d.copy_from_slice(&id.to_le_bytes());
        }
        let at = ps + dir_len + i * ps;
        if let Some(d) = image.get_mut(at..at + ps) {
            d.copy_from_slice(page);
        }
        crc = crc32c::crc32c_append(crc, &id.to_le_bytes());
        crc = crc32c::crc32c_append(crc, page);
    }
    let at = ps + dir_len + dirty.len() * ps;
    if let Some(d) = image.get_mut(at..at + ps) {
        d.copy_from_slice(&meta_page);
    }
    let mut header = Vec::new();
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&meta.epoch.to_le_bytes());
    header.extend_from_slice(&(dirty.len() as u64).to_le_bytes());
    header.extend_from_slice(&crc.to_le_bytes());
    let hcrc = crc32c::crc32c(&header);
    header.extend_from_slice(&hcrc.to_le_bytes());
    if let Some(d) = image.get_mut(..header.len()) {
        d.copy_from_slice(&header);
    }
    dwb.set_len(0)?;
    dwb.write_at(&image, 0)?;
    dwb.sync()?;
    // Steps 2 and 3.
    write_in_place(pages, dirty, &meta_page, meta, ps)
}

fn write_in_place(
    pages: &dyn BlockDevice,
    dirty: &[(PageId, AlignedBuf)],
    meta_page: &[u8],
    meta: &Meta,
    ps: usize,
) -> Result<()> {
    // Coalesce runs of consecutive page ids into single writes.
    let mut i = 0;
    while i < dirty.len() {
        let mut j = i + 1;
        while j < dirty.len() && dirty[j].0 == dirty[j - 1].0 + 1 && j - i < 256 {
            j += 1;
        }
        let mut run = AlignedBuf::zeroed((j - i) * ps);
        for (k, (_, p)) in dirty[i..j].iter().enumerate() {
            if let Some(d) = run.get_mut(k * ps..(k + 1) * ps) {
                d.copy_from_slice(p);
            }
        }
        pages.write_at(&run, dirty[i].0 * ps as u64)?;
        i = j;
    }
    pages.sync()?;
    let mp = AlignedBuf::from_slice(meta_page);
    pages.write_at(&mp, meta.slot() * ps as u64)?;
    pages.sync()?;
    Ok(())
}

/// Reads the double-write file; if it holds a complete checkpoint newer
/// than `current`, redoes it in the page file and returns its meta.
pub fn recover(
    pages: &dyn BlockDevice,
    dwb: &dyn BlockDevice,
    current: Option<&Meta>,
    ps: usize,
) -> Result<Option<Meta>> {
    let len = dwb.len() - dwb.len() % ps as u64;
    if len < 2 * ps as u64 {
        return Ok(None);
    }
    let mut all = AlignedBuf::zeroed(len as usize);
    dwb.read_at(&mut all, 0)?;
    let mut r = ByteReader::new(&all);
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
    if crc32c::crc32c(all.get(..28).unwrap_or_default()) != hcrc {
        return Ok(None);
    }
    if current.is_some_and(|m| m.epoch >= epoch) {
        return Ok(None);
    }
    let count = count as usize;
    let dir_len = (count.saturating_mul(8)).div_ceil(ps) * ps;
    let need = ps + dir_len + (count + 1) * ps;
    if all.len() < need {
        return Ok(None);
    }
    let meta_at = ps + dir_len + count * ps;
    let meta_page = all.get(meta_at..meta_at + ps).unwrap_or_default();
    let mut check = crc32c::crc32c(meta_page);
    let mut dirty = Vec::with_capacity(count);
    for i in 0..count {
        let id_bytes = all.get(ps + i * 8..ps + i * 8 + 8).unwrap_or_default();
        let page = all
            .get(ps + dir_len + i * ps..ps + dir_len + (i + 1) * ps)
            .unwrap_or_default();
        check = crc32c::crc32c_append(check, id_bytes);
        check = crc32c::crc32c_append(check, page);
        let id = u64::from_le_bytes(id_bytes.try_into().unwrap_or_default());
        dirty.push((id, AlignedBuf::from_slice(page)));
    }
    if check != crc {
        return Ok(None);
    }
    let Some(meta) = Meta::decode(meta_page) else {
        return Ok(None);
    };
    if meta.epoch != epoch {
        return Ok(None);
    }
    write_in_place(pages, &dirty, meta_page, &meta, ps)?;
    Ok(Some(meta))
}
