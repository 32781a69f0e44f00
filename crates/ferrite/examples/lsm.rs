//! Quick start: the LSM-tree with learned index blocks (SwiftKV), for
//! write-heavy loads. `cargo run -p ferrite --example lsm -- /tmp/lsm-demo`

use ferrite::lsm::{LsmOptions, LsmStats};
use ferrite::{Config, EngineKind, SyncMode, WriteBatch};

fn main() -> ferrite::Result<()> {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "lsm-demo".into());
    let store = Config::builder(EngineKind::Lsm)
        .sync(SyncMode::Never)
        .lsm(LsmOptions::default().memtable_bytes(4 << 20))
        .open(&dir)?;
    for day in 0..30u32 {
        let mut batch = WriteBatch::new();
        for event in 0..1000u32 {
            batch.put(format!("log/{day:02}/{event:05}").as_bytes(), b"payload")?;
        }
        store.write(&batch)?;
    }
    // Retention: drop the first week with one range tombstone.
    let snap = store.snapshot()?;
    store.delete_range("log/00/".."log/07/")?;
    println!(
        "oldest kept: {:?}",
        store
            .iter()
            .next()
            .transpose()?
            .map(|(k, _)| String::from_utf8(k))
    );
    println!(
        "newest: {:?}",
        store
            .iter()
            .next_back()
            .transpose()?
            .map(|(k, _)| String::from_utf8(k))
    );
    println!(
        "the snapshot still holds day 0: {}",
        snap.prefix("log/00/").count()
    );
    drop(snap);
    store.flush()?;
    let lsm = store
        .stats()
        .engine::<LsmStats>()
        .cloned()
        .unwrap_or_default();
    println!(
        "{} flushes, {} range deletes kept",
        lsm.flushes, lsm.range_deletes
    );
    store.close()
}
