//! Quick start: SHORTCUT, the B+tree whose learned models fetch a whole
//! root-to-leaf path in one parallel I/O round, for point reads on deep
//! trees. `cargo run -p ferrite --example shortcut -- /tmp/shortcut-demo`

use ferrite::btree::{BTreeStats, ShortcutOptions};
use ferrite::{Config, EngineKind};

fn main() -> ferrite::Result<()> {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "shortcut-demo".into());
    let store = Config::builder(EngineKind::Shortcut)
        .cache_bytes(2 << 20)
        .open(&dir)?;
    // Sorted input builds the tree bottom-up; the companion is trained on it.
    store.bulk_load((0..200_000u64).map(|i| (i.to_be_bytes().to_vec(), vec![7u8; 32])))?;
    for i in (0..200_000u64).step_by(9973) {
        assert!(store.get(i.to_be_bytes())?.is_some());
    }
    if let Some(sc) = store
        .stats()
        .engine::<BTreeStats>()
        .and_then(|b| b.shortcut.clone())
    {
        println!("{:?}", sc);
    }
    println!("default SHORTCUT options: {:?}", ShortcutOptions::default());
    let tail: Vec<_> = store
        .range(199_990u64.to_be_bytes()..)
        .rev()
        .collect::<Result<_, _>>()?;
    println!("last {} keys read backwards", tail.len());
    let snap = store.snapshot()?;
    store.delete_range(0u64.to_be_bytes()..100_000u64.to_be_bytes())?;
    println!(
        "snapshot still has key 5: {}",
        snap.contains_key(5u64.to_be_bytes())?
    );
    drop(snap);
    store.close()
}
