//! Checkpoints: making the in-memory tree the durable one, atomically.
//!
//! The page file always holds one consistent checkpoint. A new one is
//! installed in five steps, each synced before the next:
//! 0. the page file is synced, so pages written straight to it since the
//!    last checkpoint (overflow values, bulk-loaded pages, all at ids the
//!    durable checkpoint does not use) are durable before anything refers
//!    to them;
//! 1. every page's new image is made durable outside the page file: the
//!    pages the pool spilled are already in the spill file, which is
//!    checked and synced; the dirty frames' images, and the new meta page,
//!    go to the double-write file, whose directory names, for every page,
//!    where its image is (header with epoch, count and checksum last);
//! 2. the pages are written in place in the page file;
//! 3. the new meta page is written to its slot;
//! 4. the WAL is reset to the new epoch.
//!
//! A spilled page is thus written twice in all (spilled, then in place),
//! as an unspilled dirty page is (double-write file, then in place): the
//! spill file is the double-write area of the pages in it, and torn-page
//! protection adds no third copy. Between step 1 and the end of step 3 the
//! spill file is part of the durable state; nothing writes it then, since
//! a checkpoint excludes every other pool user, and it is emptied only
//! after step 3.
//!
//! Step 3 writes the meta page to its slot, syncs, then copies it to the
//! other slot, so at rest both slots name the newest checkpoint; the
//! double-write file is then emptied: at rest a store holds one copy of
//! its pages.
//!
//! A crash during step 2 or 3 tears the page file, so recovery redoes
//! steps 2–3 from the double-write file (and the spill file it names) when
//! it holds a complete, valid checkpoint newer than the page file's meta.
//! A crash during step 1 leaves an invalid double-write file and an intact
//! page file; the WAL (still in the old epoch) then replays everything
//! since the old checkpoint. Recovery is idempotent: it may itself crash
//! and run again.
//!
//! Both directions stream in chunks of pages (see [`chunk_pages`]), so a
//! checkpoint of any size holds one chunk in memory: the images are
//! gathered through a callback (from the pool's frames), and written in
//! place by gathering them again and reading the spill file back. Only
//! recovery reads the double-write file: while a checkpoint runs no other
//! pool user does, so its frames still hold the bytes it wrote there.

use ferrite_core::engine::ByteReader;
use ferrite_core::{Error, Result};
use ferrite_io::{AlignedBuf, BlockDevice, ReadReq, WriteReq};

use crate::meta::Meta;
use crate::page::{self, PageId};

/// Format 1: every image in the file (8-byte directory entries). Read,
/// never written.
const MAGIC_V1: &[u8; 8] = b"FBTDWB01";
/// Format 2: 16-byte directory entries naming each image's place.
const MAGIC: &[u8; 8] = b"FBTDWB02";

/// A format-2 directory entry's place for an image held in the
/// double-write file itself.
const HERE: u64 = u64::MAX;

/// Most pages moved per write or read.
pub const MAX_CHUNK: usize = 256;

/// Pages per chunk for a pool of `frames` frames: a sixty-fourth of the
/// pool, from 16 to [`MAX_CHUNK`], so the buffer stays small beside it.
pub fn chunk_pages(frames: usize) -> usize {
    (frames / 64).clamp(16, MAX_CHUNK)
}

/// Where a checkpoint takes one page's new image from: given by the
/// caller (a dirty frame, a free-list page) and held in the double-write
/// file ([`Source::HERE`]), or already in the spill file at a byte offset
/// ([`Source::spill`]). Eight bytes, as the directory stores it: a
/// checkpoint keeps one per page it installs, and with its page ids that
/// is all it holds per page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Source(u64);

impl Source {
    pub const HERE: Source = Source(HERE);

    /// An image at byte `offset` of the spill file (page-aligned, so never
    /// the held marker).
    pub fn spill(offset: u64) -> Source {
        Source(offset)
    }

    /// The image's offset in the spill file, if it is there.
    pub fn spilled_at(self) -> Option<u64> {
        (self.0 != HERE).then_some(self.0)
    }
}

/// The files a checkpoint touches.
#[derive(Clone, Copy)]
pub struct Files<'a> {
    pub pages: &'a dyn BlockDevice,
    pub dwb: &'a dyn BlockDevice,
    pub spill: &'a dyn BlockDevice,
}

/// Fills a chunk's buffer with the sealed images of a group of pages, in
/// order.
pub type FillImages<'a> = dyn FnMut(&[PageId], &mut [u8]) -> Result<()> + 'a;

/// Where the image of a page a checkpoint installs is: asked of the
/// caller as the checkpoint streams, so it holds no per-page list beyond
/// the ids.
pub type PlaceOf<'a> = dyn Fn(PageId) -> Result<Source> + 'a;

/// Writes a checkpoint of the pages `ids` (ascending), each with the
/// place of its image given by `place`, and the meta page.
/// `fill(group, buf)` provides the images of the [`Source::HERE`] pages,
/// sealed, a chunk at a time (the images of `group`, in order, filling
/// `buf`); it is asked for each page twice, for the double-write file and
/// for the write in place, and must give the same bytes both times.
/// Returns how many pages it copied to the double-write file.
pub fn install(
    files: Files<'_>,
    ids: &[PageId],
    place: &PlaceOf<'_>,
    fill: &mut FillImages<'_>,
    meta: &Meta,
    chunk_pages: usize,
) -> Result<usize> {
    let Files { pages, dwb, spill } = files;
    let ps = meta.page_size as usize;
    let at = |i: usize| place(ids[i]);
    pages.sync()?;
    let mut meta_page = AlignedBuf::zeroed(ps);
    meta.encode(&mut meta_page);
    // Step 1: the spilled images are checked before anything names them
    // (a damaged one fails this checkpoint while the page file is intact),
    // and made durable.
    if check_spilled(spill, ids, &at, ps, chunk_pages)? {
        spill.sync()?;
    }
    // Then the directory, the images held here and the meta page; the
    // header goes last, and one sync covers all. Everything streams a
    // page or a chunk at a time.
    dwb.set_len(0)?;
    let mut crc = crc32c::crc32c(&meta_page);
    let per_page = ps / 16;
    let mut dir = AlignedBuf::zeroed(ps);
    for (pi, start) in (0..ids.len()).step_by(per_page.max(1)).enumerate() {
        let end = (start + per_page).min(ids.len());
        dir.fill(0);
        for (k, i) in (start..end).enumerate() {
            dir[k * 16..k * 16 + 8].copy_from_slice(&ids[i].to_le_bytes());
            dir[k * 16 + 8..k * 16 + 16].copy_from_slice(&at(i)?.0.to_le_bytes());
        }
        crc = crc32c::crc32c_append(crc, &dir[..(end - start) * 16]);
        dwb.write_at(&dir, ((1 + pi) * ps) as u64)?;
    }
    let images_at = (ps + directory_len(ids.len(), 16, ps)) as u64;
    let mut held = 0usize;
    {
        let mut chunk = AlignedBuf::zeroed(chunk_pages.min(ids.len().max(1)) * ps);
        let mut group = Vec::with_capacity(chunk_pages);
        let mut i = 0;
        while i < ids.len() {
            group.clear();
            while i < ids.len() && group.len() < chunk_pages {
                if at(i)? == Source::HERE {
                    group.push(ids[i]);
                }
                i += 1;
            }
            if group.is_empty() {
                continue;
            }
            let n = group.len() * ps;
            let images = chunk
                .get_mut(..n)
                .ok_or_else(|| Error::corruption("checkpoint", "chunk buffer too small"))?;
            fill(&group, images)?;
            crc = crc32c::crc32c_append(crc, images);
            dwb.write_at(&chunk[..n], images_at + (held * ps) as u64)?;
            held += group.len();
        }
    }
    dwb.write_at(&meta_page, images_at + (held * ps) as u64)?;
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
    // Steps 2 and 3. The held images are taken from the caller again
    // rather than read back: no other pool user runs during a checkpoint,
    // so `fill` gives the bytes the double-write file now holds.
    write_in_place(
        files,
        ids,
        &at,
        Held::Fill(fill),
        &meta_page,
        meta,
        chunk_pages,
    )?;
    release(dwb)?;
    Ok(held)
}

/// Bytes of a directory of `count` entries of `entry` bytes, in whole
/// pages.
fn directory_len(count: usize, entry: usize, ps: usize) -> usize {
    count.saturating_mul(entry).div_ceil(ps).saturating_mul(ps)
}

/// Reads every spilled image among `ids` (the `i`-th's place is
/// `at(i)`) and checks it (checksum, id), a chunk at a time; says whether
/// there was any.
fn check_spilled(
    spill: &dyn BlockDevice,
    ids: &[PageId],
    at: &dyn Fn(usize) -> Result<Source>,
    ps: usize,
    chunk_pages: usize,
) -> Result<bool> {
    let mut chunk: Option<AlignedBuf> = None;
    let mut group = Vec::with_capacity(chunk_pages);
    let mut any = false;
    let mut i = 0;
    while i < ids.len() {
        group.clear();
        while i < ids.len() && group.len() < chunk_pages {
            if let Some(off) = at(i)?.spilled_at() {
                group.push((ids[i], off));
            }
            i += 1;
        }
        if group.is_empty() {
            continue;
        }
        any = true;
        let buf = chunk.get_or_insert_with(|| AlignedBuf::zeroed(chunk_pages * ps));
        let n = group.len() * ps;
        read_spilled(spill, &group, &mut buf[..n], ps)?;
        for (&(id, off), image) in group.iter().zip(buf[..n].chunks(ps)) {
            check_spilled_image(image, id, off)?;
        }
    }
    Ok(any)
}

/// Reads the spilled images of `group` into `buf`, in order, as one
/// overlapped batch.
fn read_spilled(
    spill: &dyn BlockDevice,
    group: &[(PageId, u64)],
    buf: &mut [u8],
    ps: usize,
) -> Result<()> {
    let len = spill.len();
    let mut reqs = Vec::with_capacity(group.len());
    for (&(id, off), dst) in group.iter().zip(buf.chunks_mut(ps)) {
        in_spill_file(len, id, off, ps)?;
        reqs.push(ReadReq::new(off, dst));
    }
    spill.read_batch(&mut reqs)?;
    Ok(())
}

/// Refuses an offset past the spill file's end (`len` bytes) or not on a
/// page boundary: only a damaged directory names one.
fn in_spill_file(len: u64, id: PageId, off: u64, ps: usize) -> Result<()> {
    if !off.is_multiple_of(ps as u64) || off.checked_add(ps as u64).is_none_or(|end| end > len) {
        return Err(Error::corruption(
            "double-write file",
            format!("page {id}'s image is named at offset {off}, outside the spill file ({len} B)"),
        ));
    }
    Ok(())
}

fn check_spilled_image(image: &[u8], id: PageId, off: u64) -> Result<()> {
    page::check(image, id, &|| {
        format!("page {id} at offset {off} of the spill file")
    })
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

/// Where [`write_in_place`] takes the images of the [`Source::HERE`] pages.
enum Held<'f, 'a> {
    /// From the double-write file, in order from byte `next` on, which
    /// moves past each chunk's images as they are read (recovery).
    Written { next: u64 },
    /// From the caller, as [`install`] took them for the double-write file
    /// (a live checkpoint: they are still in the pool's frames, unchanged).
    Fill(&'f mut FillImages<'a>),
}

/// Copies the images of `ids` to their places in the page file, the held
/// ones from `held` and the others from the spill file, then the meta
/// page.
fn write_in_place(
    files: Files<'_>,
    ids: &[PageId],
    at: &dyn Fn(usize) -> Result<Source>,
    mut held_from: Held<'_, '_>,
    meta_page: &[u8],
    meta: &Meta,
    chunk_pages: usize,
) -> Result<()> {
    let Files { pages, dwb, spill } = files;
    let ps = meta.page_size as usize;
    let cap = chunk_pages.min(ids.len().max(1)) * ps;
    let mut chunk = AlignedBuf::zeroed(cap);
    let mut held = AlignedBuf::zeroed(cap);
    let spill_len = spill.len();
    let mut srcs = Vec::with_capacity(chunk_pages);
    let mut here_ids = Vec::with_capacity(chunk_pages);
    for (ci, group) in ids.chunks(chunk_pages).enumerate() {
        srcs.clear();
        for i in ci * chunk_pages..ci * chunk_pages + group.len() {
            srcs.push(at(i)?);
        }
        let n = group.len() * ps;
        let here = srcs.iter().filter(|s| **s == Source::HERE).count();
        if here > 0 {
            let images = &mut held[..here * ps];
            match &mut held_from {
                Held::Written { next } => {
                    dwb.read_at(images, *next)?;
                    *next += images.len() as u64;
                }
                Held::Fill(fill) => {
                    here_ids.clear();
                    here_ids.extend(
                        group
                            .iter()
                            .zip(&srcs)
                            .filter(|(_, s)| **s == Source::HERE)
                            .map(|(id, _)| *id),
                    );
                    fill(&here_ids, images)?;
                }
            }
        }
        let mut held_images = held[..here * ps].chunks(ps);
        let mut reqs = Vec::new();
        for ((&id, src), dst) in group.iter().zip(&srcs).zip(chunk[..n].chunks_mut(ps)) {
            match src.spilled_at() {
                None => {
                    if let Some(image) = held_images.next() {
                        dst.copy_from_slice(image);
                    }
                }
                Some(off) => {
                    in_spill_file(spill_len, id, off, ps)?;
                    reqs.push(ReadReq::new(off, dst));
                }
            }
        }
        if !reqs.is_empty() {
            spill.read_batch(&mut reqs)?;
        }
        drop(reqs);
        for ((&id, src), image) in group.iter().zip(&srcs).zip(chunk[..n].chunks(ps)) {
            if let Some(off) = src.spilled_at() {
                check_spilled_image(image, id, off)?;
            }
        }
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
/// images are checked (one streaming pass) before any is written. A file
/// that is not complete and valid is ignored: it was cut short by a crash
/// before its sync, and the page file is intact. A valid file naming a
/// spilled image that fails its check is corruption: the spill file was
/// synced before the header was written.
pub fn recover(
    files: Files<'_>,
    current: Option<&Meta>,
    ps: usize,
    chunk_pages: usize,
) -> Result<Option<Meta>> {
    let Files { dwb, spill, .. } = files;
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
        Some((magic, epoch, count, crc, hcrc))
    })();
    let Some((magic, epoch, count, crc, hcrc)) = parsed else {
        return Ok(None);
    };
    let entry = match magic {
        m if m == MAGIC => 16,
        m if m == MAGIC_V1 => 8,
        _ => return Ok(None),
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
    let dir_bytes = count.saturating_mul(entry);
    let dir_len = directory_len(count, entry, ps);
    if len < (ps as u64).saturating_add(dir_len as u64) {
        return Ok(None);
    }
    let mut dir = AlignedBuf::zeroed(dir_len);
    if dir_len > 0 {
        dwb.read_at(&mut dir, ps as u64)?;
    }
    let word = |at: usize| {
        let b = dir.get(at..at + 8).unwrap_or_default();
        u64::from_le_bytes(b.try_into().unwrap_or_default())
    };
    let ids: Vec<PageId> = (0..count).map(|i| word(i * entry)).collect();
    let sources: Vec<Source> = (0..count)
        .map(|i| match entry {
            16 => Source(word(i * 16 + 8)),
            _ => Source::HERE,
        })
        .collect();
    let here = sources.iter().filter(|s| **s == Source::HERE).count();
    let images_at = (ps + dir_len) as u64;
    let need = images_at.saturating_add((here as u64 + 1).saturating_mul(ps as u64));
    if len < need {
        return Ok(None);
    }
    let mut meta_page = AlignedBuf::zeroed(ps);
    dwb.read_at(&mut meta_page, images_at + (here * ps) as u64)?;
    let mut check = crc32c::crc32c(&meta_page);
    if entry == 16 {
        check = crc32c::crc32c_append(check, dir.get(..dir_bytes).unwrap_or_default());
    }
    let held: Vec<PageId> = ids
        .iter()
        .zip(&sources)
        .filter(|(_, s)| **s == Source::HERE)
        .map(|(id, _)| *id)
        .collect();
    let mut chunk = AlignedBuf::zeroed(chunk_pages.min(here.max(1)) * ps);
    for (ci, group) in held.chunks(chunk_pages).enumerate() {
        let n = group.len() * ps;
        dwb.read_at(&mut chunk[..n], images_at + (ci * chunk_pages * ps) as u64)?;
        if entry == 16 {
            check = crc32c::crc32c_append(check, &chunk[..n]);
        } else {
            for (id, image) in group.iter().zip(chunk[..n].chunks(ps)) {
                check = crc32c::crc32c_append(check, &id.to_le_bytes());
                check = crc32c::crc32c_append(check, image);
            }
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
    let at = |i: usize| Ok(sources[i]);
    check_spilled(spill, &ids, &at, ps, chunk_pages)?;
    write_in_place(
        files,
        &ids,
        &at,
        Held::Written { next: images_at },
        &meta_page,
        &meta,
        chunk_pages,
    )?;
    release(dwb)?;
    Ok(Some(meta))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::free_space::ChainRef;
    use crate::meta::Carried;
    use crate::page::KIND_LEAF;
    use ferrite_io::{CrashMode, FaultKind, FaultOp, FaultRule, FaultyDevice, MemDevice};

    const PS: usize = 4096;
    /// A byte in the page's free gap, free to mark images with.
    const MARK: usize = PS / 2;
    /// The pages a checkpoint installs: 2..12, odd ones spilled.
    const IDS: std::ops::Range<PageId> = 2..12;

    fn image(id: PageId, mark: u8) -> AlignedBuf {
        let mut b = AlignedBuf::zeroed(PS);
        page::init(&mut b, id, KIND_LEAF, 0);
        b[MARK] = mark;
        page::seal(&mut b);
        b
    }

    fn meta(epoch: u64) -> Meta {
        Meta {
            page_size: PS as u32,
            epoch,
            root: 2,
            height: 0,
            page_count: 16,
            free: ChainRef::default(),
            carried: Carried::Nothing,
        }
    }

    type Dev = FaultyDevice<MemDevice>;

    /// Page file at checkpoint 1 (every page marked 1), and the spill
    /// file holding the odd pages' new images (marked 2), unsynced as a
    /// pool leaves them. The page file's blocks are 512 bytes, so a torn
    /// write can leave half a page.
    fn rig() -> [Dev; 3] {
        let pages = FaultyDevice::new(MemDevice::with_block_size(512).unwrap());
        let old = meta(1);
        let mut mp = AlignedBuf::zeroed(PS);
        old.encode(&mut mp);
        pages.write_at(&mp, old.slot() * PS as u64).unwrap();
        for id in IDS {
            pages.write_at(&image(id, 1), id * PS as u64).unwrap();
        }
        pages.sync().unwrap();
        let spill = FaultyDevice::new(MemDevice::new());
        for id in IDS.filter(|id| id % 2 == 1) {
            spill.write_at(&image(id, 2), id * PS as u64).unwrap();
        }
        [pages, FaultyDevice::new(MemDevice::new()), spill]
    }

    fn files(d: &[Dev; 3]) -> Files<'_> {
        Files {
            pages: &d[0],
            dwb: &d[1],
            spill: &d[2],
        }
    }

    fn plan() -> (Vec<PageId>, Vec<Source>) {
        IDS.map(|id| {
            let src = if id % 2 == 1 {
                Source::spill(id * PS as u64)
            } else {
                Source::HERE
            };
            (id, src)
        })
        .unzip()
    }

    /// Installs checkpoint 2 (every page marked 2); returns the pages the
    /// caller was asked for.
    fn install_2(d: &[Dev; 3]) -> (Result<usize>, Vec<PageId>) {
        let (ids, sources) = plan();
        let mut asked = Vec::new();
        let place = |id: PageId| Ok(sources[ids.binary_search(&id).unwrap()]);
        let r = install(
            files(d),
            &ids,
            &place,
            &mut |group, buf| {
                for (&id, dst) in group.iter().zip(buf.chunks_mut(PS)) {
                    asked.push(id);
                    dst.copy_from_slice(&image(id, 2));
                }
                Ok(())
            },
            &meta(2),
            4,
        );
        (r, asked)
    }

    fn marks(pages: &dyn BlockDevice) -> Vec<u8> {
        IDS.map(|id| {
            let mut b = AlignedBuf::zeroed(PS);
            pages.read_at(&mut b, id * PS as u64).unwrap();
            page::check(&b, id, &|| format!("page {id}")).unwrap();
            b[MARK]
        })
        .collect()
    }

    #[test]
    fn spilled_pages_are_named_not_copied_and_every_page_lands() {
        let d = rig();
        let (r, asked) = install_2(&d);
        r.unwrap();
        // Only dirty frames are copied: once for the double-write file,
        // once for the write in place.
        assert_eq!(asked, vec![2, 4, 6, 8, 10, 2, 4, 6, 8, 10]);
        assert_eq!(marks(&d[0]), vec![2; 10]);
        assert!(d[1].is_empty(), "the double-write file is emptied");
    }

    /// A live checkpoint writes its held pages in place from the caller's
    /// frames, so it never reads the double-write file back.
    #[test]
    fn a_live_checkpoint_does_not_read_the_double_write_file() {
        let d = rig();
        d[1].inject(FaultRule::nth(FaultOp::Read, 1, FaultKind::Eio));
        install_2(&d).0.unwrap();
        assert_eq!(marks(&d[0]), vec![2; 10]);
    }

    /// A crash while the pages are written in place: the page file keeps
    /// a torn page, the double-write and spill files only what was synced.
    /// Recovery finishes the checkpoint from both.
    #[test]
    fn a_checkpoint_torn_in_place_is_finished_from_the_spill_file() {
        let d = rig();
        d[0].inject(FaultRule::nth(
            FaultOp::Write,
            1,
            FaultKind::Torn { blocks: 11 },
        ));
        assert!(install_2(&d).0.is_err());
        d[0].crash(CrashMode::KeepRandom { seed: 1, keep: 1.0 })
            .unwrap();
        for dev in &d[1..] {
            dev.crash(CrashMode::DropAll).unwrap();
        }
        for dev in &d {
            dev.restart();
        }
        let mut b = AlignedBuf::zeroed(PS);
        d[0].read_at(&mut b, 3 * PS as u64).unwrap();
        assert!(page::check(&b, 3, &String::new).is_err(), "page 3 is torn");
        let m = recover(files(&d), Some(&meta(1)), PS, 4).unwrap().unwrap();
        assert_eq!(m.epoch, 2);
        assert_eq!(marks(&d[0]), vec![2; 10]);
        // Run again (a crash after recovery): the meta now names it.
        assert!(recover(files(&d), Some(&m), PS, 4).unwrap().is_none());
    }

    #[test]
    fn a_valid_file_naming_a_damaged_spilled_image_is_corruption() {
        let d = rig();
        d[0].inject(FaultRule::nth(FaultOp::Write, 1, FaultKind::Eio));
        assert!(install_2(&d).0.is_err());
        let mut b = image(5, 2);
        b[100] ^= 1;
        d[2].write_at(&b, 5 * PS as u64).unwrap();
        let e = recover(files(&d), Some(&meta(1)), PS, 4).unwrap_err();
        assert!(e.is_corruption(), "{e}");
    }

    #[test]
    fn a_damaged_spilled_image_fails_the_checkpoint_before_any_page_is_written() {
        let d = rig();
        let mut b = image(7, 2);
        b[100] ^= 1;
        d[2].write_at(&b, 7 * PS as u64).unwrap();
        assert!(install_2(&d).0.unwrap_err().is_corruption());
        assert_eq!(marks(&d[0]), vec![1; 10]);
        assert!(recover(files(&d), Some(&meta(1)), PS, 4).unwrap().is_none());
    }

    /// A format-1 file (every image held, 8-byte entries), as an older
    /// build left it when it crashed mid-checkpoint, is still applied.
    #[test]
    fn a_format_1_file_is_still_applied() {
        let d = rig();
        let ids: Vec<PageId> = IDS.collect();
        let mut mp = AlignedBuf::zeroed(PS);
        meta(2).encode(&mut mp);
        let mut crc = crc32c::crc32c(&mp);
        let mut dir = AlignedBuf::zeroed(PS);
        for (i, &id) in ids.iter().enumerate() {
            dir[i * 8..i * 8 + 8].copy_from_slice(&id.to_le_bytes());
            let img = image(id, 3);
            crc = crc32c::crc32c_append(crc, &id.to_le_bytes());
            crc = crc32c::crc32c_append(crc, &img);
            d[1].write_at(&img, ((2 + i) * PS) as u64).unwrap();
        }
        d[1].write_at(&dir, PS as u64).unwrap();
        d[1].write_at(&mp, ((2 + ids.len()) * PS) as u64).unwrap();
        let mut h = Vec::new();
        h.extend_from_slice(MAGIC_V1);
        h.extend_from_slice(&2u64.to_le_bytes());
        h.extend_from_slice(&(ids.len() as u64).to_le_bytes());
        h.extend_from_slice(&crc.to_le_bytes());
        let hcrc = crc32c::crc32c(&h);
        h.extend_from_slice(&hcrc.to_le_bytes());
        let mut head = AlignedBuf::zeroed(PS);
        head[..h.len()].copy_from_slice(&h);
        d[1].write_at(&head, 0).unwrap();
        let m = recover(files(&d), Some(&meta(1)), PS, 4).unwrap().unwrap();
        assert_eq!(m.epoch, 2);
        assert_eq!(marks(&d[0]), vec![3; 10]);
    }
}
