//! What a checkpoint carries over: writes that are in neither the pages
//! it installs nor the WAL it starts, replayed on top of it at recovery.
//!
//! Three kinds: the insert buffer's records (the WAL that logged them is
//! reset, and they are in no page); the batch in flight when a checkpoint
//! happens halfway through it (its first operations are in the installed
//! pages, so the whole batch must be replayed to keep it all or nothing);
//! and, for a checkpoint recovery itself takes, the batches it has yet to
//! replay (they are in the WAL that checkpoint resets). A checkpoint of epoch `E` writes them to slot `E % 2` and
//! syncs it before the meta page of `E` is written; recovery replays the
//! slot whose epoch is the meta page's, then the WAL. The other slot keeps
//! the previous epoch's copy, so a crash while writing a slot (before its
//! meta page) loses nothing: the old meta page, the old slot and the old
//! WAL still describe the store. A checkpoint with nothing to carry writes
//! nothing, and its meta page says so (`Carried::Nothing`); one that wrote
//! a carry-over says that too, and since the slot was synced before the
//! meta page, recovery then takes a missing or damaged slot for corruption
//! rather than for an empty one (which would silently drop the records).
//!
//! Layout (spec: `docs/format/btree-page.md`, "Carry-over slots"): one
//! header block — magic `FBTCRY01`, epoch u64, payload length u64, payload
//! crc32c u32, header crc32c u32 (over the preceding 28 bytes) — then the
//! payload, padded to the block size: a batch count u32, then per batch
//! its length u32 and its `WriteBatch` encoding, applied in order.

use ferrite_core::engine::ByteReader;
use ferrite_core::{Error, Result, WriteBatch};
use ferrite_io::{AlignedBuf, BlockDevice};

const MAGIC: &[u8; 8] = b"FBTCRY01";
const HEADER: usize = 32;

/// Writes `batches` (encoded) as the carry-over of epoch `epoch` and syncs it.
pub fn write(dev: &dyn BlockDevice, epoch: u64, batches: &[&[u8]]) -> Result<()> {
    let bs = dev.block_size();
    let mut payload = Vec::with_capacity(4 + batches.iter().map(|b| b.len() + 4).sum::<usize>());
    payload.extend_from_slice(&(batches.len() as u32).to_le_bytes());
    for b in batches {
        payload.extend_from_slice(&(b.len() as u32).to_le_bytes());
        payload.extend_from_slice(b);
    }
    let total = (bs + payload.len()).div_ceil(bs) * bs;
    let mut image = AlignedBuf::zeroed(total);
    let mut head = Vec::with_capacity(HEADER);
    head.extend_from_slice(MAGIC);
    head.extend_from_slice(&epoch.to_le_bytes());
    head.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    head.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
    let hcrc = crc32c::crc32c(&head);
    head.extend_from_slice(&hcrc.to_le_bytes());
    image[..HEADER].copy_from_slice(&head);
    image[bs..bs + payload.len()].copy_from_slice(&payload);
    dev.set_len(0)?;
    dev.write_at(&image, 0)?;
    dev.sync()?;
    Ok(())
}

/// Reads the carry-over of `epoch`. When the meta page says one was
/// written (`required`), a slot without a valid one of that epoch is
/// corruption; otherwise (a meta page too old to say) such a slot reads as
/// empty. A payload that passes its checksum but does not decode is
/// corruption either way. The batches come encoded, each checked to
/// decode, as recovery replays them.
pub fn read(dev: &dyn BlockDevice, epoch: u64, required: bool) -> Result<Vec<Vec<u8>>> {
    match find(dev, epoch)? {
        Ok(payload) => Ok(split(&payload)?.into_iter().map(<[u8]>::to_vec).collect()),
        Err(why) if required => Err(Error::corruption(
            "carry-over slot",
            format!("the carry-over of checkpoint {epoch} is {why}"),
        )),
        Err(_) => Ok(Vec::new()),
    }
}

/// The slot's payload if it holds a valid carry-over of `epoch`, else
/// why not.
fn find(dev: &dyn BlockDevice, epoch: u64) -> Result<std::result::Result<Vec<u8>, String>> {
    let bs = dev.block_size();
    if dev.len() < bs as u64 {
        return Ok(Err("missing".into()));
    }
    let mut head = AlignedBuf::zeroed(bs);
    dev.read_at(&mut head, 0)?;
    let mut r = ByteReader::new(&head);
    let parsed = (|| {
        let magic = r.bytes(8)?;
        let e = r.u64()?;
        let len = r.u64()?;
        let crc = r.u32()?;
        let hcrc = r.u32()?;
        Some((magic == MAGIC, e, len, crc, hcrc))
    })();
    let Some((true, e, len, crc, hcrc)) = parsed else {
        return Ok(Err("missing (no header)".into()));
    };
    if crc32c::crc32c(head.get(..HEADER - 4).unwrap_or_default()) != hcrc {
        return Ok(Err("damaged (header checksum)".into()));
    }
    if e != epoch {
        return Ok(Err(format!("missing (the slot holds checkpoint {e}'s)")));
    }
    let total = (bs as u64).saturating_add(len).div_ceil(bs as u64) * bs as u64;
    if total > dev.len() {
        return Ok(Err("cut short".into()));
    }
    let mut all = AlignedBuf::zeroed(total as usize);
    dev.read_at(&mut all, 0)?;
    let payload = all.get(bs..bs + len as usize).unwrap_or_default();
    if crc32c::crc32c(payload) != crc {
        return Ok(Err("damaged (payload checksum)".into()));
    }
    Ok(Ok(payload.to_vec()))
}

#[cfg(any(test, feature = "bench-internals"))]
/// Decodes a carry-over payload (the batches, in order). Never panics: a
/// payload that does not decode is a corruption error.
pub fn decode(payload: &[u8]) -> Result<Vec<WriteBatch>> {
    split(payload)?
        .into_iter()
        .map(WriteBatch::decode)
        .collect()
}

/// The encoded batches of a carry-over payload, in order, each checked to
/// decode. A payload that does not is a corruption error.
fn split(payload: &[u8]) -> Result<Vec<&[u8]>> {
    let bad = |what: String| Error::corruption("carry-over slot", what);
    let mut r = ByteReader::new(payload);
    let count = r.u32().ok_or_else(|| bad("no batch count".into()))?;
    let mut out = Vec::new();
    for i in 0..count {
        let len = r
            .u32()
            .ok_or_else(|| bad(format!("batch {i} has no length")))?;
        let bytes = r
            .bytes(len as usize)
            .ok_or_else(|| bad(format!("batch {i} is cut short")))?;
        WriteBatch::decode(bytes).map_err(|e| bad(format!("batch {i}: {e}")))?;
        out.push(bytes);
    }
    if r.remaining() != 0 {
        return Err(bad("trailing bytes after the last batch".into()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_io::MemDevice;

    #[test]
    fn round_trips_and_rejects_other_epochs_and_damage() {
        let dev = MemDevice::new();
        assert!(read(&dev, 1, false).unwrap().is_empty());
        assert!(
            read(&dev, 1, true).is_err(),
            "a required carry-over is missing"
        );
        let mut b = WriteBatch::new();
        b.put(b"a", b"1").unwrap();
        b.delete(b"b").unwrap();
        let mut enc = Vec::new();
        b.encode(&mut enc);
        write(&dev, 7, &[&enc, &enc]).unwrap();
        for required in [false, true] {
            let got: Vec<WriteBatch> = read(&dev, 7, required)
                .unwrap()
                .iter()
                .map(|e| WriteBatch::decode(e).unwrap())
                .collect();
            assert_eq!(got, vec![b.clone(), b.clone()]);
        }
        assert!(read(&dev, 8, false).unwrap().is_empty());
        assert!(matches!(read(&dev, 8, true), Err(Error::Corruption { .. })));
        // Flip a payload byte: the checksum catches it.
        let mut all = AlignedBuf::zeroed(dev.len() as usize);
        dev.read_at(&mut all, 0).unwrap();
        all[dev.block_size() + 3] ^= 1;
        dev.write_at(&all, 0).unwrap();
        assert!(read(&dev, 7, false).unwrap().is_empty());
        match read(&dev, 7, true) {
            Err(Error::Corruption { reason, .. }) => {
                assert!(reason.contains("damaged"), "{reason}")
            }
            other => panic!("a damaged required carry-over read as {other:?}"),
        }
        write(&dev, 9, &[]).unwrap();
        assert!(read(&dev, 9, true).unwrap().is_empty());
    }

    #[test]
    fn decoding_arbitrary_bytes_never_panics() {
        let mut x = 11u64;
        for len in 0..600usize {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    // Small values make plausible counts and lengths.
                    if x >> 62 == 0 {
                        (x >> 40) as u8
                    } else {
                        (x >> 40) as u8 & 3
                    }
                })
                .collect();
            let _ = decode(&bytes);
        }
        let mut ok = Vec::new();
        ok.extend_from_slice(&1u32.to_le_bytes());
        ok.extend_from_slice(&4u32.to_le_bytes());
        ok.extend_from_slice(&0u32.to_le_bytes());
        assert_eq!(decode(&ok).unwrap(), vec![WriteBatch::new()]);
        ok.push(0);
        assert!(decode(&ok).is_err(), "trailing bytes are refused");
    }
}
