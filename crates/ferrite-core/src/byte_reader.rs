//! A bounds-checked little-endian cursor for decoders of on-disk and
//! on-wire bytes.
//!
//! Every accessor returns `None` instead of panicking when the input runs
//! out, so a decoder built on it cannot index past a torn or hostile buffer;
//! the decoder turns `None` into its own typed error.

/// Reads fixed-size little-endian fields from a byte slice.
#[derive(Debug, Clone)]
pub struct ByteReader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> ByteReader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, at: 0 }
    }

    /// The next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.buf.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }

    pub fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.bytes(N)?.try_into().ok()
    }

    pub fn u8(&mut self) -> Option<u8> {
        self.array::<1>().map(|[b]| b)
    }

    pub fn u16(&mut self) -> Option<u16> {
        self.array().map(u16::from_le_bytes)
    }

    pub fn u32(&mut self) -> Option<u32> {
        self.array().map(u32::from_le_bytes)
    }

    pub fn u64(&mut self) -> Option<u64> {
        self.array().map(u64::from_le_bytes)
    }

    /// A persisted counter: a u64 below [`crate::engine::COUNTER_LIMIT`], `None`
    /// past the end or at or above the limit.
    pub fn counter(&mut self) -> Option<u64> {
        self.u64().and_then(crate::counter::check_counter)
    }

    /// Bytes consumed so far.
    pub fn position(&self) -> usize {
        self.at
    }

    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_until_the_end_and_no_further() {
        let mut r = ByteReader::new(&[1, 2, 0, 3, 0, 0, 0, 9]);
        assert_eq!(r.u8(), Some(1));
        assert_eq!(r.u16(), Some(2));
        assert_eq!(r.u32(), Some(3));
        assert_eq!(r.remaining(), 1);
        assert_eq!(r.u16(), None);
        assert_eq!(r.bytes(usize::MAX), None);
        assert_eq!(r.u8(), Some(9));
        assert_eq!(r.position(), 8);
    }
}
