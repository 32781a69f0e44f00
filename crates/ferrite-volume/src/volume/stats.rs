//! What an open volume reports: [`VolumeStats`] (sizes, counters,
//! amplification) and `check`, the map held against the segment table.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{for_segments, Inner, Volume, BS};
use crate::block_map::BlockMap;
use crate::error::{Result, VolumeError};
use crate::superblock::Superblock;

/// Counters and sizes of an open volume.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct VolumeStats {
    pub logical_bytes: u64,
    pub physical_bytes: u64,
    pub segments: u32,
    pub free_segments: u32,
    pub live_blocks: u64,
    pub map_entries: u64,
    pub map_log_bytes: u64,
    /// Blocks clients wrote.
    pub client_blocks: u64,
    /// Blocks the reclaimer copied.
    pub reclaim_blocks: u64,
    pub reclaimed_segments: u64,
    /// Device writes carrying client data (one per batch and segment).
    pub data_writes: u64,
    pub flushes: u64,
    pub map_recovery_seconds: f64,
}

impl VolumeStats {
    /// Segments in use (not free) over the live data they hold.
    pub fn space_amplification(&self) -> f64 {
        let used = (self.segments - self.free_segments) as f64;
        let seg_blocks = self.physical_bytes as f64 / self.segments.max(1) as f64 / BS as f64;
        used * seg_blocks / self.live_blocks.max(1) as f64
    }

    /// Blocks written to the log per block clients wrote.
    pub fn write_amplification(&self) -> f64 {
        (self.client_blocks + self.reclaim_blocks) as f64 / self.client_blocks.max(1) as f64
    }
}

/// What `check` found.
#[derive(Debug, Clone, Default)]
pub struct CheckReport {
    pub entries: u64,
    pub mapped_blocks: u64,
    pub segments_in_use: u32,
    pub problems: Vec<String>,
}

pub(super) fn live_counts(sb: &Superblock, map: &dyn BlockMap) -> Result<Vec<u32>> {
    let mut live = vec![0u32; sb.segments as usize];
    let seg_blocks = sb.segment_blocks as u64;
    let log_blocks = sb.segments as u64 * seg_blocks;
    let mut bad = None;
    map.for_each(&mut |range, run| {
        let end = run.block().checked_add(range.len());
        if run.file() != 0 || end.is_none_or(|e| e > log_blocks) || range.r() >= sb.logical_blocks()
        {
            bad.get_or_insert(format!(
                "{range} -> {run:?} lies outside the volume or its data log"
            ));
            return;
        }
        for_segments(seg_blocks, run.block(), range.len(), |seg, n| {
            live[seg as usize] += n as u32;
        });
    });
    match bad {
        Some(reason) => Err(VolumeError::corrupt("block map", reason)),
        None => Ok(live),
    }
}

impl Volume {
    pub fn stats(&self) -> VolumeStats {
        self.inner.stats()
    }

    /// Checks that every map entry lies inside the volume and the data
    /// log, and that the segment table's live counts match the map.
    pub fn check(&self) -> Result<CheckReport> {
        self.inner.check()
    }
}

impl Inner {
    /// Called by the reclaimer when a pass gave up or made room.
    pub(crate) fn note_reclaim(&self, stuck: bool, copied: u64) {
        self.counters
            .reclaim_blocks
            .fetch_add(copied, Ordering::Relaxed);
        let mut sp = self.space.lock();
        sp.stuck = stuck;
        self.space_changed.notify_all();
    }

    pub(super) fn stats(&self) -> VolumeStats {
        let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let sp = self.space.lock();
        VolumeStats {
            logical_bytes: self.sb.logical_bytes,
            physical_bytes: self.sb.physical_bytes(),
            segments: self.sb.segments,
            free_segments: sp.table.free_count() as u32,
            live_blocks: sp.table.live_blocks(),
            map_entries: self.map.entries(),
            map_log_bytes: self.map.log_bytes(),
            client_blocks: c(&self.counters.client_blocks),
            reclaim_blocks: c(&self.counters.reclaim_blocks),
            reclaimed_segments: c(&self.counters.reclaimed_segments),
            data_writes: c(&self.counters.data_writes),
            flushes: c(&self.counters.flushes),
            map_recovery_seconds: self.map.recovery_seconds(),
        }
    }

    pub(super) fn check(&self) -> Result<CheckReport> {
        let sp = self.space.lock();
        let mut report = CheckReport::default();
        match live_counts(&self.sb, self.map.as_ref()) {
            Ok(live) => {
                for (seg, (&want, info)) in live.iter().zip(sp.table.infos()).enumerate() {
                    if want != info.live {
                        report.problems.push(format!(
                            "segment {seg}: the map points at {want} blocks, the table counts {}",
                            info.live
                        ));
                    }
                    if want > 0 && info.state == crate::segment_table::SegmentState::Free {
                        report.problems.push(format!(
                            "segment {seg} is free but holds {want} live blocks"
                        ));
                    }
                }
            }
            Err(e) => report.problems.push(e.to_string()),
        }
        let mut last: Option<u64> = None;
        self.map.for_each(&mut |range, _| {
            report.entries += 1;
            report.mapped_blocks += range.len();
            if last.is_some_and(|l| range.l() <= l) {
                report
                    .problems
                    .push(format!("entry {range} overlaps or precedes the one before"));
            }
            last = Some(range.r());
        });
        report.segments_in_use = sp.table.used_count() as u32;
        if report.mapped_blocks != sp.table.live_blocks() {
            report.problems.push(format!(
                "the map holds {} blocks, the segments count {} live",
                report.mapped_blocks,
                sp.table.live_blocks()
            ));
        }
        Ok(report)
    }
}
