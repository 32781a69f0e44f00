//! "Origin": an EBS-index-like structure (paper §2.1). The memtable is a
//! page table (a hash map of 64-block pages) updated per block in O(1);
//! once it holds 128K blocks it becomes an immutable sorted array of runs
//! (consecutive blocks with continuous locations), an SSTable. Reads look
//! in the memtable, then in the SSTables newest first. When more than
//! eight SSTables pile up they are merged into one, newest data winning
//! and tombstones dropped, so memory tracks live data rather than history.

use std::collections::HashMap;

use ferrite_rask::{BlockRange, PhysicalRun, RangeValue, Segment, UnfoundList};

use super::segments::tile;
use super::SerialIndex;

const PAGE_BLOCKS: u64 = 64;
const MEMTABLE_BLOCKS: u64 = 128 * 1024;
const MAX_TABLES: usize = 8;
/// An unwritten slot of a memtable page.
const EMPTY: u64 = u64::MAX - 1;

/// `(first, last, value bits)`, sorted and disjoint within one table.
type Run = (u64, u64, u64);

pub struct Origin {
    memtable_blocks: u64,
    max_tables: usize,
    mem: HashMap<u64, Box<[u64; PAGE_BLOCKS as usize]>>,
    mem_blocks: u64,
    /// Oldest first.
    tables: Vec<Vec<Run>>,
    unfound: UnfoundList,
    found: Vec<(BlockRange, Option<PhysicalRun>)>,
}

impl Default for Origin {
    fn default() -> Self {
        Self::with_limits(MEMTABLE_BLOCKS, MAX_TABLES)
    }
}

impl Origin {
    /// Freezes the memtable at `memtable_blocks` blocks and merges SSTables
    /// beyond `max_tables`.
    pub fn with_limits(memtable_blocks: u64, max_tables: usize) -> Self {
        Self {
            memtable_blocks: memtable_blocks.max(1),
            max_tables: max_tables.max(1),
            mem: HashMap::new(),
            mem_blocks: 0,
            tables: Vec::new(),
            unfound: UnfoundList::default(),
            found: Vec::new(),
        }
    }

    fn set(&mut self, b: u64, bits: u64) {
        let page = self
            .mem
            .entry(b / PAGE_BLOCKS)
            .or_insert_with(|| Box::new([EMPTY; PAGE_BLOCKS as usize]));
        let slot = &mut page[(b % PAGE_BLOCKS) as usize];
        if *slot == EMPTY {
            self.mem_blocks += 1;
        }
        *slot = bits;
    }

    fn write(&mut self, r: BlockRange, v: PhysicalRun) {
        for b in r.l()..=r.r() {
            let bits = if v.is_tombstone() {
                v.to_bits()
            } else {
                v.offset(b - r.l()).to_bits()
            };
            self.set(b, bits);
        }
        if self.mem_blocks >= self.memtable_blocks {
            self.freeze();
        }
    }

    /// Turns the memtable into an SSTable of runs.
    fn freeze(&mut self) {
        let mut pages: Vec<_> = self.mem.drain().collect();
        pages.sort_unstable_by_key(|(p, _)| *p);
        let mut runs: Vec<Run> = Vec::new();
        for (p, slots) in pages {
            for (i, &bits) in slots.iter().enumerate() {
                if bits == EMPTY {
                    continue;
                }
                let b = p * PAGE_BLOCKS + i as u64;
                if let Some(last) = runs.last_mut() {
                    let next_bits = if bits == PhysicalRun::TOMBSTONE.to_bits() {
                        last.2
                    } else {
                        PhysicalRun::from_bits(last.2).offset(b - last.0).to_bits()
                    };
                    if last.1 + 1 == b && next_bits == bits {
                        last.1 = b;
                        continue;
                    }
                }
                runs.push((b, b, bits));
            }
        }
        self.mem_blocks = 0;
        self.tables.push(runs);
        if self.tables.len() > self.max_tables {
            let mut merged = Vec::new();
            for t in self.tables.drain(..).rev() {
                merged = if merged.is_empty() {
                    t
                } else {
                    overlay(&merged, &t)
                };
            }
            let tomb = PhysicalRun::TOMBSTONE.to_bits();
            merged.retain(|r| r.2 != tomb);
            self.tables.push(merged);
        }
    }
}

/// The runs of `newer`, plus the parts of `older` runs that `newer` does
/// not cover (values shifted), in order.
fn overlay(newer: &[Run], older: &[Run]) -> Vec<Run> {
    let tomb = PhysicalRun::TOMBSTONE.to_bits();
    let shift = |bits: u64, by: u64| {
        if bits == tomb {
            bits
        } else {
            PhysicalRun::from_bits(bits).offset(by).to_bits()
        }
    };
    let mut out: Vec<Run> = newer.to_vec();
    let mut k = 0;
    for &(l, r, bits) in older {
        while k < newer.len() && newer[k].1 < l {
            k += 1;
        }
        let mut at = l;
        let mut j = k;
        loop {
            match newer.get(j) {
                Some(&(nl, nr, _)) if nl <= r => {
                    if nl > at {
                        out.push((at, nl - 1, shift(bits, at - l)));
                    }
                    if nr >= r {
                        break;
                    }
                    at = nr + 1;
                    j += 1;
                }
                _ => {
                    out.push((at, r, shift(bits, at - l)));
                    break;
                }
            }
        }
    }
    out.sort_unstable_by_key(|x| x.0);
    out
}

impl SerialIndex for Origin {
    fn put(&mut self, r: BlockRange, v: PhysicalRun) {
        self.write(r, v);
    }

    fn delete(&mut self, r: BlockRange) {
        self.write(r, PhysicalRun::TOMBSTONE);
    }

    fn get(&mut self, r: BlockRange, out: &mut Vec<Segment<PhysicalRun>>) {
        self.found.clear();
        self.unfound.reset(r);
        let tomb = PhysicalRun::TOMBSTONE.to_bits();
        // The memtable, block by block.
        if !self.mem.is_empty() {
            for b in r.l()..=r.r() {
                let Some(page) = self.mem.get(&(b / PAGE_BLOCKS)) else {
                    continue;
                };
                let bits = page[(b % PAGE_BLOCKS) as usize];
                if bits == EMPTY {
                    continue;
                }
                let found = &mut self.found;
                self.unfound.ablate(BlockRange::block(b), |hit| {
                    found.push((hit, (bits != tomb).then(|| PhysicalRun::from_bits(bits))));
                });
            }
        }
        for t in self.tables.iter().rev() {
            if self.unfound.is_empty() {
                break;
            }
            let mut i = t.partition_point(|run| run.1 < r.l());
            while let Some(&(l, h, bits)) = t.get(i) {
                if l > r.r() {
                    break;
                }
                let Ok(range) = BlockRange::new(l, h) else {
                    break;
                };
                let found = &mut self.found;
                self.unfound.ablate(range, |hit| {
                    let v =
                        (bits != tomb).then(|| PhysicalRun::from_bits(bits).offset(hit.l() - l));
                    found.push((hit, v));
                });
                i += 1;
            }
        }
        tile(out, r, &mut self.found);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::range_index::{synthetic_ops, verify};

    #[test]
    fn freezing_and_merging_keep_the_newest_data() {
        let ops = synthetic_ops(20_000, 9, 3000, 0.7, 0.1);
        let o = crate::range_index::Locked(parking_lot::Mutex::new(Origin::with_limits(500, 3)));
        let checked = verify(&o, &ops).unwrap_or_else(|e| panic!("{e}"));
        assert!(checked > 1000);
        assert!(!o.0.lock().tables.is_empty());
    }
}
