//! [`Change`]: what one committed transaction did to the store, as bytes
//! a replica applies to reach the same state (the payload of the
//! replication stream's change frames, `docs/format/replication.md`).
//!
//! A change carries the transaction's batch exactly as it reached the
//! store (range deletes first, then puts and deletes in key order), the
//! per-slot changes of the key counts the batch implies, and the keys
//! whose value changed (for a replica's `WATCH`ers). The database map
//! and the version ceiling travel as the server records they are in the
//! batch. Expiry needs no special case: a key the master expires is a
//! delete in the change that expired it.
//!
//! Invariants: [`decode`] of [`encode`]'s bytes gives back every part;
//! [`decode`] never panics and names what is malformed; nothing in a
//! change depends on the master's clock or memory, so applying the same
//! changes in the same order to the same store gives the same records.

use std::collections::BTreeMap;

use super::layout::{Span, DATABASES};
use super::ModelError;

/// Names the layout of a change; a replica refuses any other.
const VERSION: u8 = 1;

/// A committed transaction's effect; see the module documentation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Change {
    /// Range deletes, `[start, end)`.
    pub ranges: Vec<Span>,
    /// Puts (`Some`) and deletes (`None`), in key order.
    pub records: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// Per-slot change of the key count and of the count of keys with an
    /// expiry.
    pub keys_delta: [i64; DATABASES as usize],
    pub volatile_delta: [i64; DATABASES as usize],
    /// Keys whose value changed, as (database, key, exists after).
    pub touched: Vec<(u8, Vec<u8>, bool)>,
}

/// Encodes a commit's parts (borrowed from the transaction) as a change.
pub fn encode(
    ranges: &[Span],
    records: &BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    keys_delta: &[i64; DATABASES as usize],
    volatile_delta: &[i64; DATABASES as usize],
    touched: &[(u8, Vec<u8>, bool)],
) -> Vec<u8> {
    let mut size = 1 + 2 + 18 * DATABASES as usize + 12;
    size += ranges
        .iter()
        .map(|(s, e)| 8 + s.len() + e.len())
        .sum::<usize>();
    size += records
        .iter()
        .map(|(k, v)| 9 + k.len() + v.as_ref().map_or(0, Vec::len))
        .sum::<usize>();
    size += touched.iter().map(|(_, k, _)| 6 + k.len()).sum::<usize>();
    let mut out = Vec::with_capacity(size);
    out.push(VERSION);
    deltas(&mut out, keys_delta);
    deltas(&mut out, volatile_delta);
    put_u32(&mut out, ranges.len());
    for (s, e) in ranges {
        bytes(&mut out, s);
        bytes(&mut out, e);
    }
    put_u32(&mut out, records.len());
    for (k, v) in records {
        bytes(&mut out, k);
        match v {
            Some(v) => {
                out.push(1);
                bytes(&mut out, v);
            }
            None => out.push(0),
        }
    }
    put_u32(&mut out, touched.len());
    for (db, k, exists) in touched {
        out.push(*db);
        out.push(u8::from(*exists));
        bytes(&mut out, k);
    }
    out
}

impl Change {
    /// This change's bytes (what [`decode`] reads).
    pub fn encode(&self) -> Vec<u8> {
        let records: BTreeMap<Vec<u8>, Option<Vec<u8>>> = self.records.iter().cloned().collect();
        encode(
            &self.ranges,
            &records,
            &self.keys_delta,
            &self.volatile_delta,
            &self.touched,
        )
    }
}

fn deltas(out: &mut Vec<u8>, d: &[i64; DATABASES as usize]) {
    let nonzero: Vec<(usize, i64)> = d
        .iter()
        .copied()
        .enumerate()
        .filter(|(_, v)| *v != 0)
        .collect();
    out.push(nonzero.len() as u8);
    for (slot, v) in nonzero {
        out.push(slot as u8);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

fn put_u32(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&(n as u32).to_le_bytes());
}

fn bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_u32(out, b.len());
    out.extend_from_slice(b);
}

/// Reads a change; a malformed one is [`ModelError::Corrupt`].
pub fn decode(b: &[u8]) -> Result<Change, ModelError> {
    let mut r = Reader { b, at: 0 };
    let v = r.u8()?;
    if v != VERSION {
        return Err(corrupt(format!(
            "change layout {v}, this server reads {VERSION}"
        )));
    }
    let mut c = Change {
        keys_delta: r.deltas()?,
        volatile_delta: r.deltas()?,
        ..Change::default()
    };
    let n = r.count(8)?;
    c.ranges.reserve(n);
    for _ in 0..n {
        let s = r.bytes()?.to_vec();
        let e = r.bytes()?.to_vec();
        c.ranges.push((s, e));
    }
    let n = r.count(5)?;
    c.records.reserve(n);
    for _ in 0..n {
        let k = r.bytes()?.to_vec();
        let v = match r.u8()? {
            0 => None,
            1 => Some(r.bytes()?.to_vec()),
            t => return Err(corrupt(format!("record tag {t}"))),
        };
        c.records.push((k, v));
    }
    let n = r.count(6)?;
    c.touched.reserve(n);
    for _ in 0..n {
        let db = r.u8()?;
        let exists = match r.u8()? {
            0 => false,
            1 => true,
            t => return Err(corrupt(format!("touched flag {t}"))),
        };
        c.touched.push((db, r.bytes()?.to_vec(), exists));
    }
    if r.at != b.len() {
        return Err(corrupt(format!(
            "{} bytes after the change",
            b.len() - r.at
        )));
    }
    Ok(c)
}

fn corrupt(what: String) -> ModelError {
    ModelError::Corrupt(format!("replicated change: {what}"))
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ModelError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or_else(|| corrupt("truncated".into()))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, ModelError> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<usize, ModelError> {
        let s = self.take(4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as usize)
    }

    /// A count of items at least `min` bytes each: one the rest cannot
    /// hold is malformed (so a hostile count allocates nothing).
    fn count(&mut self, min: usize) -> Result<usize, ModelError> {
        let n = self.u32()?;
        if n.saturating_mul(min) > self.b.len() - self.at {
            return Err(corrupt(format!("{n} items do not fit")));
        }
        Ok(n)
    }

    fn bytes(&mut self) -> Result<&'a [u8], ModelError> {
        let n = self.u32()?;
        self.take(n)
    }

    fn deltas(&mut self) -> Result<[i64; DATABASES as usize], ModelError> {
        let mut d = [0i64; DATABASES as usize];
        let n = self.u8()?;
        for _ in 0..n {
            let slot = self.u8()?;
            if slot >= DATABASES {
                return Err(corrupt(format!("slot {slot}")));
            }
            let s = self.take(8)?;
            d[slot as usize] = i64::from_le_bytes(s.try_into().unwrap_or([0; 8]));
        }
        Ok(d)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn change() -> impl Strategy<Value = Change> {
        let key = || proptest::collection::vec(any::<u8>(), 0..12);
        (
            proptest::collection::vec((key(), key()), 0..4),
            proptest::collection::btree_map(key(), proptest::option::of(key()), 0..8),
            proptest::array::uniform16(-3i64..3),
            proptest::array::uniform16(-3i64..3),
            proptest::collection::vec((0u8..16, key(), any::<bool>()), 0..4),
        )
            .prop_map(
                |(ranges, records, keys_delta, volatile_delta, touched)| Change {
                    ranges,
                    records: records.into_iter().collect(),
                    keys_delta,
                    volatile_delta,
                    touched,
                },
            )
    }

    proptest! {
        #[test]
        fn a_change_decodes_to_itself(c in change()) {
            prop_assert_eq!(decode(&c.encode()).unwrap(), c);
        }

        #[test]
        fn every_truncation_is_an_error(c in change(), cut in 0usize..64) {
            let b = c.encode();
            let cut = cut.min(b.len().saturating_sub(1));
            prop_assert!(decode(&b[..cut]).is_err());
        }

        #[test]
        fn any_bytes_decode_or_fail_without_panicking(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode(&b);
        }
    }

    #[test]
    fn a_hostile_count_is_refused_before_allocating() {
        let mut b = vec![VERSION, 0, 0];
        b.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(decode(&b), Err(ModelError::Corrupt(_))));
    }
}
