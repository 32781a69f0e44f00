//! The volume against a byte-array model: random writes (any offset and
//! length), trims, zeroing, flushes, reclamation and reopens; crashes on
//! the fault-injecting device that keep a random part of what was not
//! synced (also after writers raced a flushing thread); and concurrent
//! writers racing the reclaimer.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use ferrite_io::{
    BlockDevice, CrashMode, FaultyDevice, Latency, LatencyDevice, LatencyProfile, MemDevice,
};
use ferrite_volume::{
    BlockMap, CreateOptions, MapKind, RaskMap, ReclaimTargets, Superblock, Volume, VolumeOptions,
};
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const BS: usize = 4096;
const LOGICAL: u64 = 64 * BS as u64;
const SEGMENT: u64 = 16 * BS as u64;

#[derive(Debug, Clone)]
enum Op {
    Write { off: u64, len: u64, seed: u8 },
    Trim { off: u64, len: u64 },
    Zero { off: u64, len: u64, no_hole: bool },
    Read { off: u64, len: u64 },
    Flush,
    Reclaim,
    Reopen,
}

fn span() -> impl Strategy<Value = (u64, u64)> {
    (0..LOGICAL).prop_flat_map(|off| (Just(off), 1..=(LOGICAL - off).min(40_000)))
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (span(), any::<u8>()).prop_map(|((off, len), seed)| Op::Write { off, len, seed }),
        2 => span().prop_map(|(off, len)| Op::Trim { off, len }),
        1 => (span(), any::<bool>()).prop_map(|((off, len), no_hole)| Op::Zero { off, len, no_hole }),
        3 => span().prop_map(|(off, len)| Op::Read { off, len }),
        1 => Just(Op::Flush),
        1 => Just(Op::Reclaim),
        1 => Just(Op::Reopen),
    ]
}

fn pattern(seed: u8, off: u64, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_mul(31).wrapping_add(((off + i) % 251) as u8))
        .collect()
}

fn opts() -> VolumeOptions {
    VolumeOptions {
        direct_io: false,
        // Reclaim eagerly so the small log is cleaned all the time.
        reclaim: ReclaimTargets {
            low_free: 4,
            space_amp: 1.1,
            max_victim_live: 0.95,
        },
        checkpoint_log_bytes: 16 << 10,
    }
}

fn create(dir: &Path, map: MapKind) {
    let mut o = CreateOptions::new(LOGICAL);
    o.segment_bytes = SEGMENT;
    o.map = map;
    ferrite_volume::create(dir, &o).unwrap();
}

fn check(v: &Volume) {
    let r = v.check().unwrap();
    assert!(r.problems.is_empty(), "{:?}", r.problems);
}

fn run_model(ops: &[Op], map: MapKind) {
    let dir = tempfile::tempdir().unwrap();
    create(dir.path(), map);
    let mut v = Some(Volume::open(dir.path(), opts()).unwrap());
    let mut model = vec![0u8; LOGICAL as usize];
    for op in ops {
        let vol = v.as_ref().unwrap();
        match *op {
            Op::Write { off, len, seed } => {
                let data = pattern(seed, off, len);
                vol.write(off, &data, seed % 7 == 0).unwrap();
                model[off as usize..(off + len) as usize].copy_from_slice(&data);
            }
            Op::Trim { off, len } => {
                vol.trim(off, len, false).unwrap();
                // Only whole blocks inside the range are forgotten.
                let first = off.div_ceil(BS as u64);
                let end = (off + len) / BS as u64;
                for b in first..end {
                    model[b as usize * BS..(b as usize + 1) * BS].fill(0);
                }
            }
            Op::Zero { off, len, no_hole } => {
                vol.write_zeroes(off, len, no_hole, false).unwrap();
                model[off as usize..(off + len) as usize].fill(0);
            }
            Op::Read { off, len } => {
                let mut buf = vec![0u8; len as usize];
                vol.read(off, &mut buf).unwrap();
                assert!(
                    buf == model[off as usize..(off + len) as usize],
                    "read {off}+{len} differs"
                );
            }
            Op::Flush => vol.flush().unwrap(),
            Op::Reclaim => {
                vol.reclaim_now().unwrap();
                check(vol);
            }
            Op::Reopen => {
                v.take().unwrap().close().unwrap();
                v = Some(Volume::open(dir.path(), opts()).unwrap());
                check(v.as_ref().unwrap());
            }
        }
    }
    let vol = v.take().unwrap();
    let mut all = vec![0u8; LOGICAL as usize];
    vol.read(0, &mut all).unwrap();
    assert!(all == model, "final image differs");
    check(&vol);
    vol.close().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("MODEL_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(24)
    ))]

    #[test]
    fn rask_volume_matches_a_byte_array(ops in proptest::collection::vec(op(), 1..120)) {
        run_model(&ops, MapKind::Rask);
    }

    #[test]
    fn per_block_volume_matches_a_byte_array(ops in proptest::collection::vec(op(), 1..60)) {
        run_model(&ops, MapKind::PerBlock);
    }
}

/// Overwriting the whole volume many times over never runs out of room:
/// the reserve and reclamation keep a full volume writable.
#[test]
fn a_full_volume_stays_writable_under_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    create(dir.path(), MapKind::Rask);
    let v = Volume::open(
        dir.path(),
        VolumeOptions {
            direct_io: false,
            ..VolumeOptions::default()
        },
    )
    .unwrap();
    let mut rng = SmallRng::seed_from_u64(7);
    let mut model = vec![0u8; LOGICAL as usize];
    for i in 0..2000u64 {
        let blocks = rng.gen_range(1..=4u64);
        let b = rng.gen_range(0..=(LOGICAL / BS as u64 - blocks));
        let data = pattern(i as u8, b * BS as u64, blocks * BS as u64);
        if let Err(e) = v.write(b * BS as u64, &data, false) {
            panic!("write {i}: {e}; segments {:?}", v.segments());
        }
        model[b as usize * BS..(b + blocks) as usize * BS].copy_from_slice(&data);
        if i % 100 == 0 {
            v.flush().unwrap();
        }
    }
    let mut all = vec![0u8; LOGICAL as usize];
    v.read(0, &mut all).unwrap();
    assert!(all == model);
    let st = v.stats();
    assert!(st.reclaimed_segments > 0, "{st:?}");
    check(&v);
    v.close().unwrap();
}

fn hash(b: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    b.hash(&mut h);
    h.finish()
}

/// Power loss at random points: every block reads either what the last
/// completed flush left or something written to that block since; a
/// block written only before that flush reads exactly that.
#[test]
fn crashes_keep_every_flushed_write_and_invent_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = CreateOptions::new(LOGICAL);
    o.segment_bytes = SEGMENT;
    let sb = Superblock::plan(LOGICAL, SEGMENT, o.reserve, MapKind::Rask).unwrap();
    let dev = Arc::new(FaultyDevice::new(MemDevice::new()));
    dev.set_len(sb.physical_bytes()).unwrap();
    let map_dir = dir.path().join("map");
    let open = |dev: &Arc<FaultyDevice<MemDevice>>| {
        let map: Box<dyn BlockMap> = Box::new(RaskMap::open(&map_dir, false).unwrap());
        Volume::open_on(sb, dev.clone(), map, opts()).unwrap()
    };
    let blocks = (LOGICAL / BS as u64) as usize;
    // Per block: the durable content, and what was written since.
    let mut durable = vec![hash(&[0u8; BS]); blocks];
    let mut since: Vec<Vec<u64>> = vec![Vec::new(); blocks];
    let mut rng = SmallRng::seed_from_u64(11);
    for round in 0..12u64 {
        let v = open(&dev);
        // Verify what the last crash left.
        let mut all = vec![0u8; LOGICAL as usize];
        v.read(0, &mut all).unwrap();
        for b in 0..blocks {
            let h = hash(&all[b * BS..(b + 1) * BS]);
            assert!(
                h == durable[b] || since[b].contains(&h),
                "round {round}: block {b} holds data never written to it"
            );
            durable[b] = h;
            since[b].clear();
        }
        check(&v);
        let n_ops = rng.gen_range(20..200);
        for i in 0..n_ops {
            let n = rng.gen_range(1..=6u64);
            let b = rng.gen_range(0..=(blocks as u64 - n));
            if rng.gen_bool(0.1) {
                v.trim(b * BS as u64, n * BS as u64, false).unwrap();
                for k in b..b + n {
                    since[k as usize].push(hash(&[0u8; BS]));
                }
            } else {
                let data = pattern(
                    (round * 1000 + i) as u8,
                    b * BS as u64 + round,
                    n * BS as u64,
                );
                v.write(b * BS as u64, &data, false).unwrap();
                for k in 0..n as usize {
                    since[b as usize + k].push(hash(&data[k * BS..(k + 1) * BS]));
                }
            }
            if rng.gen_bool(0.05) {
                v.flush().unwrap();
                let mut all = vec![0u8; LOGICAL as usize];
                v.read(0, &mut all).unwrap();
                for b in 0..blocks {
                    durable[b] = hash(&all[b * BS..(b + 1) * BS]);
                    since[b].clear();
                }
            }
        }
        dev.crash(CrashMode::KeepRandom {
            seed: round,
            keep: 0.5,
        })
        .unwrap();
        // Closing after the crash fails to sync and must not make the
        // map's unsynced entries durable.
        drop(v);
        dev.restart();
    }
}

/// Power loss while writers race a flushing thread: a flush covers the
/// writes that returned before it began (each block reads its last such
/// write or a later one), and writes landing while it syncs neither block
/// it nor become durable without their data.
#[test]
fn writes_racing_flushes_keep_what_each_flush_covered() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = CreateOptions::new(LOGICAL);
    o.segment_bytes = SEGMENT;
    let sb = Superblock::plan(LOGICAL, SEGMENT, o.reserve, MapKind::Rask).unwrap();
    // Syncs of the data log take a while, as on a disk: writes land
    // during them.
    let slow_sync = LatencyProfile {
        read: Latency::Zero,
        write: Latency::Zero,
        sync: Latency::Fixed(std::time::Duration::from_millis(2)),
    };
    let dev = Arc::new(FaultyDevice::new(
        LatencyDevice::new(MemDevice::new(), slow_sync, 1).unwrap(),
    ));
    dev.set_len(sb.physical_bytes()).unwrap();
    let map_dir = dir.path().join("map");
    let open = |dev: &Arc<FaultyDevice<LatencyDevice<MemDevice>>>| {
        let map: Box<dyn BlockMap> = Box::new(RaskMap::open(&map_dir, false).unwrap());
        Volume::open_on(sb, dev.clone(), map, opts()).unwrap()
    };
    let blocks = (LOGICAL / BS as u64) as usize;
    let threads = 3usize;
    let region = blocks / threads;
    let mut base = vec![hash(&[0u8; BS]); blocks];
    for round in 0..24u64 {
        let v = Arc::new(open(&dev));
        // Completion order of writes, and where each flush began in it.
        let clock = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..threads)
            .map(|t| {
                let (v, clock) = (v.clone(), clock.clone());
                std::thread::spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(round * 10 + t as u64);
                    let mut log: Vec<(u64, usize, u64)> = Vec::new(); // (seq, block, hash)
                    for i in 0..5000u64 {
                        let n = rng.gen_range(1..=4usize);
                        let b = t * region + rng.gen_range(0..=region - n);
                        let off = (b * BS) as u64;
                        let data = pattern((round * 7 + i) as u8, off + t as u64, (n * BS) as u64);
                        if v.write(off, &data, false).is_err() {
                            // The power went.
                            break;
                        }
                        let seq = clock.fetch_add(1, Ordering::SeqCst) + 1;
                        for k in 0..n {
                            log.push((seq, b + k, hash(&data[k * BS..(k + 1) * BS])));
                        }
                    }
                    log
                })
            })
            .collect();
        let flusher = {
            let (v, clock, done) = (v.clone(), clock.clone(), done.clone());
            std::thread::spawn(move || {
                let mut covered = 0;
                while !done.load(Ordering::SeqCst) {
                    let start = clock.load(Ordering::SeqCst);
                    if v.flush().is_err() {
                        break;
                    }
                    covered = start;
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
                covered
            })
        };
        // The power goes while they run.
        std::thread::sleep(std::time::Duration::from_millis(5 + round % 8 * 4));
        dev.crash(CrashMode::KeepRandom {
            seed: round,
            keep: 0.5,
        })
        .unwrap();
        let mut writes: Vec<(u64, usize, u64)> = Vec::new();
        for w in writers {
            writes.extend(w.join().unwrap());
        }
        done.store(true, Ordering::SeqCst);
        let covered = flusher.join().unwrap();
        drop(v);
        dev.restart();
        let v = open(&dev);
        let mut all = vec![0u8; LOGICAL as usize];
        v.read(0, &mut all).unwrap();
        writes.sort_unstable();
        for b in 0..blocks {
            let mine: Vec<(u64, u64)> = writes
                .iter()
                .filter(|w| w.1 == b)
                .map(|w| (w.0, w.2))
                .collect();
            let last_covered = mine.iter().rposition(|w| w.0 <= covered);
            let allowed: Vec<u64> = match last_covered {
                Some(i) => mine[i..].iter().map(|w| w.1).collect(),
                None => std::iter::once(base[b])
                    .chain(mine.iter().map(|w| w.1))
                    .collect(),
            };
            let h = hash(&all[b * BS..(b + 1) * BS]);
            assert!(
                allowed.contains(&h),
                "round {round}: block {b} lost a flushed write or holds data never written to it"
            );
            base[b] = h;
        }
        check(&v);
        drop(v);
    }
}

/// Writers on disjoint regions, readers and the reclaimer all at once.
#[test]
fn concurrent_writers_readers_and_reclaimer_agree() {
    let dir = tempfile::tempdir().unwrap();
    create(dir.path(), MapKind::Rask);
    let v = Arc::new(Volume::open(dir.path(), opts()).unwrap());
    let threads = 4u64;
    let region = LOGICAL / threads;
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let v = v.clone();
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(t);
                let mut model = vec![0u8; region as usize];
                for i in 0..400u64 {
                    let len = rng.gen_range(1..=3 * BS as u64);
                    let off = rng.gen_range(0..=region - len);
                    let data = pattern((t * 97 + i) as u8, off, len);
                    v.write(t * region + off, &data, i % 50 == 0).unwrap();
                    model[off as usize..(off + len) as usize].copy_from_slice(&data);
                    if i % 7 == 0 {
                        let mut got = vec![0u8; region as usize];
                        v.read(t * region, &mut got).unwrap();
                        assert!(got == model, "thread {t} op {i}: region differs");
                    }
                    if i % 40 == 0 {
                        v.flush().unwrap();
                    }
                }
                model
            })
        })
        .collect();
    let models: Vec<Vec<u8>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let mut all = vec![0u8; LOGICAL as usize];
    v.read(0, &mut all).unwrap();
    assert!(all == models.concat());
    check(&v);
    let v = Arc::try_unwrap(v).ok().unwrap();
    v.close().unwrap();
    // And the same after a reopen.
    let v = Volume::open(dir.path(), opts()).unwrap();
    let mut again = vec![0u8; LOGICAL as usize];
    v.read(0, &mut again).unwrap();
    assert!(again == models.concat());
}

/// Requests past the end are refused with nothing changed.
#[test]
fn requests_past_the_end_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    create(dir.path(), MapKind::Rask);
    let v = Volume::open(dir.path(), opts()).unwrap();
    let mut buf = vec![0u8; 8192];
    assert!(v.read(LOGICAL - 4096, &mut buf).is_err());
    assert!(v.write(LOGICAL - 4096, &buf, false).is_err());
    assert!(v.trim(LOGICAL, 1, false).is_err());
    assert!(v.write(u64::MAX - 10, &buf, false).is_err());
    assert_eq!(v.stats().live_blocks, 0);
    // A second open of the same directory is refused while this one lives.
    assert!(matches!(
        Volume::open(dir.path(), opts()),
        Err(ferrite_volume::VolumeError::InUse { .. })
    ));
}
