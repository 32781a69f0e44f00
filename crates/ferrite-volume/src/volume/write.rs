//! Writes: whole blocks grouped with the writes in flight beside them
//! into one append on the client head (sub-block writes read, patch and
//! write back their blocks), then mapped under the space lock with the
//! live counts; allocation on the two heads; TRIM and zeroing, which only
//! change the map where whole blocks allow.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrite_io::{AlignedBuf, GatherReq};
use ferrite_rask::{BlockRange, PhysicalRun, Segment};

use super::for_segments;
use super::{
    block_span, check_request, inner_blocks, Head, HeadKind, Inner, Space, BS, CLIENT_KEEP,
    MAX_REQUEST,
};
use crate::error::{Result, VolumeError};
use crate::reclaim_policy;
use crate::write_group::WriteJob;

/// How long a write waits for reclamation to make room before it fails
/// with `NoSpace`.
const ROOM_WAIT: Duration = Duration::from_secs(30);

impl Inner {
    pub(super) fn write(&self, offset: u64, buf: &[u8], fua: bool) -> Result<()> {
        check_request(&self.sb, offset, buf.len() as u64)?;
        let Some(span) = block_span(offset, buf.len() as u64) else {
            return Ok(());
        };
        if offset.is_multiple_of(BS) && (buf.len() as u64).is_multiple_of(BS) {
            return self.write_blocks(span.l(), AlignedBuf::from_slice(buf), fua);
        }
        // A part of a block: read the blocks around it, patch, write back.
        // Overlapping writes in flight together have no defined order
        // (NBD leaves it to the client), but two sub-block writes to one
        // block must not lose each other's bytes: they take turns.
        let _rmw = self.rmw.lock();
        let mut img = AlignedBuf::zeroed((span.len() * BS) as usize);
        self.read_blocks(span, &mut img)?;
        let skip = (offset - span.l() * BS) as usize;
        img[skip..skip + buf.len()].copy_from_slice(buf);
        self.write_blocks(span.l(), img, fua)
    }

    /// Writes whole blocks from `lba`, batched with whatever other writes
    /// arrive meanwhile.
    pub(crate) fn write_blocks(&self, lba: u64, data: AlignedBuf, fua: bool) -> Result<()> {
        self.check_poison()?;
        let job = Arc::new(WriteJob::new(lba, data, fua));
        self.group.submit(job, |batch| self.commit_batch(batch))
    }

    /// Writes a batch of jobs as one append and maps them in order.
    pub(super) fn commit_batch(&self, batch: &[Arc<WriteJob>]) -> Result<()> {
        self.check_poison()?;
        let total: u64 = batch.iter().map(|j| j.blocks()).sum();
        let extents = self.allocate_with_room(total)?;
        let result = self.place_batch(batch, &extents, total);
        self.land(&extents);
        result?;
        if batch.iter().any(|j| j.fua) {
            self.sync_all()?;
        }
        Ok(())
    }

    /// Ends the flight of allocated extents (their map entries are in, or
    /// never will be).
    pub(crate) fn land(&self, extents: &[(u64, u64)]) {
        let mut sp = self.space.lock();
        for &(at, n) in extents {
            sp.table.land((at / self.seg_blocks()) as u32, n as u32);
        }
    }

    /// Writes a batch's blocks onto `extents` and maps them.
    pub(super) fn place_batch(
        &self,
        batch: &[Arc<WriteJob>],
        extents: &[(u64, u64)],
        total: u64,
    ) -> Result<()> {
        // Pair each job's blocks with the extents, in order.
        let mut pieces: Vec<(u64, u64, u64)> = Vec::new(); // (lba, blocks, phys)
        let mut gathers: Vec<(u64, Vec<&[u8]>)> = Vec::with_capacity(extents.len());
        let mut ext = extents.iter().copied();
        let (mut ext_at, mut ext_left) = ext.next().unwrap_or((0, 0));
        gathers.push((ext_at, Vec::new()));
        for job in batch {
            let (mut lba, mut left, mut from) = (job.lba, job.blocks(), 0usize);
            while left > 0 {
                if ext_left == 0 {
                    (ext_at, ext_left) = ext.next().ok_or_else(|| {
                        VolumeError::corrupt("write batch", "allocation shorter than the batch")
                    })?;
                    gathers.push((ext_at, Vec::new()));
                }
                let n = left.min(ext_left);
                let bytes = (n * BS) as usize;
                if let Some(g) = gathers.last_mut() {
                    g.1.push(&job.data[from..from + bytes]);
                }
                pieces.push((lba, n, ext_at));
                (lba, left, from) = (lba + n, left - n, from + bytes);
                (ext_at, ext_left) = (ext_at + n, ext_left - n);
            }
        }
        let reqs: Vec<GatherReq<'_>> = gathers
            .iter()
            .filter(|(_, b)| !b.is_empty())
            .map(|(at, bufs)| GatherReq::new(at * BS, bufs))
            .collect();
        // A full file system under a sparse log fails the write before
        // anything is mapped: refuse it, and stay usable.
        self.data.write_gathered(&reqs).map_err(|e| {
            let e = VolumeError::from(e);
            if e.is_no_space() {
                e
            } else {
                self.poisoned(e)
            }
        })?;
        self.counters
            .data_writes
            .fetch_add(reqs.len() as u64, Ordering::Relaxed);
        self.counters
            .client_blocks
            .fetch_add(total, Ordering::Relaxed);
        {
            let mut sp = self.space.lock();
            let mut scratch = Vec::new();
            for &(lba, n, phys) in &pieces {
                let range = BlockRange::with_len(lba, n)?;
                let run = PhysicalRun::new(0, phys).ok_or_else(|| {
                    VolumeError::corrupt("write batch", format!("physical block {phys}"))
                })?;
                self.remap(&mut sp, range, Some(run), &mut scratch)
                    .map_err(|e| self.poisoned(e))?;
            }
            if reclaim_policy::should_reclaim(
                sp.table.free_count(),
                sp.table.used_count(),
                sp.table.live_blocks(),
                sp.table.capacity(),
                &self.opts.reclaim,
            ) {
                self.wake_reclaimer();
            }
        }
        Ok(())
    }

    /// Changes the map for `range` to `new` (or unmaps it) and moves the
    /// live counts with it. Runs under the space lock.
    pub(crate) fn remap(
        &self,
        sp: &mut Space,
        range: BlockRange,
        new: Option<PhysicalRun>,
        scratch: &mut Vec<Segment<PhysicalRun>>,
    ) -> Result<()> {
        scratch.clear();
        self.map.lookup(range, scratch);
        let mapped = scratch.iter().any(|s| s.value.is_some());
        match new {
            Some(run) => self.map.map(range, run)?,
            None if mapped => self.map.unmap(range)?,
            None => return Ok(()),
        }
        let sb = self.seg_blocks();
        for s in scratch.iter() {
            if let Some(v) = s.value {
                for_segments(sb, v.block(), s.range.len(), |seg, n| {
                    sp.table.sub_live(seg, n as u32)
                });
            }
        }
        if let Some(run) = new {
            for_segments(sb, run.block(), range.len(), |seg, n| {
                sp.table.add_live(seg, n as u32)
            });
        }
        Ok(())
    }

    /// Allocates `blocks` on the client head, waiting for reclamation (or
    /// a flush that frees draining segments) when the log is full.
    pub(super) fn allocate_with_room(&self, blocks: u64) -> Result<Vec<(u64, u64)>> {
        let started = Instant::now();
        let mut first = true;
        loop {
            let draining = {
                let mut sp = self.space.lock();
                if let Some(ext) = self.allocate(&mut sp, HeadKind::Client, blocks) {
                    return Ok(ext);
                }
                // Only a pass that ran after this write began to wait may
                // declare the log full.
                if first {
                    sp.stuck = false;
                    first = false;
                } else if sp.table.draining().is_empty() && sp.stuck {
                    return Err(VolumeError::NoSpace {
                        live_blocks: sp.table.live_blocks(),
                        segments: sp.table.len() as u32,
                    });
                }
                !sp.table.draining().is_empty()
            };
            if self.stop.load(Ordering::Relaxed) {
                return Err(VolumeError::ShuttingDown);
            }
            if started.elapsed() > ROOM_WAIT {
                let sp = self.space.lock();
                return Err(VolumeError::NoSpace {
                    live_blocks: sp.table.live_blocks(),
                    segments: sp.table.len() as u32,
                });
            }
            if draining {
                self.flush()?;
                continue;
            }
            let mut sp = self.space.lock();
            self.wake_reclaimer();
            self.space_changed
                .wait_for(&mut sp, Duration::from_millis(50));
        }
    }

    /// Blocks left in the reclaimer's head.
    pub(crate) fn reclaim_room(&self, sp: &Space) -> u64 {
        sp.reclaim
            .map_or(0, |h| (self.sb.segment_blocks - h.next) as u64)
    }

    /// Takes `blocks` from a head, all or nothing, opening free segments
    /// as heads fill. Extents never cross a segment.
    pub(crate) fn allocate(
        &self,
        sp: &mut Space,
        kind: HeadKind,
        blocks: u64,
    ) -> Option<Vec<(u64, u64)>> {
        let cap = self.sb.segment_blocks;
        let keep = match kind {
            HeadKind::Client => CLIENT_KEEP,
            HeadKind::Reclaim => 0,
        };
        let head = match kind {
            HeadKind::Client => sp.client,
            HeadKind::Reclaim => sp.reclaim,
        };
        let in_head = head.map_or(0, |h| (cap - h.next) as u64);
        let spare = sp.table.free_count().saturating_sub(keep) as u64 * cap as u64;
        if in_head + spare < blocks {
            // A client head too short for the request is sealed: its
            // garbage (and its unused rest) becomes a victim, where an
            // open head would hold it out of the reclaimer's reach while
            // every sealed segment is nearly all live.
            if let (HeadKind::Client, Some(h)) = (kind, head) {
                if h.next > 0 {
                    sp.table.seal(h.seg);
                    sp.client = None;
                }
            }
            return None;
        }
        let mut out = Vec::new();
        let mut head = head;
        let mut left = blocks;
        while left > 0 {
            let h = match head {
                Some(h) if h.next < cap => h,
                full => {
                    if let Some(h) = full {
                        sp.table.seal(h.seg);
                    }
                    let seg = sp.table.open_free(keep)?;
                    Head { seg, next: 0 }
                }
            };
            let n = left.min((cap - h.next) as u64);
            sp.table.reserve(h.seg, n as u32);
            out.push((h.seg as u64 * cap as u64 + h.next as u64, n));
            head = Some(Head {
                seg: h.seg,
                next: h.next + n as u32,
            });
            left -= n;
        }
        // A full head is sealed at once, not when the next allocation
        // opens another: its garbage must be a victim the reclaimer can
        // take even when that next allocation cannot be served.
        if let Some(h) = head.filter(|h| h.next == cap) {
            sp.table.seal(h.seg);
            head = None;
        }
        match kind {
            HeadKind::Client => sp.client = head,
            HeadKind::Reclaim => sp.reclaim = head,
        }
        Some(out)
    }

    pub(super) fn trim(&self, offset: u64, len: u64, fua: bool) -> Result<()> {
        check_request(&self.sb, offset, len)?;
        self.check_poison()?;
        if let Some(blocks) = inner_blocks(offset, len) {
            let mut sp = self.space.lock();
            let mut scratch = Vec::new();
            self.remap(&mut sp, blocks, None, &mut scratch)
                .map_err(|e| self.poisoned(e))?;
        }
        if fua {
            self.sync_all()?;
        }
        Ok(())
    }

    pub(super) fn write_zeroes(
        &self,
        offset: u64,
        len: u64,
        no_hole: bool,
        fua: bool,
    ) -> Result<()> {
        check_request(&self.sb, offset, len)?;
        if len == 0 {
            return Ok(());
        }
        if no_hole {
            // Zeroes written as data, a chunk at a time.
            let mut at = offset;
            while at < offset + len {
                let n = (offset + len - at).min(MAX_REQUEST);
                self.write(at, &vec![0u8; n as usize], false)?;
                at += n;
            }
        } else {
            let inner = inner_blocks(offset, len);
            let (head_end, tail_start) = match inner {
                Some(b) => (b.l() * BS, (b.r() + 1) * BS),
                None => (offset + len, offset + len),
            };
            if head_end > offset {
                self.write(offset, &vec![0u8; (head_end - offset) as usize], false)?;
            }
            if tail_start < offset + len {
                self.write(
                    tail_start,
                    &vec![0u8; (offset + len - tail_start) as usize],
                    false,
                )?;
            }
            if inner.is_some() {
                self.trim(head_end, tail_start - head_end, false)?;
            }
        }
        if fua {
            self.sync_all()?;
        }
        Ok(())
    }
}
