//! WAL replay from arbitrary device bytes: opening never panics; an open
//! refused as damage leaves the bytes as they were, and a salvaging open
//! of the same bytes replays the records before the damage; and a log
//! opened on whatever it found keeps exactly what it replayed, then what
//! is appended after: a record written after the open is followed by
//! nothing from before it, even when it ends on a block boundary. With the epoch byte's
//! top bit set, the bytes are first made into a log of valid records
//! (some claiming how far the log was synced), so replay runs through many
//! of them before it meets the end.
#![no_main]

use std::sync::Arc;

use ferrite_io::{AlignedBuf, BlockDevice, MemDevice};
use ferrite_core::WalRecovery;
use ferrite_wal::{encode_claiming_record, encode_record, survey, Wal, CLAIM_LEN, HEADER_LEN};
use libfuzzer_sys::fuzz_target;

fn replay(
    dev: &Arc<dyn BlockDevice>,
    epoch: u64,
    recovery: WalRecovery,
) -> Option<(Wal, Vec<Vec<u8>>)> {
    let mut got = Vec::new();
    let (wal, _) = Wal::open_with(dev.clone(), epoch, recovery, &mut |p| {
        got.push(p.to_vec());
        Ok(())
    })
    .ok()?;
    Some((wal, got))
}

/// `bytes` as records with valid checksums: each takes a length byte and
/// up to 63 payload bytes after it; a length byte with its top bit set
/// makes a record of the next epoch, which ends replay; one with the next
/// bit set claims the log was synced below its first payload byte times
/// 16 (at most its own offset).
fn sealed_log(epoch: u64, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while let Some((&n, tail)) = rest.split_first() {
        let len = usize::from(n & 0x3f).min(tail.len());
        let (payload, after) = tail.split_at(len);
        let e = if n & 0x80 != 0 { epoch + 1 } else { epoch };
        if n & 0x40 != 0 {
            let claim = (u64::from(payload.first().copied().unwrap_or(0)) * 16)
                .min(out.len() as u64);
            encode_claiming_record(e, claim, false, payload, &mut out);
        } else {
            encode_record(e, payload, &mut out);
        }
        rest = after;
    }
    out
}

fn image(dev: &dyn BlockDevice) -> Vec<u8> {
    let mut buf = AlignedBuf::zeroed(dev.len() as usize);
    dev.read_at(&mut buf, 0).expect("a memory device reads");
    buf.to_vec()
}

fuzz_target!(|data: &[u8]| {
    // Two bytes pick the epoch and how long the appended record is, so
    // it can end anywhere in a block, including on its boundary.
    let [epoch, fill, bytes @ ..] = data else {
        return;
    };
    let sealed;
    let bytes = if epoch & 0x80 != 0 {
        sealed = sealed_log(u64::from(*epoch % 4), bytes);
        &sealed[..]
    } else {
        bytes
    };
    let dev = MemDevice::new();
    if !bytes.is_empty() {
        let mut buf = AlignedBuf::zeroed(bytes.len().div_ceil(4096) * 4096);
        buf[..bytes.len()].copy_from_slice(bytes);
        if dev.write_at(&buf, 0).is_err() {
            return;
        }
    }
    let dev: Arc<dyn BlockDevice> = Arc::new(dev);
    let epoch = u64::from(*epoch % 4);
    let before = image(dev.as_ref());
    let Some((wal, mut want)) = replay(&dev, epoch, WalRecovery::Refuse) else {
        assert!(image(dev.as_ref()) == before, "a refused open changed the log");
        let records = survey(dev.as_ref(), epoch).expect("a memory device reads").records;
        let (_, got) = replay(&dev, epoch, WalRecovery::TruncateAtDamage)
            .expect("a salvaging open of a damaged log succeeds");
        assert_eq!(got.len() as u64, records, "salvage replays what precedes the damage");
        return;
    };
    let end = wal.len() as usize;
    let to_boundary = 4096 - end % 4096;
    let header = HEADER_LEN + CLAIM_LEN;
    let len = match fill % 3 {
        0 => to_boundary.saturating_sub(header),
        1 => to_boundary + 4096 - header,
        _ => usize::from(*fill),
    };
    let record = vec![*fill; len];
    let Ok(lsn) = wal.append(&record) else {
        return;
    };
    if wal.commit(lsn, true).is_err() {
        return;
    }
    drop(wal);
    want.push(record);
    let (_, got) = replay(&dev, epoch, WalRecovery::Refuse).expect("a log it wrote reopens");
    assert_eq!(
        got, want,
        "the reopened log is what was replayed plus the append"
    );
});
