//! RASK behind the experiment's interface.

use ferrite_rask::{BlockRange, PhysicalRun, Rask, RaskOptions, RaskStats, Segment};
use serde::{Deserialize, Serialize};

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

    fn counters(&self, writes: u64) -> Option<RaskCounters> {
        Some(RaskCounters::of(&self.index.stats(), writes))
    }
}

/// RASK's counters after a replay, with the fractions the experiment
/// judges taken over the replay's writes (puts and deletes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RaskCounters {
    pub leaves: u64,
    pub entries: u64,
    pub splits: u64,
    pub append_splits: u64,
    pub cuts: u64,
    /// Cuts that left every written range's visible data in one leaf (1
    /// with no cuts).
    pub split_no_divide_fraction: f64,
    /// Cuts that fell outside every written range holding visible data (1
    /// with no cuts).
    pub split_no_straddle_fraction: f64,
    pub gc_fraction_of_writes: f64,
    pub full_leaf_fraction_of_writes: f64,
    pub normal_gc_fraction_of_gcs: f64,
    pub merges: u64,
    pub resplits: u64,
    pub merge_resplit_fraction_of_writes: f64,
    pub fragments: u64,
    pub narrow_leaves: u64,
    pub packed_leaves: u64,
    pub compact_leaves: u64,
    pub wide_leaves: u64,
    pub index_bytes: u64,
    pub entry_bytes: u64,
    pub free_slot_bytes: u64,
    pub header_bytes: u64,
    pub art_bytes: u64,
}

impl RaskCounters {
    /// The counters of `s`, an index that took `writes` puts and deletes.
    pub fn of(s: &RaskStats, writes: u64) -> Self {
        let per_write = |n: u64| n as f64 / writes.max(1) as f64;
        let kept = |n: u64| {
            if s.cuts == 0 {
                1.0
            } else {
                1.0 - n as f64 / s.cuts as f64
            }
        };
        Self {
            leaves: s.leaves,
            entries: s.entries,
            splits: s.splits,
            append_splits: s.append_splits,
            cuts: s.cuts,
            split_no_divide_fraction: kept(s.dividing_cuts),
            split_no_straddle_fraction: kept(s.straddling_cuts),
            gc_fraction_of_writes: per_write(s.gc_writes),
            full_leaf_fraction_of_writes: per_write(s.full_leaf_writes),
            normal_gc_fraction_of_gcs: s.normal_gcs as f64 / s.gc_writes.max(1) as f64,
            merges: s.merges,
            resplits: s.resplits,
            merge_resplit_fraction_of_writes: per_write(s.merges + s.resplits),
            fragments: s.fragments,
            narrow_leaves: s.narrow_leaves,
            packed_leaves: s.packed_leaves,
            compact_leaves: s.compact_leaves,
            wide_leaves: s.wide_leaves,
            index_bytes: s.index_bytes,
            entry_bytes: s.entry_bytes,
            free_slot_bytes: s.free_slot_bytes,
            header_bytes: s.header_bytes,
            art_bytes: s.art_bytes,
        }
    }

    /// Every counter as (name, value), in the order declared, for a
    /// listing.
    pub fn listed(&self) -> Vec<(String, f64)> {
        // A struct serializes its fields in declaration order, which a
        // JSON map would sort away; the visitor below keeps it.
        serde_json::to_string(self)
            .ok()
            .and_then(|text| serde_json::from_str::<Listed>(&text).ok())
            .map_or_else(Vec::new, |l| l.0)
    }
}

/// A JSON object's numeric members, in the order they stand.
struct Listed(Vec<(String, f64)>);

impl<'de> Deserialize<'de> for Listed {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> serde::de::Visitor<'de> for Members {
            type Value = Listed;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of numbers")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Listed, A::Error> {
                let mut out = Vec::new();
                while let Some(member) = m.next_entry::<String, f64>()? {
                    out.push(member);
                }
                Ok(Listed(out))
            }
        }
        d.deserialize_map(Members)
    }
}

#[cfg(test)]
mod tests {
    use super::super::ReplayResult;
    use super::*;

    fn replayed() -> ReplayResult {
        ReplayResult {
            index: "rask".into(),
            ops: 4,
            seconds: 1.0,
            ops_per_sec: 4.0,
            memory_bytes: None,
            mean_ns: 1.0,
            p50_ns: 1,
            p99_ns: 1,
            p999_ns: 1,
            p9999_ns: 1,
            rask: None,
        }
    }

    #[test]
    fn fractions_are_taken_over_cuts_and_writes() {
        let s = RaskStats {
            cuts: 4,
            dividing_cuts: 1,
            gc_writes: 2,
            full_leaf_writes: 5,
            leaves: 3,
            ..RaskStats::default()
        };
        let c = RaskCounters::of(&s, 10);
        assert_eq!(c.split_no_divide_fraction, 0.75);
        assert_eq!(c.split_no_straddle_fraction, 1.0);
        assert_eq!(c.gc_fraction_of_writes, 0.2);
        assert_eq!(c.full_leaf_fraction_of_writes, 0.5);
        assert_eq!(c.leaves, 3);
        let listed = c.listed();
        assert_eq!(listed.len(), 23);
        assert_eq!(listed[0], ("leaves".to_string(), 3.0));
        assert_eq!(listed[22].0, "art_bytes");
    }

    #[test]
    fn saved_counters_read_back_typed_or_as_older_pairs() {
        let mut r = replayed();
        r.rask = Some(RaskCounters {
            leaves: 7,
            gc_fraction_of_writes: 0.25,
            ..RaskCounters::default()
        });
        let text = serde_json::to_string(&r).unwrap();
        let back: ReplayResult = serde_json::from_str(&text).unwrap();
        assert_eq!(back.rask, r.rask);

        // An older result: the counters as (name, value) pairs, counts as
        // floats, under `extra`; a baseline's list is empty.
        let mut old = serde_json::to_value(replayed()).unwrap();
        old["extra"] = serde_json::json!([["leaves", 7.0], ["gc_fraction_of_writes", 0.25]]);
        let back: ReplayResult = serde_json::from_value(old.clone()).unwrap();
        assert_eq!(back.rask, r.rask);
        old["extra"] = serde_json::json!([]);
        let back: ReplayResult = serde_json::from_value(old.clone()).unwrap();
        assert_eq!(back.rask, None);
        // A name no field has is refused, not dropped.
        old["extra"] = serde_json::json!([["leafs", 7.0]]);
        assert!(serde_json::from_value::<ReplayResult>(old).is_err());
    }
}
