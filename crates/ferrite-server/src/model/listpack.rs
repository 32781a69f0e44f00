//! A listpack: Redis's compact encoding of a short list of strings, the
//! byte layout Redis 7 gives a small hash (`OBJECT ENCODING` answers
//! `listpack` for it here because it is that layout, byte for byte).
//!
//! ```text
//! total bytes u32 LE | entries u16 LE (65535: more) | entry* | 0xFF
//! entry = encoding [data] backlen
//!   0xxxxxxx               integer 0..=127
//!   10LLLLLL data          string of up to 63 bytes
//!   110xxxxx yyyyyyyy      13-bit signed integer
//!   1110LLLL LLLLLLLL data string of up to 4095 bytes
//!   11110000 L:u32 LE data longer string
//!   11110001..11110100     16-, 24-, 32-, 64-bit signed integer, LE
//!   backlen: the entry's length (encoding and data) in 1 to 5 bytes,
//!   7 bits each, readable from its last byte backwards
//! ```
//!
//! A string that is the canonical decimal of an `i64` is stored as the
//! integer, as Redis does; reading it gives back the same text.
//!
//! Invariants: a [`Listpack`] holds well-formed bytes (every entry
//! decodes, every backlen matches, the header's totals agree); decoding
//! bytes from the store never panics: anything else is refused.

use std::borrow::Cow;

/// `total bytes` and `entries`.
const HEADER: usize = 6;
const END: u8 = 0xFF;
/// The header's entry count when there are this many or more.
const MANY: u16 = u16::MAX;

/// One element: bytes, or an integer standing for its decimal text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry<'a> {
    Str(&'a [u8]),
    Int(i64),
}

impl Entry<'_> {
    /// The element's bytes.
    pub fn bytes(&self) -> Cow<'_, [u8]> {
        match self {
            Entry::Str(s) => Cow::Borrowed(s),
            Entry::Int(n) => Cow::Owned(n.to_string().into_bytes()),
        }
    }

    pub fn to_vec(self) -> Vec<u8> {
        self.bytes().into_owned()
    }

    /// Whether the element's bytes are `b`.
    pub fn is(&self, b: &[u8]) -> bool {
        match self {
            Entry::Str(s) => *s == b,
            Entry::Int(n) => parse_int(b) == Some(*n),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Entry::Str(s) => s.len(),
            Entry::Int(n) => decimal_len(*n),
        }
    }
}

fn decimal_len(n: i64) -> usize {
    let mut len = usize::from(n < 0) + 1;
    let mut m = n.unsigned_abs();
    while m >= 10 {
        m /= 10;
        len += 1;
    }
    len
}

/// A well-formed listpack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listpack {
    bytes: Vec<u8>,
    /// Entries it holds (the header saturates; this does not).
    count: usize,
}

impl Default for Listpack {
    fn default() -> Self {
        Self::new()
    }
}

/// Why bytes are not a listpack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("malformed listpack at byte {0}")]
pub struct Malformed(pub usize);

impl Listpack {
    pub fn new() -> Self {
        let mut bytes = Vec::with_capacity(64);
        bytes.extend_from_slice(&[0; HEADER]);
        bytes.push(END);
        let mut lp = Self { bytes, count: 0 };
        lp.write_header();
        lp
    }

    /// Checks `b` whole and takes it.
    pub fn decode(b: &[u8]) -> Result<Self, Malformed> {
        let (head, _) = b.split_first_chunk::<HEADER>().ok_or(Malformed(0))?;
        let total = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let declared = u16::from_le_bytes([head[4], head[5]]);
        if total != b.len() || b.last() != Some(&END) {
            return Err(Malformed(0));
        }
        let mut at = HEADER;
        let mut count = 0usize;
        while at < b.len() - 1 {
            let (_, next) = entry_at(b, at).ok_or(Malformed(at))?;
            at = next;
            count += 1;
        }
        if at != b.len() - 1 {
            return Err(Malformed(at));
        }
        let expect = if count >= MANY as usize {
            MANY
        } else {
            count as u16
        };
        if declared != expect {
            return Err(Malformed(4));
        }
        Ok(Self {
            bytes: b.to_vec(),
            count,
        })
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The entries in order.
    pub fn iter(&self) -> Entries<'_> {
        Entries {
            bytes: &self.bytes,
            at: HEADER,
        }
    }

    /// Appends `element` (as an integer if it is the decimal of one).
    pub fn push(&mut self, element: &[u8]) {
        self.bytes.pop();
        encode_entry(element, &mut self.bytes);
        self.bytes.push(END);
        self.count += 1;
        self.write_header();
    }

    /// A listpack of these elements.
    pub fn of<'a>(elements: impl IntoIterator<Item = &'a [u8]>) -> Self {
        let mut lp = Self::new();
        lp.bytes.pop();
        for e in elements {
            encode_entry(e, &mut lp.bytes);
            lp.count += 1;
        }
        lp.bytes.push(END);
        lp.write_header();
        lp
    }

    fn write_header(&mut self) {
        let total = self.bytes.len() as u32;
        self.bytes[..4].copy_from_slice(&total.to_le_bytes());
        let n = self.count.min(MANY as usize) as u16;
        self.bytes[4..6].copy_from_slice(&n.to_le_bytes());
    }
}

/// The entries of a listpack, in order.
pub struct Entries<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Iterator for Entries<'a> {
    type Item = Entry<'a>;

    fn next(&mut self) -> Option<Entry<'a>> {
        if self.at + 1 >= self.bytes.len() {
            return None;
        }
        // Well-formed by construction; a failure ends the walk.
        let (e, next) = entry_at(self.bytes, self.at)?;
        self.at = next;
        Some(e)
    }
}

/// The entry at `at` and where the next begins, if it is well formed.
fn entry_at(b: &[u8], at: usize) -> Option<(Entry<'_>, usize)> {
    let first = *b.get(at)?;
    let data = |from: usize, len: usize| b.get(from..from.checked_add(len)?);
    let int_le = |from: usize, len: usize| -> Option<i64> {
        let d = data(from, len)?;
        let mut buf = [0u8; 8];
        buf[..len].copy_from_slice(d);
        let v = u64::from_le_bytes(buf);
        // Sign-extend from `len` bytes.
        let shift = 64 - 8 * len as u32;
        Some(((v << shift) as i64) >> shift)
    };
    let (entry, len) = if first & 0x80 == 0 {
        (Entry::Int(i64::from(first)), 1)
    } else if first & 0xC0 == 0x80 {
        let n = usize::from(first & 0x3F);
        (Entry::Str(data(at + 1, n)?), 1 + n)
    } else if first & 0xE0 == 0xC0 {
        let u = (u16::from(first & 0x1F) << 8) | u16::from(*b.get(at + 1)?);
        let v = if u >= 1 << 12 {
            i64::from(u) - (1 << 13)
        } else {
            i64::from(u)
        };
        (Entry::Int(v), 2)
    } else if first & 0xF0 == 0xE0 {
        let n = (usize::from(first & 0x0F) << 8) | usize::from(*b.get(at + 1)?);
        (Entry::Str(data(at + 2, n)?), 2 + n)
    } else {
        match first {
            0xF0 => {
                let n = u32::from_le_bytes(data(at + 1, 4)?.try_into().ok()?) as usize;
                (Entry::Str(data(at + 5, n)?), 5 + n)
            }
            0xF1 => (Entry::Int(int_le(at + 1, 2)?), 3),
            0xF2 => (Entry::Int(int_le(at + 1, 3)?), 4),
            0xF3 => (Entry::Int(int_le(at + 1, 4)?), 5),
            0xF4 => (Entry::Int(int_le(at + 1, 8)?), 9),
            _ => return None,
        }
    };
    let mut want = Vec::with_capacity(5);
    backlen(len, &mut want);
    let end = at + len;
    if data(end, want.len())? != want.as_slice() {
        return None;
    }
    Some((entry, end + want.len()))
}

/// Appends `element`'s entry.
fn encode_entry(element: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    if let Some(v) = parse_int(element) {
        match v {
            0..=127 => out.push(v as u8),
            -4096..=4095 => {
                let u = if v < 0 { (1 << 13) + v } else { v } as u16;
                out.push(0xC0 | (u >> 8) as u8);
                out.push(u as u8);
            }
            -32768..=32767 => {
                out.push(0xF1);
                out.extend_from_slice(&(v as i16).to_le_bytes());
            }
            -8_388_608..=8_388_607 => {
                out.push(0xF2);
                out.extend_from_slice(&(v as i32).to_le_bytes()[..3]);
            }
            _ if i32::try_from(v).is_ok() => {
                out.push(0xF3);
                out.extend_from_slice(&(v as i32).to_le_bytes());
            }
            _ => {
                out.push(0xF4);
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
    } else {
        let n = element.len();
        if n < 64 {
            out.push(0x80 | n as u8);
        } else if n < 4096 {
            out.push(0xE0 | (n >> 8) as u8);
            out.push(n as u8);
        } else {
            out.push(0xF0);
            out.extend_from_slice(&(n as u32).to_le_bytes());
        }
        out.extend_from_slice(element);
    }
    let len = out.len() - start;
    backlen(len, out);
}

/// An entry's length as Redis writes it after the entry: big-endian
/// groups of 7 bits, every byte but the first with its high bit set, so
/// it reads from its last byte backwards.
fn backlen(len: usize, out: &mut Vec<u8>) {
    let groups = match len {
        0..=127 => 1,
        128..=16382 => 2,
        16383..=2_097_150 => 3,
        2_097_151..=268_435_454 => 4,
        _ => 5,
    };
    for g in (0..groups).rev() {
        let bits = ((len >> (7 * g)) & 127) as u8;
        out.push(if g == groups - 1 { bits } else { bits | 128 });
    }
}

/// Redis's `string2ll`: `b` as an integer if it is the canonical decimal
/// of one (optional minus, no leading zeros or plus sign, no `-0`,
/// within `i64`): what an integer string and a listpack's integer entry
/// hold.
pub fn parse_int(b: &[u8]) -> Option<i64> {
    let digits = b.strip_prefix(b"-").unwrap_or(b);
    if digits.is_empty() || digits.len() > 20 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if digits[0] == b'0' && (digits.len() > 1 || b.len() > 1) {
        return None;
    }
    std::str::from_utf8(b).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Every entry encoding, against the listpack redis-server 7.0.15
    /// holds for `HSET h` of these 24 elements (taken from its `DUMP`
    /// with `rdbcompression no`).
    #[test]
    fn the_layout_is_redis_s() {
        let b130 = vec![b'b'; 130];
        let elements: Vec<&[u8]> = vec![
            b"a",
            b"1",
            b"-1",
            b"300",
            b"",
            b"127",
            b"128",
            b"-4096",
            b"4095",
            b"-4097",
            b"32767",
            b"-32768",
            b"32768",
            b"8388607",
            b"-8388608",
            b"8388608",
            b"2147483647",
            b"-2147483648",
            b"2147483648",
            b"9223372036854775807",
            b"-9223372036854775808",
            b"007",
            b"-0",
            &b130,
        ];
        let mut redis = hex(concat!(
            "f900000018008161020101dfff02c12c0280017f01c08002d00002cfff02f1ff",
            "ef03f1ff7f03f1008003f200800004f2ffff7f04f200008004f30000800005f3",
            "ffffff7f05f30000008005f4000000800000000009f4ffffffffffffff7f09f4",
            "0000000000000080098330303704822d3003e082",
        ));
        redis.extend_from_slice(&b130);
        redis.extend_from_slice(&[0x01, 0x84, 0xff]);
        let lp = Listpack::of(elements.iter().copied());
        assert_eq!(lp.as_bytes(), &redis[..]);
        let back: Vec<Vec<u8>> = Listpack::decode(&redis)
            .unwrap()
            .iter()
            .map(|e| e.to_vec())
            .collect();
        assert_eq!(back, elements);
    }

    #[test]
    fn backlen_reads_backwards() {
        let mut b = Vec::new();
        backlen(200, &mut b);
        assert_eq!(b, [1, 72 | 128]);
        b.clear();
        backlen(127, &mut b);
        assert_eq!(b, [127]);
    }

    #[test]
    fn integers_are_only_canonical_decimals() {
        assert_eq!(parse_int(b"0"), Some(0));
        assert_eq!(parse_int(b"-12"), Some(-12));
        for no in [
            &b"-0"[..],
            b"01",
            b"+1",
            b" 1",
            b"1 ",
            b"",
            b"99999999999999999999",
        ] {
            assert_eq!(parse_int(no), None, "{no:?}");
        }
        assert_eq!(parse_int(b"-9223372036854775808"), Some(i64::MIN));
    }

    fn element() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            any::<i64>().prop_map(|n| n.to_string().into_bytes()),
            (-5000i64..5000).prop_map(|n| n.to_string().into_bytes()),
            proptest::collection::vec(any::<u8>(), 0..80),
            proptest::collection::vec(any::<u8>(), 4000..4200),
            Just(b"007".to_vec()),
        ]
    }

    proptest! {
        #[test]
        fn elements_round_trip(elements in proptest::collection::vec(element(), 0..20)) {
            let lp = Listpack::of(elements.iter().map(Vec::as_slice));
            let again = Listpack::decode(lp.as_bytes()).unwrap();
            prop_assert_eq!(&again, &lp);
            let back: Vec<Vec<u8>> = again.iter().map(|e| e.to_vec()).collect();
            prop_assert_eq!(&back, &elements);
            for (e, want) in again.iter().zip(&elements) {
                prop_assert!(e.is(want));
                prop_assert_eq!(e.len(), want.len());
            }
            let mut pushed = Listpack::new();
            for e in &elements {
                pushed.push(e);
            }
            prop_assert_eq!(pushed, lp);
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(lp) = Listpack::decode(&bytes) {
                prop_assert_eq!(lp.iter().count(), lp.len());
            }
        }

        #[test]
        fn a_flipped_byte_is_refused_or_still_well_formed(
            elements in proptest::collection::vec(element(), 1..6),
            at in any::<prop::sample::Index>(),
            x in 1u8..=255,
        ) {
            let lp = Listpack::of(elements.iter().map(Vec::as_slice));
            let mut b = lp.as_bytes().to_vec();
            let i = at.index(b.len());
            b[i] ^= x;
            if let Ok(lp) = Listpack::decode(&b) {
                prop_assert_eq!(lp.iter().count(), lp.len());
            }
        }
    }
}
