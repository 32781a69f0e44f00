//! Quick start: TurboIndex, the B+tree with a record-level insert buffer,
//! for random writes into data much larger than the cache.
//! `cargo run -p ferrite --example turboindex -- /tmp/turbo-demo`

use ferrite::btree::{BTreeOptions, BTreeStats, InsertBufferOptions};
use ferrite::{Config, EngineKind, SyncMode};

fn main() -> ferrite::Result<()> {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "turbo-demo".into());
    let store = Config::builder(EngineKind::TurboIndex)
        .cache_bytes(1 << 20)
        .sync(SyncMode::Batched(std::time::Duration::from_millis(10)))
        .btree(
            BTreeOptions::default().insert_buffer(Some(InsertBufferOptions::default().share(0.1))),
        )
        .open(&dir)?;
    // Scattered writes: most land on leaves that are not in the cache.
    for i in 0..50_000u64 {
        let k = i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes();
        store.put(k, i.to_le_bytes())?;
    }
    let stats = store.stats();
    if let Some(bt) = stats.engine::<BTreeStats>() {
        let buffered = bt
            .insert_buffer
            .as_ref()
            .map_or(0, |ib| ib.counters.buffered);
        println!("{buffered} writes buffered instead of reading their leaf");
    }
    let last = store.iter().next_back().transpose()?;
    println!("largest key: {:?}", last.map(|(k, _)| k));
    let snap = store.snapshot()?;
    store.delete_range([0u8; 8]..[0x80, 0, 0, 0, 0, 0, 0, 0])?;
    println!(
        "{} keys left, {} in the snapshot",
        store.iter().count(),
        snap.iter().count()
    );
    drop(snap);
    store.close()
}
