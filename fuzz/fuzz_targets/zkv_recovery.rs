//! ZKV decoders and recovery: leaf pages, MetaLog snapshots, value-log
//! zone scans (in chunks of any size) and a whole
//! recovery from a device whose MetaLog holds arbitrary (checksummed)
//! bytes and whose WAL zone holds arbitrary bytes never panic. Leaf pages
//! are also fed sealed with a valid checksum, so the cell checks behind it
//! see arbitrary bytes too.
#![no_main]

use std::sync::Arc;

use ferrite_core::{KvStore, Options, SyncMode};
use ferrite_io::{AlignedBuf, EmulatedZonedDevice, MemDevice, ZoneGeometry, ZonedDevice};
use ferrite_zkv::metalog::Snapshot;
use ferrite_zkv::page::LeafPage;
use ferrite_zkv::vlog::{loc_addr, loc_len, scan};
use ferrite_zkv::{ZkvOptions, ZkvStore};
use libfuzzer_sys::fuzz_target;

fn frame(body: &[u8]) -> AlignedBuf {
    ferrite_zkv::metalog::encode_frame(1, body, 4096)
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    match selector % 5 {
        0 | 4 => {
            let mut page = rest.to_vec();
            page.resize(4096, 0);
            if selector % 5 == 4 {
                // Magic, then the checksum over everything after it.
                page[..4].copy_from_slice(&ferrite_zkv::page::MAGIC.to_le_bytes());
                let crc = crc32c::crc32c(&page[8..]);
                page[4..8].copy_from_slice(&crc.to_le_bytes());
            }
            if let Ok(p) = LeafPage::parse(&page, || "fuzz".into()) {
                for i in 0..p.len() {
                    let _ = (p.key(i), p.value(i));
                }
                let _ = p.get(b"key");
            }
        }
        1 => {
            let _ = Snapshot::decode(1, rest);
        }
        2 => {
            // Scan as the reclaimer does: a chunk at a time, carrying over
            // what a cut-off record left.
            let cut = usize::from(rest.first().copied().unwrap_or(0)) * 16 + 1;
            let limit = rest.len() as u64;
            let mut at = 0u64;
            let mut buf: Vec<u8> = Vec::new();
            let mut fed = 0;
            loop {
                let s = scan(&buf, at, 512, limit);
                for r in &s.records {
                    assert!(!r.key.is_empty() && loc_addr(r.loc) >= at);
                    assert_eq!(
                        loc_len(r.loc) as usize,
                        2 + r.key.len() + r.value.len(),
                        "a record's location counts its key and value"
                    );
                }
                buf.drain(..s.consumed);
                at += s.consumed as u64;
                if s.end || fed >= rest.len() {
                    break;
                }
                let n = cut.min(rest.len() - fed);
                buf.extend_from_slice(&rest[fed..fed + n]);
                fed += n;
            }
        }
        _ => {
            let geo = ZoneGeometry::small(16, 8, 8);
            let Ok(dev) = EmulatedZonedDevice::format(MemDevice::new(), geo) else {
                return;
            };
            let half = rest.len() / 2;
            let _ = dev.write_at(&frame(&rest[..half]), 0);
            let mut wal = AlignedBuf::zeroed(rest[half..].len().div_ceil(4096).max(1) * 4096);
            wal[..rest.len() - half].copy_from_slice(&rest[half..]);
            let _ = dev.write_at(&wal, 2 * geo.zone_size);
            let opts = Options {
                sync: SyncMode::Never,
                cache_bytes: 64 << 10,
                ..Options::default()
            };
            let zo = ZkvOptions {
                wal_zones: 2,
                sequencer_bytes: 4 * 4096,
                ..ZkvOptions::default()
            };
            let dev: Arc<dyn ZonedDevice> = Arc::new(dev);
            if let Ok(db) = ZkvStore::open_on(dev, &opts, zo) {
                let _ = db.get(b"key");
                let _ = db.verify();
            }
        }
    }
});
