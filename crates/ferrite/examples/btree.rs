//! Quick start: the disk B+tree, for reads and data that fits its cache.
//! `cargo run -p ferrite --example btree -- /tmp/btree-demo`

use ferrite::btree::BTreeOptions;
use ferrite::{Config, EngineKind, SyncMode};

fn main() -> ferrite::Result<()> {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "btree-demo".into());
    let store = Config::builder(EngineKind::Btree)
        .cache_bytes(64 << 20)
        .sync(SyncMode::Always)
        .btree(BTreeOptions::default().page_size(8192))
        .open(&dir)?;
    for i in 0..1000u32 {
        store.put(format!("order:{i:06}"), format!("{{\"total\": {i}}}"))?;
    }
    println!(
        "order:000042 = {:?}",
        store.get("order:000042")?.map(String::from_utf8)
    );
    // The ten newest orders, newest first.
    for pair in store.prefix("order:").rev().take(10) {
        let (k, v) = pair?;
        println!(
            "{} {}",
            String::from_utf8_lossy(&k),
            String::from_utf8_lossy(&v)
        );
    }
    let before = store.snapshot()?;
    store.delete_range("order:000000".."order:000500")?;
    println!(
        "after the purge: {} orders, the snapshot still sees {}",
        store.iter().count(),
        before.iter().count()
    );
    drop(before);
    store.close()
}
