//! The Eager adaptation of a point B-tree to range keys (paper §3.4): the
//! stored ranges never overlap; a write trims, splits or removes every
//! range it touches before inserting itself.

use std::collections::BTreeMap;

use ferrite_rask::{BlockRange, PhysicalRun, RangeValue, Segment};

use super::segments::{emit, gap};
use super::SerialIndex;

#[derive(Default)]
pub struct EagerBTree {
    /// left -> (right, value bits), disjoint.
    map: BTreeMap<u64, (u64, u64)>,
}

impl EagerBTree {
    fn clear(&mut self, r: BlockRange) {
        // A range starting left of r that reaches into it.
        if let Some((&l, &(right, bits))) = self.map.range(..r.l()).next_back() {
            if right >= r.l() {
                self.map.insert(l, (r.l() - 1, bits));
                if right > r.r() {
                    let v = PhysicalRun::from_bits(bits).offset(r.r() + 1 - l);
                    self.map.insert(r.r() + 1, (right, v.to_bits()));
                }
            }
        }
        let inside: Vec<(u64, (u64, u64))> = self
            .map
            .range(r.l()..=r.r())
            .map(|(k, v)| (*k, *v))
            .collect();
        for (l, (right, bits)) in inside {
            self.map.remove(&l);
            if right > r.r() {
                let v = PhysicalRun::from_bits(bits).offset(r.r() + 1 - l);
                self.map.insert(r.r() + 1, (right, v.to_bits()));
            }
        }
    }
}

impl SerialIndex for EagerBTree {
    fn put(&mut self, r: BlockRange, v: PhysicalRun) {
        self.clear(r);
        self.map.insert(r.l(), (r.r(), v.to_bits()));
    }

    fn delete(&mut self, r: BlockRange) {
        self.clear(r);
    }

    fn get(&mut self, r: BlockRange, out: &mut Vec<Segment<PhysicalRun>>) {
        let mut at = r.l();
        let before = self.map.range(..r.l()).next_back().map(|(k, v)| (*k, *v));
        let inside = self.map.range(r.l()..=r.r()).map(|(k, v)| (*k, *v));
        for (l, (right, bits)) in before.into_iter().chain(inside) {
            let Ok(whole) = BlockRange::new(l, right) else {
                continue;
            };
            let Some(hit) = whole.intersect(&r) else {
                continue;
            };
            if hit.l() > at {
                gap(out, at, hit.l() - 1);
            }
            emit(
                out,
                hit,
                Some(PhysicalRun::from_bits(bits).divide(whole, hit)),
            );
            at = hit.r().saturating_add(1);
        }
        if at <= r.r() && out.last().is_none_or(|s| s.range.r() < r.r()) {
            gap(out, at, r.r());
        }
    }
}
