//! DirectFile: alignment rules, range checks, and batched reads and writes
//! moving the same bytes whichever way they are carried out.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use ferrite_io::{
    AlignedBuf, BatchMode, BlockDevice, DeviceError, DirectFile, DirectFileOptions, GatherReq,
    MemDevice, ReadReq, WriteReq,
};
use proptest::prelude::*;

const B: usize = 4096;

fn open_in(dir: &tempfile::TempDir, name: &str, mode: BatchMode) -> DirectFile {
    DirectFile::open_with(
        dir.path().join(name),
        DirectFileOptions {
            batch_mode: mode,
            ..Default::default()
        },
    )
    .unwrap()
}

fn file_with_pattern(dir: &tempfile::TempDir, blocks: usize, mode: BatchMode) -> DirectFile {
    let f = open_in(dir, "dev", mode);
    if f.is_empty() {
        let mut buf = AlignedBuf::zeroed(blocks * B);
        for (i, chunk) in buf.chunks_mut(8).enumerate() {
            chunk.copy_from_slice(&(i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes());
        }
        f.write_at(&buf, 0).unwrap();
        f.sync().unwrap();
    }
    f
}

/// Asked for the file system's unit, a file takes what `statx` reports
/// (512 B on most disks), or keeps 4 KiB where it reports none; reads of
/// one unit at a unit's offset then work and return the bytes written.
#[test]
fn a_file_can_take_the_file_systems_direct_io_unit() {
    let dir = tempfile::tempdir().unwrap();
    let f = file_with_pattern(&dir, 2, BatchMode::Auto);
    let fine = DirectFile::open_with(
        dir.path().join("dev"),
        DirectFileOptions {
            file_system_unit: true,
            ..Default::default()
        },
    )
    .unwrap();
    let unit = fine.block_size();
    assert!(
        unit.is_power_of_two() && (512..=B).contains(&unit),
        "{unit}"
    );
    let mut whole = AlignedBuf::zeroed(2 * B);
    f.read_at(&mut whole, 0).unwrap();
    let mut part = AlignedBuf::zeroed(unit);
    fine.read_at(&mut part, unit as u64).unwrap();
    assert_eq!(&part[..], &whole[unit..2 * unit]);
}

#[test]
fn misaligned_offset_length_and_buffer_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let f = file_with_pattern(&dir, 4, BatchMode::Auto);
    let mut ok = AlignedBuf::zeroed(B);
    assert!(matches!(
        f.read_at(&mut ok, 100),
        Err(DeviceError::Misaligned { what: "offset", .. })
    ));
    let mut short = AlignedBuf::zeroed(100);
    assert!(matches!(
        f.read_at(&mut short, 0),
        Err(DeviceError::Misaligned { what: "length", .. })
    ));
    let mut big = AlignedBuf::zeroed(2 * B);
    assert!(matches!(
        f.read_at(&mut big[1..B + 1], 0),
        Err(DeviceError::Misaligned {
            what: "buffer address",
            ..
        })
    ));
    assert!(matches!(
        f.write_at(&big[8..B + 8], 0),
        Err(DeviceError::Misaligned { .. })
    ));
}

#[test]
fn reads_past_the_end_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let f = file_with_pattern(&dir, 4, BatchMode::Auto);
    let mut b = AlignedBuf::zeroed(2 * B);
    assert!(matches!(
        f.read_at(&mut b, 3 * B as u64),
        Err(DeviceError::OutOfRange { .. })
    ));
    let mut reqs = [ReadReq::new(4 * B as u64, &mut b)];
    assert!(matches!(
        f.read_batch(&mut reqs),
        Err(DeviceError::OutOfRange { .. })
    ));
}

#[test]
fn writes_extend_and_set_len_truncates() {
    let dir = tempfile::tempdir().unwrap();
    let f = DirectFile::open(dir.path().join("d")).unwrap();
    assert_eq!(f.len(), 0);
    f.write_at(&AlignedBuf::zeroed(B), 8 * B as u64).unwrap();
    assert_eq!(f.len(), 9 * B as u64);
    f.set_len(2 * B as u64).unwrap();
    assert_eq!(f.len(), 2 * B as u64);
    let s = f.io_stats();
    assert_eq!((s.writes, s.write_bytes), (1, B as u64));
}

/// A file's allocated bytes count only the blocks written: a write far
/// past the start leaves a hole its length includes and its allocation
/// does not; truncating gives the blocks back.
#[test]
fn allocated_counts_written_blocks_not_holes() {
    let dir = tempfile::tempdir().unwrap();
    let f = DirectFile::open(dir.path().join("d")).unwrap();
    f.write_at(&AlignedBuf::zeroed(4 * B), 1024 * B as u64)
        .unwrap();
    f.sync().unwrap();
    assert_eq!(f.len(), 1028 * B as u64);
    let a = f.allocated();
    assert!(a >= 4 * B as u64 && a < 64 * B as u64, "allocated {a}");
    f.set_len(0).unwrap();
    assert_eq!(f.allocated(), 0);
}

#[test]
fn discard_reads_back_as_zeros() {
    let dir = tempfile::tempdir().unwrap();
    let f = file_with_pattern(&dir, 8, BatchMode::Auto);
    f.discard(2 * B as u64, 2 * B as u64).unwrap();
    let mut b = AlignedBuf::zeroed(4 * B);
    f.read_at(&mut b, B as u64).unwrap();
    assert!(b[..B].iter().any(|&x| x != 0));
    assert!(b[B..3 * B].iter().all(|&x| x == 0));
    assert!(b[3 * B..].iter().any(|&x| x != 0));
    assert_eq!(f.len(), 8 * B as u64);
}

#[test]
fn insert_range_shifts_data_and_collapse_range_undoes_it() {
    let dir = tempfile::tempdir().unwrap();
    let f = file_with_pattern(&dir, 8, BatchMode::Auto);
    let mut before = AlignedBuf::zeroed(8 * B);
    f.read_at(&mut before, 0).unwrap();
    match f.insert_range(3 * B as u64, B as u64) {
        Ok(()) => {}
        // A file system without the operation (tmpfs) says so with a typed
        // error; there is nothing more to check here.
        Err(DeviceError::Os { .. }) => return,
        Err(e) => panic!("unexpected error {e}"),
    }
    assert_eq!(f.len(), 9 * B as u64);
    let mut after = AlignedBuf::zeroed(9 * B);
    f.read_at(&mut after, 0).unwrap();
    assert_eq!(after[..3 * B], before[..3 * B]);
    assert!(
        after[3 * B..4 * B].iter().all(|&x| x == 0),
        "the hole reads as zeros"
    );
    assert_eq!(
        after[4 * B..],
        before[3 * B..],
        "the rest moved up one block"
    );
    f.collapse_range(3 * B as u64, B as u64).unwrap();
    assert_eq!(f.len(), 8 * B as u64);
    let mut back = AlignedBuf::zeroed(8 * B);
    f.read_at(&mut back, 0).unwrap();
    assert_eq!(back[..], before[..]);
    assert!(matches!(
        f.insert_range(100, B as u64),
        Err(DeviceError::Misaligned { .. })
    ));
}

fn read_all(f: &DirectFile, offsets: &[(u64, usize)]) -> Vec<AlignedBuf> {
    let mut bufs: Vec<AlignedBuf> = offsets
        .iter()
        .map(|&(_, n)| AlignedBuf::zeroed(n * B))
        .collect();
    let mut reqs: Vec<ReadReq> = bufs
        .iter_mut()
        .zip(offsets)
        .map(|(b, &(o, _))| ReadReq::new(o * B as u64, b))
        .collect();
    f.read_batch(&mut reqs).unwrap();
    bufs
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// io_uring, the thread pool and sequential preads return identical bytes,
    /// for batches larger than one ring submission too.
    #[test]
    fn batch_modes_agree(offsets in proptest::collection::vec((0u64..255, 1usize..=2), 1..150)) {
        let dir = tempfile::tempdir().unwrap();
        let seq = file_with_pattern(&dir, 256, BatchMode::Sequential);
        let pool = file_with_pattern(&dir, 256, BatchMode::ThreadPool);
        let expected = read_all(&seq, &offsets);
        prop_assert_eq!(&read_all(&pool, &offsets), &expected);
        if ferrite_io::io_uring_available() {
            let ring = file_with_pattern(&dir, 256, BatchMode::Uring);
            prop_assert_eq!(ring.batch_mode(), BatchMode::Uring);
            prop_assert_eq!(&read_all(&ring, &offsets), &expected);
        }
        for (buf, &(o, n)) in expected.iter().zip(&offsets) {
            let mut one = AlignedBuf::zeroed(n * B);
            seq.read_at(&mut one, o * B as u64).unwrap();
            prop_assert_eq!(&one, buf);
        }
    }
}

#[test]
fn batch_counts_every_read_once() {
    let dir = tempfile::tempdir().unwrap();
    let f = file_with_pattern(&dir, 16, BatchMode::Auto);
    let before = f.io_stats();
    read_all(&f, &[(0, 1), (5, 1), (9, 2)]);
    let d = f.io_stats().since(&before);
    assert_eq!(
        (d.reads, d.read_bytes, d.read_batches),
        (3, 4 * B as u64, 1)
    );
}

/// Writes `blocks` at the given block numbers (each block filled with its
/// number plus `salt`) as one batch, then reads every block back.
fn write_scattered(f: &DirectFile, at: &[u64], salt: u8) -> ferrite_io::Result<()> {
    let bufs: Vec<AlignedBuf> = at
        .iter()
        .map(|&b| {
            let mut buf = AlignedBuf::zeroed(B);
            buf.fill((b as u8).wrapping_add(salt));
            buf
        })
        .collect();
    let reqs: Vec<WriteReq<'_>> = at
        .iter()
        .zip(&bufs)
        .map(|(&b, buf)| WriteReq::new(b * B as u64, buf))
        .collect();
    f.write_batch(&reqs)
}

#[test]
fn batched_writes_land_whichever_way_they_are_carried_out() {
    let dir = tempfile::tempdir().unwrap();
    let at = [40u64, 3, 17, 64, 5, 33, 90, 2];
    let mut modes = vec![BatchMode::Sequential, BatchMode::ThreadPool];
    if ferrite_io::io_uring_available() {
        modes.push(BatchMode::Uring);
    }
    for (k, mode) in modes.into_iter().enumerate() {
        let f = open_in(&dir, &format!("w{k}"), mode);
        let before = f.io_stats();
        write_scattered(&f, &at, 7).unwrap();
        let d = f.io_stats().since(&before);
        assert_eq!((d.writes, d.write_bytes), (8, 8 * B as u64), "{mode:?}");
        if mode == BatchMode::Uring {
            assert_eq!(d.write_batches, 1);
        }
        assert_eq!(f.len(), 91 * B as u64, "the furthest write sets the length");
        let mut one = AlignedBuf::zeroed(B);
        for &b in &at {
            f.read_at(&mut one, b * B as u64).unwrap();
            assert!(
                one.iter().all(|&x| x == (b as u8).wrapping_add(7)),
                "{mode:?} block {b}"
            );
        }
        f.read_at(&mut one, 4 * B as u64).unwrap();
        assert!(
            one.iter().all(|&x| x == 0),
            "{mode:?}: a block no one wrote"
        );
    }
}

/// Blocks `first..first + n` as separate buffers, each filled with its
/// block number plus `salt`.
fn run_of_blocks(first: u64, n: u64, salt: u8) -> Vec<AlignedBuf> {
    (first..first + n)
        .map(|b| {
            let mut buf = AlignedBuf::zeroed(B);
            buf.fill((b as u8).wrapping_add(salt));
            buf
        })
        .collect()
}

fn assert_blocks(f: &dyn BlockDevice, blocks: impl IntoIterator<Item = u64>, salt: u8, what: &str) {
    let mut one = AlignedBuf::zeroed(B);
    for b in blocks {
        f.read_at(&mut one, b * B as u64).unwrap();
        assert!(
            one.iter().all(|&x| x == (b as u8).wrapping_add(salt)),
            "{what}: block {b}"
        );
    }
}

#[test]
fn gathered_writes_land_as_one_request_per_run() {
    let dir = tempfile::tempdir().unwrap();
    // Three runs: sixteen blocks, one block, and three blocks.
    let runs = [(100u64, 16u64), (7, 1), (40, 3)];
    let mut modes = vec![BatchMode::Sequential, BatchMode::ThreadPool];
    if ferrite_io::io_uring_available() {
        modes.push(BatchMode::Uring);
    }
    for (k, mode) in modes.into_iter().enumerate() {
        let f = open_in(&dir, &format!("g{k}"), mode);
        let bufs: Vec<Vec<AlignedBuf>> =
            runs.iter().map(|&(b, n)| run_of_blocks(b, n, 3)).collect();
        let slices: Vec<Vec<&[u8]>> = bufs
            .iter()
            .map(|run| run.iter().map(|b| &b[..]).collect())
            .collect();
        let reqs: Vec<GatherReq<'_>> = runs
            .iter()
            .zip(&slices)
            .map(|(&(b, _), s)| GatherReq::new(b * B as u64, s))
            .collect();
        let before = f.io_stats();
        f.write_gathered(&reqs).unwrap();
        let d = f.io_stats().since(&before);
        assert_eq!(d.write_bytes, 20 * B as u64, "{mode:?}");
        if mode == BatchMode::Uring {
            // One request per run, all in one batch.
            assert_eq!((d.writes, d.write_batches), (3, 1));
        } else {
            assert_eq!(d.writes, 20, "{mode:?}: one write per buffer");
        }
        assert_eq!(
            f.len(),
            116 * B as u64,
            "the furthest write sets the length"
        );
        for &(b, n) in &runs {
            assert_blocks(&f, b..b + n, 3, &format!("{mode:?}"));
        }
        let mut one = AlignedBuf::zeroed(B);
        f.read_at(&mut one, 99 * B as u64).unwrap();
        assert!(
            one.iter().all(|&x| x == 0),
            "{mode:?}: a block no one wrote"
        );
    }
}

#[test]
fn the_default_gathered_write_is_one_plain_write_per_buffer() {
    let dev = MemDevice::new();
    let bufs = run_of_blocks(5, 4, 9);
    let slices: Vec<&[u8]> = bufs.iter().map(|b| &b[..]).collect();
    dev.write_gathered(&[GatherReq::new(5 * B as u64, &slices)])
        .unwrap();
    assert_eq!(dev.io_stats().writes, 4);
    assert_blocks(&dev, 5..9, 9, "mem");
}

#[test]
fn a_misaligned_buffer_in_a_gathered_write_fails_it_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let f = file_with_pattern(&dir, 4, BatchMode::Auto);
    let good = AlignedBuf::zeroed(2 * B);
    let pieces: [&[u8]; 2] = [&good[..B], &good[1..B + 1]];
    assert!(matches!(
        f.write_gathered(&[GatherReq::new(0, &pieces)]),
        Err(DeviceError::Misaligned { .. })
    ));
    let mut first = AlignedBuf::zeroed(B);
    f.read_at(&mut first, 0).unwrap();
    assert!(first.iter().any(|&x| x != 0), "block 0 keeps its pattern");
}

#[test]
fn a_misaligned_write_in_a_batch_fails_it_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let f = file_with_pattern(&dir, 4, BatchMode::Auto);
    let good = AlignedBuf::zeroed(B);
    let reqs = [WriteReq::new(0, &good), WriteReq::new(100, &good)];
    assert!(matches!(
        f.write_batch(&reqs),
        Err(DeviceError::Misaligned { what: "offset", .. })
    ));
    let mut first = AlignedBuf::zeroed(B);
    f.read_at(&mut first, 0).unwrap();
    assert!(first.iter().any(|&x| x != 0), "block 0 keeps its pattern");
}
