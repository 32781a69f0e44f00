//! LSM recovery from arbitrary bytes: the input becomes a manifest slot, a
//! WAL device and the table space. Opening never panics; it yields a store
//! that answers reads, takes a write, flushes and verifies, or a typed
//! error. A store that did all of that reopens with the same contents.
//!
//! The first byte picks the images. Its first bit set, the manifest is
//! encoded from input-drawn counters and table records (so the checks
//! behind its checksum, and the table space rebuilt from it, see arbitrary
//! values); clear, the manifest slot holds the input as it is. Its second
//! bit set, the WAL of the manifest's log number holds records with valid
//! checksums whose payloads are input-drawn sequence numbers and write
//! batches; clear, the input as it is.
#![no_main]

use std::sync::Arc;

use ferrite_core::{KeyRange, KvStoreExt, Options, SyncMode};
use ferrite_io::{BlockDevice, MemDevice};
use ferrite_lsm::internals::{ManifestState, TableRecord};
use ferrite_lsm::{Devices, IndexKind, LsmOptions, LsmStore, WAL_DEVICES};
use libfuzzer_sys::fuzz_target;

mod image;
use image::{batch, u64_at};

const BLOCK: usize = 4096;

const RECORD: usize = 8 + 2 + 1 + 8 + 8;

/// A manifest of one partition: generation, next table id, log number and
/// last sequence number from the first 32 bytes, then a table record per
/// 27 bytes. Small counters stay small so they meet the WAL's epochs.
fn manifest(bytes: &[u8]) -> ManifestState {
    let (head, records) = bytes.split_at(bytes.len().min(32));
    let log_number = u64_at(head, 16);
    ManifestState {
        generation: u64_at(head, 0),
        next_table: u64_at(head, 8),
        log_number,
        last_seq: u64_at(head, 24),
        partitions: 1,
        tables: records
            .chunks_exact(RECORD)
            .map(|r| TableRecord {
                id: u64_at(r, 0),
                partition: u16::from_le_bytes([r[8], r[9]]),
                level: r[10],
                start: u64_at(r, 11),
                pages: u64_at(r, 19),
            })
            .collect(),
        part_logs: vec![log_number],
        range_dels: Vec::new(),
    }
}

/// WAL records of `epoch`, one per piece of the input ([`image::pieces`]):
/// a length byte with its top bit set makes the payload the piece as it
/// is; otherwise the payload is a sequence number (the piece's first 8
/// bytes) and a batch drawn from the rest ([`image::batch`]).
fn wal(epoch: u64, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for (n, chunk) in image::pieces(bytes) {
        let payload = if n & 0x80 != 0 {
            chunk.to_vec()
        } else {
            let (seq, body) = chunk.split_at(chunk.len().min(8));
            let Some(batch) = batch(n, body) else {
                continue;
            };
            let mut p = u64_at(seq, 0).to_le_bytes().to_vec();
            batch.encode(&mut p);
            p
        };
        ferrite_wal::encode_record(epoch, &payload, &mut out);
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let [pick, m, w, rest @ ..] = data else {
        return;
    };
    let m = (*m as usize * 8).min(rest.len());
    let (man_bytes, tail) = rest.split_at(m);
    let w = (*w as usize * 8).min(tail.len());
    let (wal_bytes, table_bytes) = tail.split_at(w);

    let mut log_number = 0;
    let man = if pick & 1 == 1 {
        let state = manifest(man_bytes);
        log_number = state.log_number;
        state.encode()
    } else {
        man_bytes.to_vec()
    };
    let log = if pick & 2 == 2 {
        wal(log_number, wal_bytes)
    } else {
        wal_bytes.to_vec()
    };
    let Some(tables) = image::device(table_bytes, BLOCK) else {
        return;
    };
    let Some(slot) = image::device(&man, BLOCK) else {
        return;
    };
    let mut wals: [Option<Arc<dyn BlockDevice>>; WAL_DEVICES] = Default::default();
    for (i, w) in wals.iter_mut().enumerate() {
        let bytes = if i as u64 == log_number % WAL_DEVICES as u64 {
            &log[..]
        } else {
            &[][..]
        };
        *w = image::device(bytes, BLOCK);
    }
    let Some(wal) = wals.into_iter().collect::<Option<Vec<_>>>() else {
        return;
    };
    let Ok(wal) = <[Arc<dyn BlockDevice>; WAL_DEVICES]>::try_from(wal) else {
        return;
    };
    let devices = Devices {
        tables,
        manifest: [slot, Arc::new(MemDevice::new())],
        wal,
    };
    let again = Devices {
        tables: devices.tables.clone(),
        manifest: devices.manifest.clone(),
        wal: devices.wal.clone(),
    };
    let opts = Options::default().cache_bytes(64 << 10).sync(SyncMode::Never);
    let lsm = LsmOptions::default().memtable_bytes(4096).max_immutable(2).table_bytes(8192).l0_compaction_trigger(2).l0_slowdown(4).l0_stop(8).l1_bytes(16 << 10).level_multiplier(3).levels(5).bloom_bits_per_key(10).index(if pick & 4 == 4 {
            IndexKind::LEARNED
        } else {
            IndexKind::Sparse
        }).load_aware(None).partitions(1).training_threads(1);
    let Ok(db) = LsmStore::open_on(devices, &opts, lsm.clone()) else {
        return;
    };
    let victim = image::first_key(&db.scan_collect(KeyRange::all(), 64));
    image::check_durable(db, &victim, || LsmStore::open_on(again, &opts, lsm));
});
