//! Atomic write batches and their byte encoding.
//!
//! A [`WriteBatch`] is an ordered list of puts, deletes and range deletes
//! applied all or nothing by [`crate::KvStore::write_batch`]; later
//! operations on the same key win. Keys and values are validated as they
//! are added, so a batch that exists is a batch that can be applied.
//!
//! The encoding (spec: `docs/format/write-batch.md`) is what WALs log:
//! `count: u32 LE`, then per operation `tag: u8` (1 put, 2 delete, 3
//! range delete), `key_len: u16 LE`, key, and for puts `value_len: u32
//! LE`, value, for range deletes `end_len: u16 LE`, end. It carries no
//! checksum of its own; the log record around it does.
//! [`WriteBatch::decode`] never panics and rejects trailing bytes.

use crate::byte_reader::ByteReader;
use crate::error::{Error, Result};
use crate::key::{check_key, check_value};

const TAG_PUT: u8 = 1;
const TAG_DELETE: u8 = 2;
const TAG_DELETE_RANGE: u8 = 3;

/// One operation of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchOp {
    Put {
        key: Vec<u8>,
        value: Vec<u8>,
    },
    Delete {
        key: Vec<u8>,
    },
    /// Every key `k` with `start <= k < end` (`start < end`).
    DeleteRange {
        start: Vec<u8>,
        end: Vec<u8>,
    },
}

impl BatchOp {
    /// The write of `new` to `key`: a put, or a delete for `None`; the
    /// key and value checked against the limits.
    pub fn write(key: &[u8], new: Option<&[u8]>) -> Result<Self> {
        check_key(key)?;
        Ok(match new {
            Some(v) => {
                check_value(v)?;
                BatchOp::Put {
                    key: key.to_vec(),
                    value: v.to_vec(),
                }
            }
            None => BatchOp::Delete { key: key.to_vec() },
        })
    }

    /// The key the operation writes (a range delete's first key).
    pub fn key(&self) -> &[u8] {
        match self {
            BatchOp::Put { key, .. } | BatchOp::Delete { key } => key,
            BatchOp::DeleteRange { start, .. } => start,
        }
    }

    /// Every key the operation names: one, or a range delete's two bounds.
    pub fn keys(&self) -> impl Iterator<Item = &[u8]> {
        let end = match self {
            BatchOp::DeleteRange { end, .. } => Some(end.as_slice()),
            _ => None,
        };
        std::iter::once(self.key()).chain(end)
    }
}

/// An ordered, validated set of writes applied atomically.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteBatch {
    ops: Vec<BatchOp>,
    /// Sum of key and value bytes, for memory accounting and amplification.
    payload: usize,
}

impl WriteBatch {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a put; fails (adding nothing) if the key or value is out of limits.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<&mut Self> {
        check_key(key)?;
        check_value(value)?;
        self.payload += key.len() + value.len();
        self.ops.push(BatchOp::Put {
            key: key.to_vec(),
            value: value.to_vec(),
        });
        Ok(self)
    }

    /// Adds a delete; fails if the key is out of limits.
    pub fn delete(&mut self, key: &[u8]) -> Result<&mut Self> {
        check_key(key)?;
        self.payload += key.len();
        self.ops.push(BatchOp::Delete { key: key.to_vec() });
        Ok(self)
    }

    /// Adds a delete of every key in `start..end`; fails (adding nothing)
    /// if a bound is out of limits or the range is empty.
    pub fn delete_range(&mut self, start: &[u8], end: &[u8]) -> Result<&mut Self> {
        check_key(start)?;
        check_key(end)?;
        if start >= end {
            return Err(Error::EmptyRange);
        }
        self.payload += start.len() + end.len();
        self.ops.push(BatchOp::DeleteRange {
            start: start.to_vec(),
            end: end.to_vec(),
        });
        Ok(self)
    }

    /// Whether the batch holds a range delete.
    pub fn has_range_delete(&self) -> bool {
        self.ops
            .iter()
            .any(|op| matches!(op, BatchOp::DeleteRange { .. }))
    }

    pub fn ops(&self) -> &[BatchOp] {
        &self.ops
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Key and value bytes in the batch.
    pub fn payload_bytes(&self) -> usize {
        self.payload
    }

    pub fn clear(&mut self) {
        self.ops.clear();
        self.payload = 0;
    }

    /// Size of [`WriteBatch::encode`]'s output.
    pub fn encoded_len(&self) -> usize {
        4 + self
            .ops
            .iter()
            .map(|op| match op {
                BatchOp::Put { key, value } => 1 + 2 + key.len() + 4 + value.len(),
                BatchOp::Delete { key } => 1 + 2 + key.len(),
                BatchOp::DeleteRange { start, end } => 1 + 2 + start.len() + 2 + end.len(),
            })
            .sum::<usize>()
    }

    /// Appends the encoding to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.reserve(self.encoded_len());
        out.extend_from_slice(&(self.ops.len() as u32).to_le_bytes());
        for op in &self.ops {
            match op {
                BatchOp::Put { key, value } => {
                    out.push(TAG_PUT);
                    out.extend_from_slice(&(key.len() as u16).to_le_bytes());
                    out.extend_from_slice(key);
                    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
                    out.extend_from_slice(value);
                }
                BatchOp::Delete { key } => {
                    out.push(TAG_DELETE);
                    out.extend_from_slice(&(key.len() as u16).to_le_bytes());
                    out.extend_from_slice(key);
                }
                BatchOp::DeleteRange { start, end } => {
                    out.push(TAG_DELETE_RANGE);
                    out.extend_from_slice(&(start.len() as u16).to_le_bytes());
                    out.extend_from_slice(start);
                    out.extend_from_slice(&(end.len() as u16).to_le_bytes());
                    out.extend_from_slice(end);
                }
            }
        }
    }

    /// Decodes an encoded batch, validating every key and value.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let bad = |why: &str| Error::corruption("write batch", why);
        let mut r = ByteReader::new(bytes);
        let count = r.u32().ok_or_else(|| bad("truncated"))?;
        let mut batch = WriteBatch::new();
        for _ in 0..count {
            let tag = r.u8().ok_or_else(|| bad("truncated"))?;
            let klen = r.u16().ok_or_else(|| bad("truncated"))?;
            let key = r.bytes(klen as usize).ok_or_else(|| bad("truncated"))?;
            match tag {
                TAG_PUT => {
                    let vlen = r.u32().ok_or_else(|| bad("truncated"))?;
                    let value = r.bytes(vlen as usize).ok_or_else(|| bad("truncated"))?;
                    batch.put(key, value).map_err(|e| bad(&e.to_string()))?;
                }
                TAG_DELETE => {
                    batch.delete(key).map_err(|e| bad(&e.to_string()))?;
                }
                TAG_DELETE_RANGE => {
                    let elen = r.u16().ok_or_else(|| bad("truncated"))?;
                    let end = r.bytes(elen as usize).ok_or_else(|| bad("truncated"))?;
                    batch
                        .delete_range(key, end)
                        .map_err(|e| bad(&e.to_string()))?;
                }
                t => return Err(bad(&format!("unknown operation tag {t}"))),
            }
        }
        if r.remaining() != 0 {
            return Err(bad("trailing bytes after the last operation"));
        }
        Ok(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn invalid_ops_are_refused_and_leave_the_batch_unchanged() {
        let mut b = WriteBatch::new();
        b.put(b"k", b"v").unwrap();
        assert!(b.put(b"", b"v").is_err());
        assert!(b.delete(&[0; 1025]).is_err());
        assert!(matches!(b.delete_range(b"b", b"b"), Err(Error::EmptyRange)));
        assert!(b.delete_range(b"c", b"a").is_err());
        assert!(b.delete_range(b"", b"a").is_err());
        assert_eq!(b.len(), 1);
        assert_eq!(b.payload_bytes(), 2);
    }

    #[test]
    fn damaged_encodings_are_errors() {
        let mut b = WriteBatch::new();
        b.put(b"key", b"value").unwrap().delete(b"gone").unwrap();
        b.delete_range(b"a", b"b").unwrap();
        let mut enc = Vec::new();
        b.encode(&mut enc);
        assert_eq!(enc.len(), b.encoded_len());
        for cut in 0..enc.len() {
            assert!(WriteBatch::decode(&enc[..cut]).is_err(), "cut at {cut}");
        }
        let mut extra = enc.clone();
        extra.push(0);
        assert!(WriteBatch::decode(&extra).is_err());
        let mut bad_tag = enc.clone();
        bad_tag[4] = 9;
        assert!(WriteBatch::decode(&bad_tag).is_err());
    }

    proptest! {
        #[test]
        fn round_trip(ops in proptest::collection::vec(
            (0u8..3, proptest::collection::vec(any::<u8>(), 1..40),
             proptest::collection::vec(any::<u8>(), 0..100)), 0..20)) {
            let mut b = WriteBatch::new();
            for (kind, k, v) in &ops {
                match kind {
                    0 => { b.put(k, v).unwrap(); }
                    1 => { b.delete(k).unwrap(); }
                    _ => {
                        let mut end = k.clone();
                        end.push(0);
                        b.delete_range(k, &end).unwrap();
                    }
                }
            }
            let mut enc = Vec::new();
            b.encode(&mut enc);
            prop_assert_eq!(WriteBatch::decode(&enc).unwrap(), b);
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = WriteBatch::decode(&bytes);
        }
    }
}
