//! ZKV decoders and recovery: leaf pages, MetaLog snapshots and a whole
//! recovery from a device whose MetaLog holds arbitrary (checksummed)
//! bytes and whose WAL zone holds arbitrary bytes never panic.
#![no_main]

use std::sync::Arc;

use ferrite_core::{KvStore, Options, SyncMode};
use ferrite_io::{AlignedBuf, EmulatedZonedDevice, MemDevice, ZoneGeometry, ZonedDevice};
use ferrite_zkv::metalog::Snapshot;
use ferrite_zkv::page::LeafPage;
use ferrite_zkv::{ZkvOptions, ZkvStore};
use libfuzzer_sys::fuzz_target;

fn frame(body: &[u8]) -> AlignedBuf {
    ferrite_zkv::metalog::encode_frame(1, body, 4096)
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    match selector % 3 {
        0 => {
            let mut page = rest.to_vec();
            page.resize(4096, 0);
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
