//! Bad bytes on the devices never become an answer: damaged pages, meta
//! pages and checkpoint files give typed errors, never panics or wrong
//! data.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::collections::BTreeMap;

use common::{contents, fresh, open, open_as, Mode};
use ferrite_core::testkit::{self, Model};
use ferrite_core::{Error, KvStore};
use ferrite_io::{AlignedBuf, BlockDevice};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

#[test]
fn a_corrupt_page_is_a_typed_error() {
    let d = fresh();
    {
        let db = open(&d).unwrap();
        for i in 0..2000u32 {
            db.put(&i.to_be_bytes(), &[7; 50]).unwrap();
        }
    }
    // Flip a byte in every tree page on the device.
    let pages = d[0].inner();
    let len = pages.len();
    let mut b = ferrite_io::AlignedBuf::zeroed(4096);
    for off in (2 * 4096..len).step_by(4096) {
        pages.read_at(&mut b, off).unwrap();
        b[200] ^= 0xff;
        pages.write_at(&b, off).unwrap();
    }
    let db = open(&d).unwrap();
    let e = db.get(&5u32.to_be_bytes()).unwrap_err();
    assert!(matches!(e, ferrite_core::Error::Corruption { .. }), "{e}");
}

/// A page file whose meta pages are both damaged, with nothing in the
/// double-write file to finish a checkpoint from, is corruption: opening
/// it as a new, empty store would overwrite the tree at the next
/// checkpoint.
#[test]
fn damaged_meta_pages_are_a_typed_error_not_a_new_store() {
    let d = fresh();
    {
        let db = open(&d).unwrap();
        for i in 0..2000u32 {
            db.put(&i.to_be_bytes(), &[7; 50]).unwrap();
        }
        db.flush().unwrap();
    }
    let pages = d[0].inner();
    let mut b = ferrite_io::AlignedBuf::zeroed(4096);
    for slot in 0..2u64 {
        pages.read_at(&mut b, slot * 4096).unwrap();
        b[20] ^= 0xff;
        pages.write_at(&b, slot * 4096).unwrap();
    }
    d[1].inner().set_len(0).unwrap();
    match open(&d) {
        Err(e) => assert!(matches!(e, ferrite_core::Error::Corruption { .. }), "{e}"),
        Ok(db) => panic!("opened as a store holding {} keys", contents(&db).len()),
    }
}

/// A leaf page that passes its checksum but counts fewer dead bytes than
/// it holds: an insert into the empty leaf finds no room, yet the one cell
/// fits a page, so there is nothing to split. The put is refused as
/// corruption (it used to index an empty list of cuts).
#[test]
fn a_leaf_short_of_its_dead_bytes_is_a_typed_error() {
    let d = fresh();
    {
        let db = open(&d).unwrap();
        // One leaf, filled, then emptied oldest key first, so every cell
        // but the last becomes dead bytes inside the cell area.
        for i in 0..34u32 {
            db.put(&i.to_be_bytes(), &[7; 100]).unwrap();
        }
        for i in 0..34u32 {
            db.delete(&i.to_be_bytes()).unwrap();
        }
        db.flush().unwrap();
    }
    let pages = d[0].inner();
    let mut b = ferrite_io::AlignedBuf::zeroed(4096);
    let mut edited = 0;
    for id in 2..pages.len() / 4096 {
        pages.read_at(&mut b, id * 4096).unwrap();
        // A leaf (kind 1) with dead bytes: count none, and reseal.
        if b[4] == 1 && b[10..12] != [0, 0] {
            b[10..12].fill(0);
            let crc = crc32c::crc32c(&b[4..]);
            b[..4].copy_from_slice(&crc.to_le_bytes());
            pages.write_at(&b, id * 4096).unwrap();
            edited += 1;
        }
    }
    assert_eq!(edited, 1, "one leaf held the deletes");
    d[1].inner().set_len(0).unwrap();
    let db = open(&d).unwrap();
    // More than the 430 bytes the leaf shows free, less than a page.
    match db.put(b"next", &[9; 600]) {
        Err(e) => assert!(matches!(e, ferrite_core::Error::Corruption { .. }), "{e}"),
        Ok(()) => panic!("the damaged leaf took a value"),
    }
}

/// Records the insert buffer carries across a checkpoint are in no page
/// and no WAL: a damaged carry-over is corruption, not an empty one (read
/// as empty, the records would be silently gone).
#[test]
fn a_damaged_carry_over_is_corruption_not_an_empty_one() {
    let d = fresh();
    {
        let db = open_as(&d, Mode::Turbo).unwrap();
        for i in 0..3000u32 {
            db.put(&i.wrapping_mul(2_654_435_761).to_be_bytes(), &[7; 60])
                .unwrap();
        }
        db.flush().unwrap();
    }
    let written: Vec<usize> = [4, 5].into_iter().filter(|&i| d[i].len() > 0).collect();
    assert!(!written.is_empty(), "the checkpoint carried records over");
    // Damage every slot's payload: the current checkpoint's is among them.
    for i in written {
        let slot = d[i].inner();
        let mut b = AlignedBuf::zeroed(slot.len() as usize);
        slot.read_at(&mut b, 0).unwrap();
        b[slot.block_size() + 5] ^= 0x10;
        slot.write_at(&b, 0).unwrap();
    }
    match open_as(&d, Mode::Turbo) {
        Err(Error::Corruption { location, reason }) => {
            assert!(location.contains("carry-over"), "{location}: {reason}")
        }
        Err(e) => panic!("{e}"),
        Ok(db) => panic!("opened holding {} keys", contents(&db).len()),
    }
}

/// A bit flipped in a meta page, of a store that went on writing after
/// its last checkpoint and lost power: an older checkpoint has no WAL left
/// (the WAL was reset at the newer one), so falling back to it would lose
/// every write since. Each checkpoint writes its meta page to both slots
/// (the double-write file is emptied after it), so the other slot still
/// names the newest checkpoint: the store opens with exactly what it held.
#[test]
fn a_damaged_meta_page_is_covered_by_the_other_slot() {
    for seed in 0..36u64 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mode = [Mode::Plain, Mode::Turbo, Mode::Shortcut][seed as usize % 3];
        let d = fresh();
        let db = open_as(&d, mode).unwrap();
        let mut model = BTreeMap::new();
        for n in 0..rng.gen_range(1000..4000u32) {
            let k = testkit::key(rng.gen_range(0..KEYS));
            let v = vec![(n % 251) as u8; rng.gen_range(0..120)];
            db.put(&k, &v).unwrap();
            model.insert(k, v);
        }
        db.sync().unwrap();
        // Power lost with the store open: no checkpoint at close.
        testkit::power_cut(db, &d, ferrite_io::CrashMode::DropAll);
        let pages = d[0].inner();
        let ps = if mode == Mode::Plain { 4096 } else { 1024 };
        let epoch = |slot: u64| {
            let mut b = AlignedBuf::zeroed(ps);
            pages.read_at(&mut b, slot * ps as u64).unwrap();
            ferrite_btree::internals::MetaPage::decode(&b).map_or(0, |m| m.epoch)
        };
        assert_eq!(epoch(0), epoch(1), "{seed}: both slots name the newest");
        let slot = rng.gen_range(0..2u64);
        let bit = rng.gen_range(0..8);
        let byte = slot * ps as u64 + rng.gen_range(0..68);
        testkit::flip_bit(pages, byte, bit);
        let what = format!("seed {seed} ({mode:?}, meta slot {slot})");
        let db = open_as(&d, mode).unwrap_or_else(|e| panic!("{what}: open: {e}"));
        assert_eq!(
            testkit::check_lookups(&db, &testkit::keys(KEYS), &model, None, &what),
            0,
            "{what}"
        );
        db.verify()
            .unwrap_or_else(|e| panic!("{what}: verify: {e}"));
    }
}

const KEYS: u32 = 600;

/// One bit flipped anywhere in the page file, the double-write file or a
/// carry-over slot of a closed store (the WAL is left out: its replay
/// ends at the first bad record by design, as at a torn tail). The store
/// refuses to open, or every lookup and scan returns the right data or a
/// typed corruption error, `verify` fails whenever a lookup met damage,
/// and later writes, checkpoints and evictions over the damage fail
/// typed, without a panic and without changing an answer.
#[test]
fn a_flipped_bit_is_refused_never_answered() {
    let mut detected = 0;
    for seed in 0..60u64 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mode = [Mode::Plain, Mode::Turbo, Mode::Shortcut][seed as usize % 3];
        let d = fresh();
        let db = open_as(&d, mode).unwrap();
        let mut model = Model::new();
        let ops = rng.gen_range(500..3000u32);
        for n in 0..ops {
            let w = testkit::random_write(&mut rng, KEYS, true, (n % 251) as u8);
            testkit::apply(&db, &mut model, w);
            if n == ops / 2 {
                db.flush().unwrap();
            }
        }
        db.sync().unwrap();
        drop(db);

        // Devices by index: pages, double-write file, carry-over slots.
        let targets: Vec<usize> = [0, 1, 4, 5]
            .into_iter()
            .filter(|&i| d[i].len() > 0)
            .collect();
        let target = targets[rng.gen_range(0..targets.len())];
        let dev = d[target].inner();
        let at = rng.gen_range(0..dev.len());
        testkit::flip_bit(dev, at, rng.gen_range(0..8));

        let what = format!("seed {seed} ({mode:?}, device {target}, bit at byte {at})");
        let db = match open_as(&d, mode) {
            Ok(db) => db,
            Err(e) => {
                assert!(e.is_corruption(), "{what}: open: {e}");
                detected += 1;
                continue;
            }
        };
        let writes = testkit::random_puts(&mut rng, KEYS, 1500);
        if testkit::exercise(&db, &testkit::keys(KEYS), &model, writes, &what).is_err() {
            detected += 1;
        }
    }
    assert!(detected >= 10, "{detected} of 60 flips detected");
}

/// A bit flipped in a WAL record that a later record vouches for (it was
/// appended after the damaged one was synced) is damage to acknowledged
/// writes, not a torn tail: recovery refuses it as corruption and leaves
/// the log as it was, where cutting the log off at the damage would
/// silently drop every write after it. Asked to salvage, recovery keeps
/// the writes before the damaged record. A flip in the last record, which
/// nothing vouches for, is a torn tail: recovery keeps the writes before
/// it.
#[test]
fn a_flipped_bit_in_a_vouched_wal_record_is_refused_and_left_in_place() {
    for seed in 0..24u64 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let d = fresh();
        let db = common::open_with(&d, Mode::Plain, ferrite_core::SyncMode::Always).unwrap();
        let n = rng.gen_range(5..60u32);
        for i in 0..n {
            db.put(format!("key{i:03}").as_bytes(), &[i as u8; 40])
                .unwrap();
        }
        // Power cut with the store open: the writes are in the WAL only.
        testkit::power_cut(db, &d, ferrite_io::CrashMode::DropAll);
        let wal = d[2].inner();
        let mut log = AlignedBuf::zeroed(wal.len() as usize);
        wal.read_at(&mut log, 0).unwrap();
        let mut starts = vec![0];
        while let Some((h, _)) = ferrite_wal::decode_record(&log[*starts.last().unwrap()..]) {
            starts.push(starts.last().unwrap() + h.encoded_len());
        }
        assert_eq!(
            starts.len() as u32,
            n + 1,
            "seed {seed}: one record per put"
        );
        let last = starts[starts.len() - 2];
        let vouched = seed % 4 != 0;
        let at = if vouched {
            rng.gen_range(0..last as u64)
        } else {
            rng.gen_range(last as u64..starts[starts.len() - 1] as u64)
        };
        testkit::flip_bit(wal, at, rng.gen_range(0..8));
        let mut damaged = AlignedBuf::zeroed(wal.len() as usize);
        wal.read_at(&mut damaged, 0).unwrap();
        let what = format!("seed {seed}: bit at byte {at} of {n} records");
        match open(&d) {
            Ok(db) if !vouched => {
                let got = contents(&db);
                assert_eq!(got.len() as u32, n - 1, "{what}: the torn tail");
            }
            Ok(_) => panic!("{what}: opened over damage"),
            Err(e) => {
                assert!(vouched, "{what}: a torn tail refused: {e}");
                assert!(e.is_corruption(), "{what}: {e}");
                let mut after = AlignedBuf::zeroed(wal.len() as usize);
                wal.read_at(&mut after, 0).unwrap();
                assert!(
                    after[..] == damaged[..],
                    "{what}: the refused open changed the log"
                );
                // Salvaged, the store holds the puts before the damaged
                // record, and reopens as it is.
                let hit = starts.iter().filter(|&&s| s as u64 <= at).count() - 1;
                let want: Vec<Vec<u8>> = (0..hit)
                    .map(|i| format!("key{i:03}").into_bytes())
                    .collect();
                let salvaged = ferrite_btree::BTreeStore::open_on(
                    common::wire(&d),
                    &ferrite_core::Options::default()
                        .cache_bytes(320 << 10)
                        .wal_recovery(ferrite_core::WalRecovery::TruncateAtDamage),
                    ferrite_btree::BTreeOptions::default()
                        .page_size(4096)
                        .checkpoint_wal_bytes(64 << 10)
                        .insert_buffer(None)
                        .shortcut(None),
                )
                .unwrap_or_else(|e| panic!("{what}: salvage: {e}"));
                let keys: Vec<Vec<u8>> = contents(&salvaged).into_keys().collect();
                assert_eq!(keys, want, "{what}: salvaged contents");
                drop(salvaged);
                let db = open(&d).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
                let keys: Vec<Vec<u8>> = contents(&db).into_keys().collect();
                assert_eq!(keys, want, "{what}: reopened after salvage");
            }
        }
    }
}
