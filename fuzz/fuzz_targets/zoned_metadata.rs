//! Emulated zoned-device metadata (header and zone tables) read from
//! arbitrary bytes: loading never panics, and a loaded device keeps its
//! invariants under a few operations.
//!
//! The first byte picks the image. Even: the rest of the input is the
//! device as it is. Odd: the rest is cut into the header's fields and two
//! zone-table copies, and each part is sealed with a valid CRC-32C where
//! the spec (`docs/format/emulated-zoned-device.md`) puts it, so the
//! geometry and table checks behind the checksums see arbitrary values.
//! With its second bit set as well, the fields are shaped into a geometry
//! that validates, so the table checks are reached on most inputs. Its
//! third bit picks the format: 2 (four table copies) or 1 (two).
#![no_main]

use ferrite_io::{AlignedBuf, BlockDevice, EmulatedZonedDevice, MemDevice, ZonedDevice};
use libfuzzer_sys::fuzz_target;

const BLOCK: usize = 4096;
/// Header bytes after the magic and version, before the checksum.
const FIELDS: usize = 40;
/// Largest table a sealed image is built for, in zones.
const MAX_SEALED_ZONES: u64 = 4096;

/// A device image of format `version` with a sealed header whose fields
/// are `fields` and sealed table copies (two in format 1, four in format
/// 2) taken from `tables` (equal parts, each at its copy's offset);
/// `None` when the fields name a table too large to build.
fn sealed_image(version: u32, fields: &[u8; FIELDS], tables: &[u8]) -> Option<Vec<u8>> {
    let copies = if version == 1 { 2 } else { 4 };
    let mut image = vec![0u8; BLOCK];
    image[..8].copy_from_slice(b"FZONEMU1");
    image[8..12].copy_from_slice(&version.to_le_bytes());
    image[12..52].copy_from_slice(fields);
    let crc = crc32c::crc32c(&image[..52]);
    image[52..56].copy_from_slice(&crc.to_le_bytes());
    // Copies are laid out by the header's block size and zone count; a
    // block size other than the backing device's is refused before any
    // table is read.
    let block = u32::from_le_bytes(fields[..4].try_into().ok()?) as usize;
    let zones = u64::from(u32::from_le_bytes(fields[20..24].try_into().ok()?));
    if block != BLOCK {
        return Some(image);
    }
    if zones > MAX_SEALED_ZONES {
        return None;
    }
    let body = 12 + 9 * zones as usize;
    let copy = (body + 4).div_ceil(BLOCK) * BLOCK;
    image.resize(BLOCK + copies * copy, 0);
    let part_len = tables.len() / copies;
    for (which, part) in tables.chunks(part_len.max(1)).take(copies).enumerate() {
        let at = BLOCK + which * copy;
        let n = part.len().min(body);
        image[at..at + n].copy_from_slice(&part[..n]);
        let crc = crc32c::crc32c(&image[at..at + body]);
        image[at + body..at + body + 4].copy_from_slice(&crc.to_le_bytes());
    }
    Some(image)
}

/// Header fields describing a device that passes validation, drawn from
/// the first bytes of `raw`: 4 KiB blocks, up to 64 zones of 4 KiB to
/// 8 MiB, limits between one and all of them.
fn valid_fields(raw: &[u8; FIELDS]) -> [u8; FIELDS] {
    let zone_blocks = 1u64 << (raw[0] % 12);
    let capacity = (u64::from(raw[1]) % zone_blocks + 1) * BLOCK as u64;
    let zones = 1 + u32::from(raw[2] % 64);
    let max_open = 1 + u32::from(raw[3]) % zones;
    let max_active = max_open + u32::from(raw[4]) % (zones - max_open + 1);
    let max_append = (1 + u64::from(raw[5] % 32)) * BLOCK as u64;
    let mut f = [0u8; FIELDS];
    f[..4].copy_from_slice(&(BLOCK as u32).to_le_bytes());
    f[4..12].copy_from_slice(&(zone_blocks * BLOCK as u64).to_le_bytes());
    f[12..20].copy_from_slice(&capacity.to_le_bytes());
    f[20..24].copy_from_slice(&zones.to_le_bytes());
    f[24..28].copy_from_slice(&max_open.to_le_bytes());
    f[28..32].copy_from_slice(&max_active.to_le_bytes());
    f[32..40].copy_from_slice(&max_append.to_le_bytes());
    f
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let sealed;
    let image = if pick & 1 == 1 {
        let Some(raw) = rest.get(..FIELDS) else {
            return;
        };
        let mut fields: [u8; FIELDS] = raw.try_into().expect("40 bytes");
        if pick & 2 == 2 {
            fields = valid_fields(&fields);
        }
        let version = if pick & 4 == 4 { 2 } else { 1 };
        let Some(img) = sealed_image(version, &fields, &rest[FIELDS..]) else {
            return;
        };
        sealed = img;
        &sealed[..]
    } else {
        rest
    };
    let dev = MemDevice::new();
    let len = image.len().div_ceil(BLOCK).max(1) * BLOCK;
    let mut buf = AlignedBuf::zeroed(len);
    buf[..image.len()].copy_from_slice(image);
    if dev.write_at(&buf, 0).is_err() {
        return;
    }
    if let Ok(zoned) = EmulatedZonedDevice::load(dev) {
        let g = *zoned.geometry();
        if g.zone_count > 4096 {
            return;
        }
        for z in zoned.report_zones(0, g.zone_count) {
            assert!(z.write_pointer >= z.start && z.write_pointer <= z.start + z.capacity);
        }
        let _ = zoned.append(0, &AlignedBuf::zeroed(g.block_size as usize));
    }
});
