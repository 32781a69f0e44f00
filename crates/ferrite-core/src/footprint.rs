//! Where a store's bytes on its devices are, by kind: the answer to "what
//! does this store cost on the SSD, and why".
//!
//! Each engine fills one [`Footprint`] from what it knows of its own
//! files and zones (allocated bytes, not apparent lengths: a sparse file's
//! holes cost nothing). The kinds partition the store's bytes: every byte
//! is counted under exactly one kind, so the parts add up to the whole.

/// What a part of a store's bytes holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SpaceKind {
    /// Live pages, tables or leaves: keys, values and their framing. The
    /// unused room inside them is here too unless the engine measured it
    /// as [`SpaceKind::Slack`].
    Data,
    /// Unused room inside live pages (a page's free gap), where measured.
    Slack,
    /// Whole pages or extents the store owns and will reuse, holding
    /// nothing live: free pages, freed table extents (obsolete tables).
    Free,
    /// Torn-page protection: a double-write area.
    DoubleWrite,
    /// Dirty pages evicted before a checkpoint installs them.
    Spill,
    /// Write-ahead logs.
    Log,
    /// Manifests, meta pages, carry-over slots, metadata logs.
    Metadata,
    /// Written zone space whose contents are dead, waiting for
    /// reclamation and a zone reset.
    Garbage,
}

impl SpaceKind {
    /// Every kind, in report order.
    pub const ALL: [SpaceKind; 8] = [
        SpaceKind::Data,
        SpaceKind::Slack,
        SpaceKind::Free,
        SpaceKind::DoubleWrite,
        SpaceKind::Spill,
        SpaceKind::Log,
        SpaceKind::Metadata,
        SpaceKind::Garbage,
    ];

    /// A short name for reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            SpaceKind::Data => "data",
            SpaceKind::Slack => "slack",
            SpaceKind::Free => "free",
            SpaceKind::DoubleWrite => "double_write",
            SpaceKind::Spill => "spill",
            SpaceKind::Log => "log",
            SpaceKind::Metadata => "metadata",
            SpaceKind::Garbage => "garbage",
        }
    }
}

/// A store's bytes on its devices, by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Footprint {
    bytes: [u64; SpaceKind::ALL.len()],
}

impl Footprint {
    /// Counts `bytes` more under `kind`.
    pub fn add(&mut self, kind: SpaceKind, bytes: u64) {
        let slot = &mut self.bytes[kind as usize];
        *slot = slot.saturating_add(bytes);
    }

    /// The bytes counted under `kind`.
    pub fn get(&self, kind: SpaceKind) -> u64 {
        self.bytes[kind as usize]
    }

    /// Every byte counted.
    pub fn total(&self) -> u64 {
        self.bytes.iter().fold(0u64, |a, &b| a.saturating_add(b))
    }

    /// True when nothing was counted (an engine that does not report).
    pub fn is_empty(&self) -> bool {
        self.total() == 0
    }

    /// Each kind with its bytes, in report order, zeros included.
    pub fn parts(&self) -> impl Iterator<Item = (SpaceKind, u64)> + '_ {
        SpaceKind::ALL.iter().map(|&k| (k, self.get(k)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_add_up_to_the_total_in_report_order() {
        let mut f = Footprint::default();
        assert!(f.is_empty());
        f.add(SpaceKind::Data, 100);
        f.add(SpaceKind::Log, 7);
        f.add(SpaceKind::Data, 5);
        assert_eq!(f.get(SpaceKind::Data), 105);
        assert_eq!(f.total(), 112);
        let kinds: Vec<&str> = f.parts().map(|(k, _)| k.name()).collect();
        assert_eq!(kinds[0], "data");
        assert_eq!(kinds.len(), SpaceKind::ALL.len());
        assert_eq!(f.parts().map(|(_, b)| b).sum::<u64>(), f.total());
        for (i, k) in SpaceKind::ALL.iter().enumerate() {
            assert_eq!(*k as usize, i, "ALL is in declaration order");
        }
    }
}
