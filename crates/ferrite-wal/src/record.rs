//! One log record: `crc32c: u32 | len: u32 | epoch: u64 | [durable: u64] |
//! payload`, all little-endian; the checksum covers everything after
//! itself.
//!
//! The two top bits of `len` are flags, the rest the payload's length:
//! - [`CLAIM`]: the `durable` field is present. It is the device offset
//!   below which the record's log was synced before the record was
//!   appended: a claim a crash cannot make false, because a record that
//!   reaches the device at all was written after that sync. Replay uses
//!   it to tell damage from a torn tail (see the crate docs).
//! - [`SEAL`] (only with `CLAIM`, payload empty): a record that exists for
//!   its claim alone and is never handed to the caller.
//!
//! Records without flags are what logs held before claims existed, and
//! what callers that frame records themselves (ZKV's zone log) write.

/// Bytes before the payload of a record without a claim.
pub const HEADER_LEN: usize = 16;

/// Bytes a claim adds to the header.
pub const CLAIM_LEN: usize = 8;

/// The largest payload a record can carry.
pub const MAX_PAYLOAD: usize = (1 << 30) - 1;

/// `len` flag: a `durable` claim follows the epoch.
pub const CLAIM: u32 = 1 << 31;

/// `len` flag: a claim-only record.
pub const SEAL: u32 = 1 << 30;

const LEN_MASK: u32 = SEAL - 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// Payload bytes.
    pub len: u32,
    pub epoch: u64,
    /// The offset the log was durable below when the record was appended.
    pub durable: Option<u64>,
    /// A claim-only record (see [`SEAL`]).
    pub seal: bool,
}

impl RecordHeader {
    /// Bytes the whole record takes.
    pub fn encoded_len(&self) -> usize {
        let claim = if self.durable.is_some() { CLAIM_LEN } else { 0 };
        HEADER_LEN + claim + self.len as usize
    }
}

/// Appends an encoded record without a claim to `out`. `payload` must be
/// at most [`MAX_PAYLOAD`] bytes.
pub fn encode_record(epoch: u64, payload: &[u8], out: &mut Vec<u8>) {
    encode(epoch, None, false, payload, out);
}

/// Appends an encoded record claiming its log was durable below `durable`
/// to `out`; a `seal` carries no payload. `payload` must be at most
/// [`MAX_PAYLOAD`] bytes.
pub fn encode_claiming_record(
    epoch: u64,
    durable: u64,
    seal: bool,
    payload: &[u8],
    out: &mut Vec<u8>,
) {
    encode(epoch, Some(durable), seal, payload, out);
}

fn encode(epoch: u64, durable: Option<u64>, seal: bool, payload: &[u8], out: &mut Vec<u8>) {
    debug_assert!(payload.len() <= MAX_PAYLOAD);
    debug_assert!(!seal || (durable.is_some() && payload.is_empty()));
    let mut len = (payload.len() as u32) & LEN_MASK;
    if durable.is_some() {
        len |= CLAIM;
    }
    if seal {
        len |= SEAL;
    }
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&epoch.to_le_bytes());
    if let Some(d) = durable {
        out.extend_from_slice(&d.to_le_bytes());
    }
    out.extend_from_slice(payload);
    let crc = crc32c::crc32c(out.get(start + 4..).unwrap_or_default());
    if let Some(dst) = out.get_mut(start..start + 4) {
        dst.copy_from_slice(&crc.to_le_bytes());
    }
}

/// Decodes the record at the start of `buf`, or `None` if it is torn,
/// zero, malformed, or fails its checksum (the end of the log).
pub fn decode_record(buf: &[u8]) -> Option<(RecordHeader, &[u8])> {
    let crc = u32::from_le_bytes(buf.get(0..4)?.try_into().ok()?);
    let flags_len = u32::from_le_bytes(buf.get(4..8)?.try_into().ok()?);
    let epoch = u64::from_le_bytes(buf.get(8..16)?.try_into().ok()?);
    if crc == 0 && flags_len == 0 {
        return None;
    }
    let claims = flags_len & CLAIM != 0;
    let seal = flags_len & SEAL != 0;
    let len = flags_len & LEN_MASK;
    if seal && (!claims || len != 0) {
        return None;
    }
    let head = if claims {
        HEADER_LEN + CLAIM_LEN
    } else {
        HEADER_LEN
    };
    let body = buf.get(4..head.checked_add(len as usize)?)?;
    if crc32c::crc32c(body) != crc {
        return None;
    }
    let durable = if claims {
        Some(u64::from_le_bytes(buf.get(16..24)?.try_into().ok()?))
    } else {
        None
    };
    let payload = body.get(head - 4..)?;
    Some((
        RecordHeader {
            len,
            epoch,
            durable,
            seal,
        },
        payload,
    ))
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
        assert_eq!(
            (h.epoch, h.len, h.durable, h.seal, p),
            (7, 5, None, false, &b"hello"[..])
        );
        assert_eq!(h.encoded_len(), v.len());
        for i in 0..v.len() {
            let mut bad = v.clone();
            bad[i] ^= 0x20;
            assert!(decode_record(&bad).is_none(), "flip at {i}");
        }
        assert!(decode_record(&v[..v.len() - 1]).is_none());
        assert!(decode_record(&[0; 64]).is_none());
    }

    #[test]
    fn claims_and_seals_round_trip_and_detect_damage() {
        let mut v = Vec::new();
        encode_claiming_record(3, 4096, false, b"abc", &mut v);
        let (h, p) = decode_record(&v).unwrap();
        assert_eq!(
            (h.epoch, h.len, h.durable, h.seal, p),
            (3, 3, Some(4096), false, &b"abc"[..])
        );
        assert_eq!(h.encoded_len(), v.len());
        for i in 0..v.len() {
            let mut bad = v.clone();
            bad[i] ^= 0x01;
            assert!(decode_record(&bad).is_none(), "flip at {i}");
        }
        let mut s = Vec::new();
        encode_claiming_record(3, 99, true, b"", &mut s);
        let (h, p) = decode_record(&s).unwrap();
        assert_eq!((h.durable, h.seal, p.len()), (Some(99), true, 0));
        assert_eq!(h.encoded_len(), HEADER_LEN + CLAIM_LEN);
    }

    /// A seal without a claim, or with a payload, is no record even with a
    /// matching checksum.
    #[test]
    fn malformed_flags_are_refused() {
        for flags_len in [SEAL, SEAL | CLAIM | 1] {
            let mut v = vec![0u8; 4];
            v.extend_from_slice(&flags_len.to_le_bytes());
            v.extend_from_slice(&1u64.to_le_bytes());
            v.extend_from_slice(&[0u8; 16]);
            let n = HEADER_LEN
                + (flags_len & LEN_MASK) as usize
                + if flags_len & CLAIM != 0 { CLAIM_LEN } else { 0 };
            let crc = crc32c::crc32c(&v[4..n]);
            v[..4].copy_from_slice(&crc.to_le_bytes());
            assert!(decode_record(&v).is_none(), "{flags_len:#x}");
        }
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_record(&bytes);
        }
    }
}
