//! The reclaimer: copies the live blocks of mostly-dead segments to its
//! own head and re-maps them, so the segments can be reused.
//!
//! A pass picks victims by cost-benefit ([`crate::reclaim_policy`]),
//! finds their live runs by walking the map, copies them in chunks and
//! re-maps each block only if the map still points at the copy's source
//! (a client write that landed meanwhile wins), then flushes: the copies
//! and the map are durable before any victim is freed. The reuse gate is
//! held for reading through a pass, so no victim can be freed and
//! rewritten while its blocks are being copied.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use ferrite_io::{AlignedBuf, GatherReq, ReadReq};
use ferrite_rask::{BlockRange, PhysicalRun, Segment};

use crate::error::{Result, VolumeError};
use crate::reclaim_policy;
use crate::superblock::BLOCK_SIZE;
use crate::volume::{for_segments, HeadKind, Inner, CLIENT_KEEP};

const BS: u64 = BLOCK_SIZE as u64;
/// Blocks copied per read and write (4 MiB).
const CHUNK_BLOCKS: u64 = 1024;
/// Victims considered per pass.
const MAX_VICTIMS: usize = 8;
const IDLE: Duration = Duration::from_millis(200);

pub(crate) fn spawn(inner: Arc<Inner>) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("volume-reclaim".into())
        .spawn(move || run(&inner))
        .map_err(|source| VolumeError::Io {
            what: "starting the reclaimer thread".into(),
            source,
        })
}

fn run(inner: &Inner) {
    while !inner.stop.load(Ordering::SeqCst) {
        let worked = match pass(inner) {
            Ok(w) => w,
            Err(e) => {
                log::warn!("volume reclamation failed: {e}");
                inner.note_reclaim(true, 0);
                false
            }
        };
        if !worked {
            let (m, c) = &inner.wake;
            let mut woken = m.lock();
            if !*woken {
                c.wait_for(&mut woken, IDLE);
            }
            *woken = false;
        }
    }
}

/// A live run to move: `n` blocks of `lba..` now at physical `from`.
#[derive(Debug, Clone, Copy)]
struct Piece {
    lba: u64,
    n: u64,
    from: u64,
}

/// One reclamation pass; false when there was nothing worth doing.
pub(crate) fn pass(inner: &Inner) -> Result<bool> {
    let _one = inner.reclaim_lock.lock();
    let cap = inner.seg_blocks();
    let victims = {
        let mut sp = inner.space.lock();
        let t = &inner.opts.reclaim;
        if !reclaim_policy::should_reclaim(
            sp.table.free_count(),
            sp.table.used_count(),
            sp.table.live_blocks(),
            sp.table.capacity(),
            t,
        ) {
            return Ok(false);
        }
        // Take victims while their live blocks fit the room the
        // reclaimer can count on: its head's and the free segments the
        // client head leaves it (the client may take the others).
        let mut budget =
            sp.table.free_count().min(CLIENT_KEEP) as u64 * cap + inner.reclaim_room(&sp);
        let mut chosen = Vec::new();
        for v in reclaim_policy::pick_victims(
            sp.table.infos(),
            sp.table.capacity(),
            sp.table.clock(),
            MAX_VICTIMS,
            t,
        ) {
            // One that does not fit is passed over: a later one may.
            let live = sp.table.info(v).map_or(0, |i| i.live as u64);
            if live > budget {
                continue;
            }
            budget -= live;
            chosen.push(v);
        }
        if chosen.is_empty() {
            // Said under the lock the verdict was reached under: a
            // release of draining segments (which clears it) cannot fall
            // between the two, so a waiting writer never takes a verdict
            // on a fuller log than the one it waits on for "full".
            sp.stuck = true;
            inner.space_changed.notify_all();
        }
        chosen
    };
    if victims.is_empty() {
        return Ok(false);
    }
    let _work = ferrite_core::background::begin(ferrite_core::background::Work::Reclamation);
    let copied = {
        let _gate = inner.reuse_gate.read();
        let pieces = live_pieces(inner, &victims, cap);
        copy(inner, &pieces)?
    };
    inner.flush()?;
    inner.note_reclaim(false, copied);
    Ok(true)
}

fn live_pieces(inner: &Inner, victims: &[u32], cap: u64) -> Vec<Piece> {
    let mut pieces = Vec::new();
    inner.map.for_each(&mut |range, run| {
        let mut lba = range.l();
        let mut phys = run.block();
        for_segments(cap, run.block(), range.len(), |seg, n| {
            if victims.contains(&seg) {
                pieces.push(Piece { lba, n, from: phys });
            }
            lba += n;
            phys += n;
        });
    });
    pieces.sort_by_key(|p| p.from);
    pieces
}

/// Copies `pieces` to the reclaimer's head a chunk at a time; returns the
/// blocks copied.
fn copy(inner: &Inner, pieces: &[Piece]) -> Result<u64> {
    let mut split = Vec::with_capacity(pieces.len());
    for &p in pieces {
        let mut q = p;
        while q.n > CHUNK_BLOCKS {
            split.push(Piece {
                n: CHUNK_BLOCKS,
                ..q
            });
            q = Piece {
                lba: q.lba + CHUNK_BLOCKS,
                n: q.n - CHUNK_BLOCKS,
                from: q.from + CHUNK_BLOCKS,
            };
        }
        split.push(q);
    }
    let (mut copied, mut blocks) = (0, 0);
    let mut chunk = Vec::new();
    for p in split {
        if blocks + p.n > CHUNK_BLOCKS {
            copied += copy_chunk(inner, &chunk, blocks)?;
            chunk.clear();
            blocks = 0;
        }
        chunk.push(p);
        blocks += p.n;
    }
    copied += copy_chunk(inner, &chunk, blocks)?;
    Ok(copied)
}

fn copy_chunk(inner: &Inner, chunk: &[Piece], blocks: u64) -> Result<u64> {
    if chunk.is_empty() {
        return Ok(0);
    }
    let mut buf = AlignedBuf::zeroed((blocks * BS) as usize);
    {
        let mut reqs = Vec::with_capacity(chunk.len());
        let mut rest: &mut [u8] = &mut buf;
        for p in chunk {
            let (piece, tail) = std::mem::take(&mut rest).split_at_mut((p.n * BS) as usize);
            rest = tail;
            reqs.push(ReadReq::new(p.from * BS, piece));
        }
        inner.data.read_batch(&mut reqs)?;
    }
    let extents = {
        let mut sp = inner.space.lock();
        match inner.allocate(&mut sp, HeadKind::Reclaim, blocks) {
            Some(e) => e,
            None => {
                return Err(VolumeError::NoSpace {
                    live_blocks: sp.table.live_blocks(),
                    segments: sp.table.len() as u32,
                })
            }
        }
    };
    let result = place_chunk(inner, chunk, &buf, &extents);
    inner.land(&extents);
    result.map(|()| blocks)
}

/// Writes a chunk's blocks onto `extents` and re-maps each block still
/// mapped to its source.
fn place_chunk(inner: &Inner, chunk: &[Piece], buf: &[u8], extents: &[(u64, u64)]) -> Result<()> {
    // Lay the chunk's blocks onto the extents: (lba, n, from, to).
    let mut moves: Vec<(u64, u64, u64, u64)> = Vec::new();
    let mut reqs_src: Vec<(u64, usize, usize)> = Vec::new(); // (to, byte start, byte end)
    let mut ext = extents.iter().copied();
    let (mut to, mut room) = ext.next().unwrap_or((0, 0));
    let mut offset = 0usize;
    for p in chunk {
        let (mut lba, mut from, mut left) = (p.lba, p.from, p.n);
        while left > 0 {
            if room == 0 {
                (to, room) = ext.next().ok_or_else(|| {
                    VolumeError::corrupt("reclaim", "allocation shorter than the chunk")
                })?;
            }
            let n = left.min(room);
            moves.push((lba, n, from, to));
            reqs_src.push((to, offset, offset + (n * BS) as usize));
            (lba, from, left) = (lba + n, from + n, left - n);
            (to, room) = (to + n, room - n);
            offset += (n * BS) as usize;
        }
    }
    let slices: Vec<[&[u8]; 1]> = reqs_src.iter().map(|&(_, a, b)| [&buf[a..b]]).collect();
    let reqs: Vec<GatherReq<'_>> = reqs_src
        .iter()
        .zip(&slices)
        .map(|(&(to, _, _), s)| GatherReq::new(to * BS, s))
        .collect();
    inner
        .data
        .write_gathered(&reqs)
        .map_err(|e| inner.poisoned(e.into()))?;
    let mut sp = inner.space.lock();
    let mut scratch: Vec<Segment<PhysicalRun>> = Vec::new();
    let cap = inner.seg_blocks();
    for &(lba, n, from, to) in &moves {
        scratch.clear();
        inner
            .map
            .lookup(BlockRange::with_len(lba, n)?, &mut scratch);
        for s in &scratch {
            let Some(v) = s.value else { continue };
            let skip = s.range.l() - lba;
            // Only blocks still mapped to the copy's source move.
            if v.file() != 0 || v.block() != from + skip {
                continue;
            }
            let dest = PhysicalRun::new(0, to + skip).ok_or_else(|| {
                VolumeError::corrupt("reclaim", format!("physical block {}", to + skip))
            })?;
            inner
                .map
                .map(s.range, dest)
                .map_err(|e| inner.poisoned(e))?;
            for_segments(cap, from + skip, s.range.len(), |seg, k| {
                sp.table.sub_live(seg, k as u32)
            });
            for_segments(cap, to + skip, s.range.len(), |seg, k| {
                sp.table.add_live(seg, k as u32)
            });
        }
    }
    Ok(())
}
