//! Quick start: ZKV, the B+-tree for zoned (ZNS) storage, for small pairs
//! whose random updates should become large appends.
//! `cargo run -p ferrite --example zkv -- /tmp/zkv-demo`

use ferrite::zkv::{ZkvOptions, ZkvStats, ZoneGeometry};
use ferrite::{Config, EngineKind, SyncMode};

fn main() -> ferrite::Result<()> {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "zkv-demo".into());
    let store = Config::builder(EngineKind::Zkv)
        .sync(SyncMode::Always)
        .zkv(ZkvOptions::default().geometry(ZoneGeometry::small(64, 8, 8)))
        .open(&dir)?;
    for i in 0..20_000u32 {
        store.put(format!("sensor:{:04}:{i:05}", i % 97), i.to_le_bytes())?;
    }
    // Atomic read-modify-write: a counter that loses no increment.
    loop {
        let now = store.get("count")?;
        let n = now
            .as_deref()
            .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
        if store.compare_and_swap("count", now.as_deref(), Some(&(n + 1).to_le_bytes()))? {
            break;
        }
    }
    let last = store.prefix("sensor:0042:").next_back().transpose()?;
    println!(
        "newest reading of sensor 42: {:?}",
        last.map(|(k, _)| String::from_utf8(k))
    );
    let snap = store.snapshot()?;
    store.delete_range("sensor:0000:".."sensor:0050:")?;
    println!(
        "{} readings, {} in the snapshot",
        store.iter().count(),
        snap.iter().count()
    );
    drop(snap);
    if let Some(z) = store.stats().engine::<ZkvStats>() {
        println!("{:?}", z);
    }
    store.close()
}
