//! Bad bytes in a table never become an answer: a bit flipped anywhere in
//! the tables device is refused at open, or every lookup and scan returns
//! the right data or a typed corruption error, `verify` fails exactly
//! when the bit lies in a table the manifest names, and compactions over
//! the damage fail without a panic and without changing what the intact
//! tables answer (`ferrite_core::testkit`). Damaged manifests and WALs are
//! refused, never rolled back past.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use ferrite_core::testkit::{self, Model};
use ferrite_core::{Error, KvStore, SyncMode};
use ferrite_io::{AlignedBuf, BlockDevice, MemDevice};
use ferrite_lsm::{IndexKind, LsmOptions};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const KEYS: u32 = 600;

/// The newest valid manifest snapshot.
fn newest_manifest(d: &common::Devs) -> ferrite_lsm::internals::ManifestState {
    d[1..3]
        .iter()
        .filter_map(|slot| {
            let len = slot.len();
            let mut buf = AlignedBuf::zeroed(len as usize);
            slot.read_at(&mut buf, 0).unwrap();
            ferrite_lsm::internals::ManifestState::decode(&buf)
        })
        .max_by_key(|m| m.generation)
        .expect("a manifest")
}

/// The bytes of the tables the newest manifest names that a reader
/// reads: every page of an uncompressed table; in a compressed one, the
/// zero padding after its last frame is never read, so a flip there
/// changes nothing.
fn live_bytes(d: &common::Devs) -> Vec<std::ops::Range<usize>> {
    use ferrite_lsm::internals::{Footer, Properties, FOOTER_LEN};
    let dev = d[0].inner();
    let mut all = AlignedBuf::zeroed(dev.len() as usize);
    dev.read_at(&mut all, 0).unwrap();
    let mut live = Vec::new();
    for t in newest_manifest(d).tables {
        let (start, end) = (t.start as usize * 4096, (t.start + t.pages) as usize * 4096);
        let f = Footer::decode(&all[end - 4096..end]).unwrap();
        let meta = start + f.data_pages as usize * 4096;
        let region = &all[meta..end];
        let at = (f.filter_len + f.index_len) as usize;
        let props = Properties::decode(&region[at..at + f.props_len as usize], f.data_pages);
        let data_end = match props.and_then(|p| p.packing) {
            Some(p) => start + *p.ends.last().unwrap() as usize,
            None => meta,
        };
        assert!(region.len() > FOOTER_LEN);
        live.push(start..data_end);
        live.push(meta..end);
    }
    live
}

/// A closed store after a random load that flushed and compacted, and
/// then flushed what was left with probability `final_flush`.
fn load(seed: u64, rng: &mut SmallRng, final_flush: f64) -> (common::Devs, LsmOptions, Model) {
    let index = match seed % 3 {
        0 => IndexKind::LEARNED,
        1 => IndexKind::Sparse,
        _ => IndexKind::Bourbon { eps: 8.0 },
    };
    let lsm = common::tiny(index).partitions(if seed.is_multiple_of(4) { 3 } else { 1 });
    let d = common::fresh();
    let db = common::open(&d, lsm.clone(), SyncMode::Never).unwrap();
    let mut model = Model::new();
    for n in 0..1500u32 {
        let w = testkit::random_write(rng, KEYS, true, (n % 251) as u8);
        testkit::apply(&db, &mut model, w);
    }
    if rng.gen_bool(final_flush) {
        db.flush().unwrap();
    }
    db.sync().unwrap();
    drop(db);
    (d, lsm, model)
}

/// The WAL devices replay reads, as (memtable, device index) in memtable
/// order (earlier ones are in tables already).
fn live_wals(d: &common::Devs) -> Vec<(u64, usize)> {
    let log_number = newest_manifest(d).log_number;
    let mut wals: Vec<(u64, usize)> = (3..d.len())
        .filter_map(|i| {
            let mut b = AlignedBuf::zeroed(4096);
            (d[i].len() >= 4096).then(|| d[i].read_at(&mut b, 0).unwrap())?;
            ferrite_wal::decode_record(&b).map(|(h, _)| (h.epoch, i))
        })
        .filter(|&(mem, _)| mem >= log_number)
        .collect();
    wals.sort_unstable();
    wals
}

/// Where a WAL's records end, before a seal, and whether one follows.
fn records_end(dev: &MemDevice) -> (usize, bool) {
    let mut log = AlignedBuf::zeroed(dev.len() as usize);
    dev.read_at(&mut log, 0).unwrap();
    let mut end = 0;
    while let Some((h, _)) = ferrite_wal::decode_record(&log[end..]) {
        if h.seal {
            return (end, true);
        }
        end += h.encoded_len();
    }
    (end, false)
}

/// Flips one bit at byte `at` of `dev`.
/// The oracle's questions to a store opened over damage, with 600 more
/// writes that push the damage through flushes and compactions. Returns
/// `verify`'s result.
fn exercise(db: &dyn KvStore, model: &Model, rng: &mut SmallRng, what: &str) -> Result<(), Error> {
    let writes = testkit::random_puts(rng, KEYS, 600);
    testkit::exercise(db, &testkit::keys(KEYS), model, writes, what)
}

#[test]
fn a_flipped_bit_in_a_table_is_refused_never_answered() {
    let mut detected = 0;
    for seed in 0..48u64 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let (d, lsm, model) = load(seed, &mut rng, 0.8);
        // One bit, anywhere the tables device has ever been written; the
        // manifest says whether it lands in a live table.
        let live = live_bytes(&d);
        let tables = d[0].inner();
        assert!(
            tables.len() >= 4096 * 8,
            "seed {seed}: the load wrote tables"
        );
        let at = rng.gen_range(0..tables.len());
        testkit::flip_bit(tables, at, rng.gen_range(0..8));
        let in_live_table = live.iter().any(|r| r.contains(&(at as usize)));
        let what = format!("seed {seed} (bit at byte {at})");
        match common::open(&d, lsm, SyncMode::Never) {
            Ok(db) => match exercise(&db, &model, &mut rng, &what) {
                Err(e) => {
                    assert!(
                        in_live_table,
                        "{what}: a flip outside every table failed verify: {e}"
                    );
                    detected += 1;
                }
                Ok(()) => assert!(
                    !in_live_table,
                    "{what}: verify passed a flip in a live table"
                ),
            },
            Err(e) => {
                assert!(e.is_corruption(), "{what}: open: {e}");
                assert!(
                    in_live_table,
                    "{what}: a flip outside every table refused the open: {e}"
                );
                detected += 1;
            }
        }
    }
    // About half the device is live tables, so about half the runs
    // detect their flip.
    assert!(detected >= 10, "{detected} of 48 flips detected");
}

/// A bit flipped in either manifest slot: the store refuses to open, or
/// opens with exactly its data. Falling back to the older slot is right
/// after a crash tore the newer one, and still loses nothing while the
/// WALs since the older one are there; once a WAL device has been reused
/// (partitions' flush buffers keep memtables' WALs alive longer, so the
/// runs use three partitions), it would silently drop the memtables the
/// damaged manifest had put in tables, and must be refused.
#[test]
fn a_flipped_bit_in_a_manifest_is_refused_never_rolled_back() {
    let mut refused = 0;
    let runs = 64;
    for seed in (0..runs * 4).step_by(4) {
        let mut rng = SmallRng::seed_from_u64(seed);
        let (d, lsm, model) = load(seed, &mut rng, 0.8);
        assert_eq!(lsm.partitions, 3);
        let generation = |i: usize| {
            let mut buf = AlignedBuf::zeroed(d[i].len() as usize);
            d[i].read_at(&mut buf, 0).unwrap();
            ferrite_lsm::internals::ManifestState::decode(&buf).map_or(0, |m| m.generation)
        };
        let newest = if generation(1) > generation(2) { 1 } else { 2 };
        let pick = if rng.gen_bool(0.8) {
            newest
        } else {
            3 - newest
        };
        let slot = d[pick].inner();
        // Aim at the encoded snapshot, not the block's zero padding.
        let mut buf = AlignedBuf::zeroed(slot.len() as usize);
        slot.read_at(&mut buf, 0).unwrap();
        let used = buf
            .iter()
            .rposition(|&b| b != 0)
            .map_or(1, |p| p as u64 + 1);
        let at = rng.gen_range(0..used);
        testkit::flip_bit(slot, at, rng.gen_range(0..8));
        let what = format!("seed {seed} (manifest slot {pick}, bit at byte {at})");
        match common::open(&d, lsm, SyncMode::Never) {
            Ok(db) => {
                if let Err(e) = exercise(&db, &model, &mut rng, &what) {
                    panic!("{what}: opened over a damaged manifest, then failed verify: {e}");
                }
            }
            Err(e) => {
                assert!(e.is_corruption(), "{what}: open: {e}");
                refused += 1;
            }
        }
    }
    // About one run in six damages the newest manifest after a WAL reuse.
    assert!(refused >= 2, "{refused} of {runs} flips refused");
}

/// A bit flipped in a WAL that a later WAL follows (partitions' flush
/// buffers keep several memtables' WALs alive, so the runs use three
/// partitions). A WAL is synced before the next memtable's begins, so
/// only the last one can end torn: an earlier one that stops short is
/// damaged. Replaying past it would keep later writes and drop earlier
/// ones, a state the store never had; the open must be refused, or give
/// back exactly the data.
#[test]
fn a_flipped_bit_in_an_earlier_wal_is_refused_never_skipped() {
    let (mut refused, mut tried) = (0, 0);
    let runs = 64;
    for seed in (0..runs * 4).step_by(4) {
        let mut rng = SmallRng::seed_from_u64(seed);
        let (d, lsm, model) = load(seed, &mut rng, 0.0);
        let wals = live_wals(&d);
        if wals.len() < 2 {
            continue;
        }
        // Any but the newest, inside its records.
        let (mem, i) = wals[rng.gen_range(0..wals.len() - 1)];
        let dev = d[i].inner();
        let (end, _) = records_end(dev);
        let at = rng.gen_range(0..end as u64);
        testkit::flip_bit(dev, at, rng.gen_range(0..8));
        tried += 1;
        let what = format!("seed {seed} (WAL of memtable {mem}, bit at byte {at})");
        match common::open(&d, lsm, SyncMode::Never) {
            Ok(db) => {
                if let Err(e) = exercise(&db, &model, &mut rng, &what) {
                    panic!("{what}: opened over a damaged WAL, then failed verify: {e}");
                }
            }
            Err(e) => {
                assert!(e.is_corruption(), "{what}: open: {e}");
                refused += 1;
            }
        }
    }
    // Every flip lands in a record a later WAL follows: each run refuses.
    assert_eq!(refused, tried, "{refused} of {tried} damaged WALs refused");
    assert!(tried >= 8, "only {tried} of {runs} runs had two WALs");
}

/// A bit flipped in the records of the newest WAL of a cleanly closed
/// store is damage to acknowledged writes, not a torn tail: the seal the
/// close appended vouches for every record before it. The open is
/// refused as corruption and leaves the log as it was, where cutting it
/// off at the damage would silently drop every write after it.
#[test]
fn a_flipped_bit_in_the_newest_wal_is_refused_and_left_in_place() {
    for seed in 0..48u64 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let (d, lsm, _) = load(seed, &mut rng, 0.0);
        let (mem, i) = *live_wals(&d).last().expect("a live WAL");
        let dev = d[i].inner();
        let (end, sealed) = records_end(dev);
        assert!(sealed, "seed {seed}: the closed store's WAL has no seal");
        let at = rng.gen_range(0..end as u64);
        testkit::flip_bit(dev, at, rng.gen_range(0..8));
        let mut damaged = AlignedBuf::zeroed(dev.len() as usize);
        dev.read_at(&mut damaged, 0).unwrap();
        let what = format!("seed {seed} (WAL of memtable {mem}, bit at byte {at})");
        match common::open(&d, lsm, SyncMode::Never) {
            Ok(_) => panic!("{what}: opened over damage"),
            Err(e) => assert!(e.is_corruption(), "{what}: {e}"),
        }
        let mut after = AlignedBuf::zeroed(dev.len() as usize);
        dev.read_at(&mut after, 0).unwrap();
        assert!(
            after[..] == damaged[..],
            "{what}: the refused open changed the log"
        );
    }
}

/// Asked to salvage, a store whose newest or an earlier WAL is damaged
/// opens with the writes logged before the damage and none after (every
/// key is written once, in order, so that is a prefix of the keys), also
/// after a salvage cut short, and goes on from there.
#[test]
fn a_salvaging_open_keeps_the_writes_before_the_damage() {
    use ferrite_core::WalRecovery;
    let key = |i: u32| format!("key{i:05}").into_bytes();
    for seed in 0..32u64 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let lsm = common::tiny(if seed % 2 == 0 {
            IndexKind::LEARNED
        } else {
            IndexKind::Sparse
        });
        let d = common::fresh();
        let db = common::open(&d, lsm.clone(), SyncMode::Never).unwrap();
        let n = rng.gen_range(300..2000u32);
        for i in 0..n {
            db.put(&key(i), &[(i % 251) as u8; 20]).unwrap();
        }
        drop(db);
        let wals = live_wals(&d);
        let (mem, i) = wals[rng.gen_range(0..wals.len())];
        let dev = d[i].inner();
        let (end, _) = records_end(dev);
        // Past the first record, the empty batch that names the memtable.
        let mut head = AlignedBuf::zeroed(4096);
        dev.read_at(&mut head, 0).unwrap();
        let first = ferrite_wal::decode_record(&head).map_or(0, |(h, _)| h.encoded_len());
        if end <= first {
            continue;
        }
        let at = rng.gen_range(first as u64..end as u64);
        testkit::flip_bit(dev, at, rng.gen_range(0..8));
        let what = format!("seed {seed} (WAL of memtable {mem} of {wals:?}, bit at byte {at})");
        assert!(
            common::open(&d, lsm.clone(), SyncMode::Never).is_err(),
            "{what}: opened over damage"
        );
        // Half the runs cut a first salvage short with a fault and a power
        // cut: it cuts logs off and empties WALs, and must leave nothing a
        // later salvage would take past the damage.
        if seed % 2 == 1 {
            testkit::interrupted_recovery(&mut rng, &d, || {
                common::open_with(
                    &d,
                    lsm.clone(),
                    SyncMode::Never,
                    WalRecovery::TruncateAtDamage,
                )
            });
        }
        let db = common::open_with(
            &d,
            lsm.clone(),
            SyncMode::Never,
            WalRecovery::TruncateAtDamage,
        )
        .unwrap_or_else(|e| panic!("{what}: salvage: {e}"));
        let got: Vec<Vec<u8>> = common::contents(&db).into_keys().collect();
        let k = got.len() as u32;
        assert!(k < n, "{what}: nothing was lost");
        assert_eq!(
            got,
            (0..k).map(key).collect::<Vec<_>>(),
            "{what}: not a prefix"
        );
        db.put(b"zafter", b"salvage").unwrap();
        drop(db);
        let db = common::open(&d, lsm, SyncMode::Never)
            .unwrap_or_else(|e| panic!("{what}: reopen after salvage: {e}"));
        let again = common::contents(&db);
        assert_eq!(again.len() as u32, k + 1, "{what}: reopened");
        assert_eq!(
            again.get(&b"zafter"[..]).map(Vec::as_slice),
            Some(&b"salvage"[..])
        );
        db.verify()
            .unwrap_or_else(|e| panic!("{what}: verify: {e}"));
    }
}

/// A WAL whose first record names a memtable no store reaches (damage
/// that passes the checksum) is refused as corruption, without
/// arithmetic on the number overflowing.
#[test]
fn a_wal_naming_an_unreachable_memtable_is_refused() {
    for epoch in [u64::MAX, u64::MAX - 2, 1 << 62] {
        let d = common::fresh();
        let mut rec = Vec::new();
        ferrite_wal::encode_record(epoch, &[0; 12], &mut rec);
        let mut b = AlignedBuf::zeroed(4096);
        b[..rec.len()].copy_from_slice(&rec);
        d[3].write_at(&b, 0).unwrap();
        match common::open(&d, common::tiny(IndexKind::Sparse), SyncMode::Always) {
            Err(Error::Corruption { .. }) => {}
            Err(e) => panic!("memtable {epoch}: {e}"),
            Ok(_) => panic!("memtable {epoch}: opened"),
        }
    }
}
