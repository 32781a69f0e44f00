//! One log record: `crc32c: u32 | len: u32 | epoch: u64 | payload`, all
//! little-endian; the checksum covers `len`, `epoch` and the payload.

/// Bytes before the payload.
pub const HEADER_LEN: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    pub len: u32,
    pub epoch: u64,
}

/// Appends an encoded record to `out`.
pub fn encode_record(epoch: u64, payload: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&epoch.to_le_bytes());
    out.extend_from_slice(payload);
    let crc = crc32c::crc32c(out.get(start + 4..).unwrap_or_default());
    if let Some(dst) = out.get_mut(start..start + 4) {
        dst.copy_from_slice(&crc.to_le_bytes());
    }
}

/// Decodes the record at the start of `buf`, or `None` if it is torn,
/// zero, or fails its checksum (the end of the log).
pub fn decode_record(buf: &[u8]) -> Option<(RecordHeader, &[u8])> {
    let crc = u32::from_le_bytes(buf.get(0..4)?.try_into().ok()?);
    let len = u32::from_le_bytes(buf.get(4..8)?.try_into().ok()?);
    let epoch = u64::from_le_bytes(buf.get(8..16)?.try_into().ok()?);
    let body = buf.get(4..HEADER_LEN.checked_add(len as usize)?)?;
    if crc == 0 && len == 0 {
        return None;
    }
    if crc32c::crc32c(body) != crc {
        return None;
    }
    let payload = body.get(HEADER_LEN - 4..)?;
    Some((RecordHeader { len, epoch }, payload))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip_and_damage() {
        let mut v = Vec::new();
        encode_record(7, b"hello", &mut v);
        let (h, p) = decode_record(&v).unwrap();
        assert_eq!((h.epoch, h.len, p), (7, 5, &b"hello"[..]));
        for i in 0..v.len() {
            let mut bad = v.clone();
            bad[i] ^= 0x20;
            assert!(decode_record(&bad).is_none(), "flip at {i}");
        }
        assert!(decode_record(&v[..v.len() - 1]).is_none());
        assert!(decode_record(&[0; 64]).is_none());
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_record(&bytes);
        }
    }
}
