//! RASK behind the experiment's interface.

use ferrite_rask::{BlockRange, PhysicalRun, Rask, RaskOptions, Segment};

use super::RangeIndex;

#[derive(Default)]
pub struct RaskIndex {
    index: Rask<PhysicalRun>,
}

impl RaskIndex {
    /// RASK with `cap`-entry leaves (and the default merge threshold);
    /// `None` for a capacity the index refuses.
    pub fn with_leaf_capacity(cap: usize) -> Option<Self> {
        let index = Rask::with_options(RaskOptions {
            leaf_capacity: cap,
            merge_threshold: None,
        })
        .ok()?;
        Some(Self { index })
    }
}

impl RangeIndex for RaskIndex {
    fn put(&self, r: BlockRange, v: PhysicalRun) {
        // The replayer only produces valid runs; a refusal would be a bug
        // in the stream, and is surfaced by verification as a missing run.
        let _ = self.index.put(r, v);
    }

    fn delete(&self, r: BlockRange) {
        self.index.delete(r);
    }

    fn get(&self, r: BlockRange, out: &mut Vec<Segment<PhysicalRun>>) {
        self.index.get_into(r, out);
    }

    fn settle(&self) {
        self.index.reclaim();
    }

    fn extra(&self, writes: u64) -> Vec<(String, f64)> {
        let s = self.index.stats();
        let writes = writes.max(1) as f64;
        vec![
            ("leaves".into(), s.leaves as f64),
            ("entries".into(), s.entries as f64),
            ("splits".into(), s.splits as f64),
            ("append_splits".into(), s.append_splits as f64),
            ("cuts".into(), s.cuts as f64),
            (
                "split_no_divide_fraction".into(),
                if s.cuts == 0 {
                    1.0
                } else {
                    1.0 - s.dividing_cuts as f64 / s.cuts as f64
                },
            ),
            (
                "split_no_straddle_fraction".into(),
                if s.cuts == 0 {
                    1.0
                } else {
                    1.0 - s.straddling_cuts as f64 / s.cuts as f64
                },
            ),
            ("gc_fraction_of_writes".into(), s.gc_writes as f64 / writes),
            (
                "full_leaf_fraction_of_writes".into(),
                s.full_leaf_writes as f64 / writes,
            ),
            (
                "normal_gc_fraction_of_gcs".into(),
                s.normal_gcs as f64 / s.gc_writes.max(1) as f64,
            ),
            ("merges".into(), s.merges as f64),
            ("resplits".into(), s.resplits as f64),
            (
                "merge_resplit_fraction_of_writes".into(),
                (s.merges + s.resplits) as f64 / writes,
            ),
            ("fragments".into(), s.fragments as f64),
            ("narrow_leaves".into(), s.narrow_leaves as f64),
            ("packed_leaves".into(), s.packed_leaves as f64),
            ("compact_leaves".into(), s.compact_leaves as f64),
            ("wide_leaves".into(), s.wide_leaves as f64),
            ("index_bytes".into(), s.index_bytes as f64),
            ("entry_bytes".into(), s.entry_bytes as f64),
            ("free_slot_bytes".into(), s.free_slot_bytes as f64),
            ("header_bytes".into(), s.header_bytes as f64),
            ("art_bytes".into(), s.art_bytes as f64),
        ]
    }
}
