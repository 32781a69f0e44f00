//! What the integration tests share: reading an index back block by block.

use std::collections::BTreeMap;

use ferrite_rask::{PhysicalRun, Rask};

/// Every block `index` maps, with the bits of its physical location.
pub fn mapped_blocks(index: &Rask<PhysicalRun>) -> BTreeMap<u64, u64> {
    let mut seen = BTreeMap::new();
    index.for_each_mapped(|r, v| {
        for b in r.l()..=r.r() {
            seen.insert(b, v.offset(b - r.l()).to_bits());
        }
    });
    seen
}
