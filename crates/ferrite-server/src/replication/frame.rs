//! The replication stream's frames (`docs/format/replication.md`): a
//! kind, a length and a CRC-32C of the payload, then the payload.
//!
//! Only change frames are the stream proper: their bytes are what the
//! replication offset counts and what the backlog keeps, identical on
//! the master and on every replica that applied them. The other kinds
//! (a full sync's records and its end, heartbeats, requests for an
//! acknowledgement) pass between two nodes and count for nothing.
//!
//! Invariants: [`Decoder::next`] of [`encode`]'s bytes gives the frame
//! back; it never panics on any bytes, refuses a frame longer than
//! [`MAX_PAYLOAD`] before reading it, and a checksum that does not
//! match is an error, never a frame.

use thiserror::Error;

/// Bytes before the payload: kind (1), length (4), CRC-32C (4).
pub const HEADER: usize = 9;

/// The longest payload a frame may carry (a change of one transaction:
/// a pipeline group's or an `EXEC`'s writes).
pub const MAX_PAYLOAD: usize = 1 << 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A committed transaction's change (`model::change`).
    Change = 1,
    /// Records of a full sync's copy: a count, then (key, value) pairs.
    Records = 2,
    /// The copy is complete; the stream follows from the offset given
    /// with `+FULLRESYNC`.
    CopyEnd = 3,
    /// The master is alive; its offset (u64, little-endian).
    Heartbeat = 4,
    /// The replica is to send `REPLCONF ACK` now.
    GetAck = 5,
}

impl Kind {
    fn of(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Change,
            2 => Kind::Records,
            3 => Kind::CopyEnd,
            4 => Kind::Heartbeat,
            5 => Kind::GetAck,
            _ => return None,
        })
    }
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("unknown frame kind {0}")]
    Kind(u8),
    #[error("frame of {0} bytes is longer than any this server sends")]
    TooLong(usize),
    #[error("frame checksum mismatch")]
    Checksum,
    #[error("malformed records frame")]
    Records,
}

/// A frame's bytes.
pub fn encode(kind: Kind, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.push(kind as u8);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// Reads the header at the front of `b`: the kind and the payload
/// length, `None` until the header is whole.
pub fn header(b: &[u8]) -> Result<Option<(Kind, usize)>, FrameError> {
    if b.len() < HEADER {
        return Ok(None);
    }
    let kind = Kind::of(b[0]).ok_or(FrameError::Kind(b[0]))?;
    let len = u32::from_le_bytes([b[1], b[2], b[3], b[4]]) as usize;
    if len > MAX_PAYLOAD {
        return Err(FrameError::TooLong(len));
    }
    Ok(Some((kind, len)))
}

/// Checks a whole frame's payload against its header's checksum.
pub fn verify(frame: &[u8]) -> Result<&[u8], FrameError> {
    let crc = u32::from_le_bytes([frame[5], frame[6], frame[7], frame[8]]);
    let payload = &frame[HEADER..];
    if crc32c::crc32c(payload) != crc {
        return Err(FrameError::Checksum);
    }
    Ok(payload)
}

/// Frames read from a byte stream as it arrives.
#[derive(Default)]
pub struct Decoder {
    buf: Vec<u8>,
}

impl Decoder {
    pub fn feed(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole frame (kind and its bytes, header included).
    pub fn next_frame(&mut self) -> Result<Option<(Kind, Vec<u8>)>, FrameError> {
        let Some((kind, len)) = header(&self.buf)? else {
            return Ok(None);
        };
        if self.buf.len() < HEADER + len {
            return Ok(None);
        }
        let rest = self.buf.split_off(HEADER + len);
        let frame = std::mem::replace(&mut self.buf, rest);
        verify(&frame)?;
        Ok(Some((kind, frame)))
    }
}

/// A records frame's payload: a count, then length-prefixed keys and
/// values.
pub fn records(pairs: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(pairs.len() as u32).to_le_bytes());
    for (k, v) in pairs {
        out.extend_from_slice(&(k.len() as u32).to_le_bytes());
        out.extend_from_slice(k);
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        out.extend_from_slice(v);
    }
    out
}

/// A copy's records: (key, value) pairs.
pub type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// Reads a records payload.
pub fn read_records(b: &[u8]) -> Result<Pairs, FrameError> {
    let mut at = 0usize;
    let n = read_u32(b, &mut at)?;
    if n.saturating_mul(8) > b.len() {
        return Err(FrameError::Records);
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let kl = read_u32(b, &mut at)?;
        let k = read_bytes(b, &mut at, kl)?.to_vec();
        let vl = read_u32(b, &mut at)?;
        let v = read_bytes(b, &mut at, vl)?.to_vec();
        out.push((k, v));
    }
    if at != b.len() {
        return Err(FrameError::Records);
    }
    Ok(out)
}

fn read_bytes<'a>(b: &'a [u8], at: &mut usize, n: usize) -> Result<&'a [u8], FrameError> {
    let end = at
        .checked_add(n)
        .filter(|&e| e <= b.len())
        .ok_or(FrameError::Records)?;
    let s = &b[*at..end];
    *at = end;
    Ok(s)
}

fn read_u32(b: &[u8], at: &mut usize) -> Result<usize, FrameError> {
    let s = read_bytes(b, at, 4)?;
    Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as usize)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn frames_come_back_whole_and_in_order_whatever_the_chunks() {
        let a = encode(Kind::Change, b"first");
        let b = encode(Kind::Heartbeat, &7u64.to_le_bytes());
        let all = [a.clone(), b.clone()].concat();
        for cut in 0..all.len() {
            let mut d = Decoder::default();
            d.feed(&all[..cut]);
            let mut got = Vec::new();
            while let Some(f) = d.next_frame().unwrap() {
                got.push(f);
            }
            d.feed(&all[cut..]);
            while let Some(f) = d.next_frame().unwrap() {
                got.push(f);
            }
            assert_eq!(
                got,
                vec![(Kind::Change, a.clone()), (Kind::Heartbeat, b.clone())]
            );
        }
    }

    #[test]
    fn a_flipped_bit_is_a_checksum_error() {
        let mut f = encode(Kind::Change, b"payload");
        f[HEADER + 2] ^= 1;
        let mut d = Decoder::default();
        d.feed(&f);
        assert_eq!(d.next_frame(), Err(FrameError::Checksum));
    }

    #[test]
    fn an_oversized_length_is_refused_from_the_header() {
        let mut f = encode(Kind::Change, b"");
        f[1..5].copy_from_slice(&u32::MAX.to_le_bytes());
        let mut d = Decoder::default();
        d.feed(&f);
        assert_eq!(d.next_frame(), Err(FrameError::TooLong(u32::MAX as usize)));
    }

    proptest! {
        #[test]
        fn records_round_trip(pairs in proptest::collection::vec(
            (proptest::collection::vec(any::<u8>(), 0..8), proptest::collection::vec(any::<u8>(), 0..8)), 0..6)) {
            prop_assert_eq!(read_records(&records(&pairs)).unwrap(), pairs);
        }

        #[test]
        fn any_bytes_decode_or_fail_without_panicking(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut d = Decoder::default();
            d.feed(&b);
            while let Ok(Some(_)) = d.next_frame() {}
            let _ = read_records(&b);
        }
    }
}
