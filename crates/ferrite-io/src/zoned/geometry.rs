//! The shape and resource limits of a zoned device.

use crate::error::{DeviceError, Result};

/// Zone layout and limits.
///
/// The default is a large-zone drive (Western Digital Ultrastar DC ZN540:
/// 2 GiB zones with 1077 MiB capacity, 14 open and 14 active zones) scaled
/// down 16× in zone size, to 128 MiB zones with 67 MiB capacity, keeping the
/// capacity-to-size ratio (≈ 0.52) and the open/active limits. Scaling keeps
/// the device's constraints (few open zones, a gap between capacity and
/// size, large erase units) while letting a test or benchmark fill and
/// reclaim many zones in minutes on an ordinary disk. 64 zones give 8 GiB of
/// address space and 4.2 GiB of writable capacity; the backing file is
/// sparse, so only written bytes take disk space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZoneGeometry {
    /// Logical block size; every I/O is a multiple of it.
    pub block_size: u32,
    /// Bytes of address space per zone (a power of two).
    pub zone_size: u64,
    /// Writable bytes per zone (≤ `zone_size`, a multiple of `block_size`).
    pub zone_capacity: u64,
    pub zone_count: u32,
    /// Most zones that may be implicitly or explicitly open at once.
    pub max_open: u32,
    /// Most zones that may be open or closed (holding a write pointer
    /// between start and capacity) at once.
    pub max_active: u32,
    /// Largest single zone append in bytes (the ZNS "ZASL").
    pub max_append: u64,
}

impl Default for ZoneGeometry {
    fn default() -> Self {
        Self {
            block_size: 4096,
            zone_size: 128 << 20,
            zone_capacity: 67 << 20,
            zone_count: 64,
            max_open: 14,
            max_active: 14,
            max_append: 1 << 20,
        }
    }
}

impl ZoneGeometry {
    /// A small geometry for tests: 1 MiB zones with 768 KiB capacity.
    pub fn small(zone_count: u32, max_open: u32, max_active: u32) -> Self {
        Self {
            block_size: 4096,
            zone_size: 1 << 20,
            zone_capacity: 768 << 10,
            zone_count,
            max_open,
            max_active,
            max_append: 128 << 10,
        }
    }

    /// Checks that the numbers describe a device that can exist.
    pub fn validate(&self) -> Result<()> {
        let bad = |why: String| Err(DeviceError::InvalidConfig(why));
        let bs = u64::from(self.block_size);
        crate::block_device::check_block_size(self.block_size as usize)?;
        if !self.zone_size.is_power_of_two() || self.zone_size < bs {
            return bad(format!(
                "zone size {} is not a power of two ≥ the block size",
                self.zone_size
            ));
        }
        if self.zone_capacity == 0
            || self.zone_capacity > self.zone_size
            || !self.zone_capacity.is_multiple_of(bs)
        {
            return bad(format!(
                "zone capacity {} must be a non-zero multiple of {bs} no larger than the zone size",
                self.zone_capacity
            ));
        }
        if self.zone_count == 0 {
            return bad("a zoned device needs at least one zone".into());
        }
        if self
            .zone_size
            .checked_mul(u64::from(self.zone_count))
            .is_none_or(|a| a > 1 << 60)
        {
            return bad(format!(
                "{} zones of {} bytes exceed the 2^60-byte address space limit",
                self.zone_count, self.zone_size
            ));
        }
        if self.max_open == 0 || self.max_active < self.max_open {
            return bad(format!(
                "limits must satisfy 0 < max_open ({}) ≤ max_active ({})",
                self.max_open, self.max_active
            ));
        }
        if self.max_append < bs || !self.max_append.is_multiple_of(bs) {
            return bad(format!(
                "max append {} must be a multiple of {bs}",
                self.max_append
            ));
        }
        Ok(())
    }

    /// Device address of zone `zone`'s first byte.
    pub fn zone_start(&self, zone: u32) -> u64 {
        u64::from(zone) * self.zone_size
    }

    /// The zone holding device address `offset`, and the offset within it.
    pub fn locate(&self, offset: u64) -> (u64, u64) {
        (offset / self.zone_size, offset % self.zone_size)
    }

    /// Total address space in bytes.
    pub fn address_space(&self) -> u64 {
        u64::from(self.zone_count) * self.zone_size
    }

    /// Total writable bytes.
    pub fn total_capacity(&self) -> u64 {
        u64::from(self.zone_count) * self.zone_capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid_and_scaled_from_zn540() {
        let g = ZoneGeometry::default();
        g.validate().unwrap();
        assert_eq!(g.zone_size * 16, 2 << 30);
        assert_eq!((g.max_open, g.max_active), (14, 14));
    }

    #[test]
    fn nonsense_is_rejected() {
        let g = ZoneGeometry::default();
        for bad in [
            ZoneGeometry {
                zone_size: 3 << 20,
                ..g
            },
            ZoneGeometry {
                zone_capacity: g.zone_size + 4096,
                ..g
            },
            ZoneGeometry {
                zone_capacity: 4095,
                ..g
            },
            ZoneGeometry { zone_count: 0, ..g },
            ZoneGeometry {
                max_open: 15,
                max_active: 14,
                ..g
            },
            ZoneGeometry {
                block_size: 1000,
                ..g
            },
            ZoneGeometry {
                zone_size: 1 << 62,
                zone_count: 8,
                ..g
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
