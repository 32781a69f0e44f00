//! Online checkpoints on btree, lsm and zkv: a copy taken while a writer
//! runs opens, verifies, and holds exactly a prefix of the writer's
//! batches (each batch whole); a checkpoint never overwrites a directory
//! and leaves nothing behind when it fails.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::small_config;
use ferrite::{EngineKind, Error, WriteBatch};

fn seq_of(v: &[u8]) -> u64 {
    u64::from_le_bytes(v.try_into().unwrap())
}

fn copy_while_writing(kind: EngineKind) {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(small_config(kind).open(dir.path().join("db")).unwrap());
    // Data the checkpoint has to carry besides the writer's.
    for i in 0..2000u32 {
        db.put(format!("base{i:05}"), vec![i as u8; (i % 300) as usize + 1])
            .unwrap();
    }
    let stop = AtomicBool::new(false);
    let copies = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let mut b = WriteBatch::new();
                b.put(format!("d{n:08}").as_bytes(), &n.to_le_bytes())
                    .unwrap();
                b.put(b"seq", &n.to_le_bytes()).unwrap();
                if n.is_multiple_of(7) {
                    b.delete(format!("base{:05}", n % 2000).as_bytes()).unwrap();
                }
                db.write(&b).unwrap();
            }
            n
        });
        // Let the writer get going, then copy twice while it runs.
        while db.get("seq").unwrap().is_none_or(|v| seq_of(&v) < 200) {
            std::thread::yield_now();
        }
        let first = db.checkpoint(dir.path().join("copy1")).unwrap();
        let second = db.checkpoint(dir.path().join("copy2")).unwrap();
        stop.store(true, Ordering::Relaxed);
        let written = writer.join().unwrap();
        (first, second, written)
    });
    let (first, second, written) = copies;
    let mut seqs = Vec::new();
    for (name, stats) in [("copy1", first), ("copy2", second)] {
        let path = dir.path().join(name);
        assert_eq!(ferrite::detect(&path).unwrap().engine, kind);
        let copy = small_config(kind).open(&path).unwrap();
        copy.verify().unwrap();
        let seq = seq_of(&copy.get("seq").unwrap().unwrap());
        assert!(
            seq >= 200 && seq <= written,
            "{name}: seq {seq} of {written}"
        );
        // Exactly the writer's batches up to `seq`, each whole.
        let ds: Vec<u64> = copy.prefix("d").map(|p| seq_of(&p.unwrap().1)).collect();
        assert_eq!(ds, (1..=seq).collect::<Vec<_>>(), "{name}");
        let bases = copy.prefix("base").count() as u64;
        let deleted: std::collections::HashSet<u64> = (1..=seq)
            .filter(|n| n.is_multiple_of(7))
            .map(|n| n % 2000)
            .collect();
        assert_eq!(bases, 2000 - deleted.len() as u64, "{name}");
        assert!(stats.disk_bytes > 0);
        if kind == EngineKind::Lsm {
            // The LSM copies its tables' files and counts no pairs.
            assert_eq!((stats.pairs, stats.user_bytes), (None, None), "{name}");
            assert!(stats.shared_bytes + stats.copied_bytes > 0, "{name}");
        } else {
            assert_eq!(stats.pairs, Some(1 + seq + bases), "{name}");
            assert!(stats.user_bytes > Some(0));
            assert_eq!(stats.shared_bytes + stats.copied_bytes, 0, "{name}");
        }
        seqs.push(seq);
        copy.close().unwrap();
    }
    assert!(seqs[0] <= seqs[1]);
    assert!(!dir.path().join("copy1.checkpoint-partial").exists());
    Arc::try_unwrap(db).unwrap().close().unwrap();
}

fn refuses_to_overwrite(kind: EngineKind) {
    let dir = tempfile::tempdir().unwrap();
    let db = small_config(kind).open(dir.path().join("db")).unwrap();
    db.put("k", "v").unwrap();
    let there = dir.path().join("there");
    std::fs::create_dir(&there).unwrap();
    std::fs::write(there.join("keep"), "mine").unwrap();
    assert!(matches!(
        db.checkpoint(&there),
        Err(Error::AlreadyExists { .. })
    ));
    assert_eq!(std::fs::read_to_string(there.join("keep")).unwrap(), "mine");
    // A crashed checkpoint's staging directory is cleared, not reused.
    let fresh = dir.path().join("fresh");
    std::fs::create_dir(dir.path().join("fresh.checkpoint-partial")).unwrap();
    std::fs::write(dir.path().join("fresh.checkpoint-partial/junk"), "x").unwrap();
    db.checkpoint(&fresh).unwrap();
    assert!(!fresh.join("junk").exists());
    let copy = small_config(kind).open(&fresh).unwrap();
    assert_eq!(copy.get("k").unwrap().unwrap(), b"v");
}

macro_rules! engine_tests {
    ($($name:ident: $kind:expr;)*) => {$(
        mod $name {
            use super::*;

            #[test]
            fn a_copy_taken_while_writing_holds_a_prefix_of_whole_batches() {
                copy_while_writing($kind);
            }

            #[test]
            fn a_checkpoint_never_overwrites() {
                refuses_to_overwrite($kind);
            }
        }
    )*};
}

engine_tests! {
    btree: EngineKind::Btree;
    lsm: EngineKind::Lsm;
    zkv: EngineKind::Zkv;
}
