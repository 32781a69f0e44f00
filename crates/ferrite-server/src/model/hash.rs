//! A hash in either of its two encodings: packed whole in its metadata
//! record (a listpack of field, value pairs, while it is small) or one
//! record per field under its version. Commands see fields and values;
//! this module alone knows which encoding holds them.
//!
//! Invariants: a hash is packed only while it holds at most
//! [`PackLimits::entries`] fields, no field or value is longer than
//! [`PackLimits::value`], and its record is at most [`MAX_PACK_BYTES`];
//! the write that would break one of these turns it into field records
//! in the same transaction, and it never turns back (as in Redis).
//! Fields longer than [`MAX_MEMBER`] are refused in both encodings, so a
//! conversion cannot fail on one.

use super::layout::MAX_MEMBER;
use super::listpack::{Entry, Listpack};
use super::meta::{Body, Coll, Kind, Meta};
use super::tx::Tx;
use super::{ModelError, Pairs};

/// Largest packed hash record, in bytes, whatever the limits say: every
/// write of a packed hash rewrites its whole record, so past this a
/// field record is cheaper.
pub const MAX_PACK_BYTES: usize = 64 << 10;

/// When a hash stays packed (`hash-max-listpack-entries`,
/// `hash-max-listpack-value`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackLimits {
    pub entries: u64,
    pub value: u64,
}

impl PackLimits {
    /// Redis 7's defaults.
    pub const DEFAULT: PackLimits = PackLimits {
        entries: 128,
        value: 64,
    };

    fn fits(&self, field: &[u8], value: &[u8]) -> bool {
        field.len() as u64 <= self.value && value.len() as u64 <= self.value
    }
}

/// The fields and values of a packed hash, in order.
fn pairs(lp: &Listpack) -> impl Iterator<Item = (Entry<'_>, Entry<'_>)> {
    let mut it = lp.iter();
    std::iter::from_fn(move || Some((it.next()?, it.next()?)))
}

fn check_field(field: &[u8]) -> Result<(), ModelError> {
    if field.len() > MAX_MEMBER {
        return Err(ModelError::MemberTooLong {
            len: field.len(),
            max: MAX_MEMBER,
        });
    }
    Ok(())
}

impl Tx<'_> {
    /// An empty hash, packed unless the limits allow no packed hash.
    pub fn new_hash(&mut self, limits: PackLimits) -> Result<Meta, ModelError> {
        if limits.entries == 0 {
            return self.new_coll(Kind::Hash);
        }
        Ok(Meta {
            expire_at: None,
            body: Body::PackedHash(Listpack::new()),
        })
    }

    /// A field's value.
    pub fn hash_get(
        &self,
        slot: u8,
        m: &Meta,
        field: &[u8],
    ) -> Result<Option<Vec<u8>>, ModelError> {
        match &m.body {
            Body::PackedHash(lp) => Ok(pairs(lp)
                .find(|(f, _)| f.is(field))
                .map(|(_, v)| v.to_vec())),
            Body::Coll(c) => self.field(slot, c, field),
            _ => Err(ModelError::WrongType),
        }
    }

    /// Every field and value (a packed hash's in insertion order, a
    /// record hash's in hash order).
    pub fn hash_all(&self, slot: u8, m: &Meta) -> Result<Pairs, ModelError> {
        match &m.body {
            Body::PackedHash(lp) => Ok(pairs(lp).map(|(f, v)| (f.to_vec(), v.to_vec())).collect()),
            Body::Coll(c) => self.all_fields(slot, c),
            _ => Err(ModelError::WrongType),
        }
    }

    /// Sets a field of the hash `m` (the caller writes `m` back with
    /// [`Tx::set`]); answers whether the field is new.
    pub fn hash_put(
        &mut self,
        slot: u8,
        m: &mut Meta,
        field: &[u8],
        value: Vec<u8>,
        limits: PackLimits,
    ) -> Result<bool, ModelError> {
        check_field(field)?;
        if let Body::PackedHash(lp) = &mut m.body {
            if limits.fits(field, &value) {
                let at = pairs(lp).position(|(f, _)| f.is(field));
                // As Redis: the count is checked after the write, an
                // overwrite included (the limit may have been lowered).
                let after = (lp.len() / 2) as u64 + u64::from(at.is_none());
                let grows = field.len() + value.len() + 2 * 10;
                if after <= limits.entries && lp.as_bytes().len() + grows <= MAX_PACK_BYTES {
                    match at {
                        Some(i) => {
                            *lp = replaced(lp, i, &value);
                            return Ok(false);
                        }
                        None => {
                            lp.push(field);
                            lp.push(&value);
                            return Ok(true);
                        }
                    }
                }
            }
            self.unpack_hash(slot, m)?;
        }
        let Body::Coll(c) = &mut m.body else {
            return Err(ModelError::WrongType);
        };
        let new = self.field(slot, c, field)?.is_none();
        if new {
            c.size += 1;
        }
        self.put_field(slot, c, field, value)?;
        Ok(new)
    }

    /// Removes a field; answers whether it was there.
    pub fn hash_delete(
        &mut self,
        slot: u8,
        m: &mut Meta,
        field: &[u8],
    ) -> Result<bool, ModelError> {
        match &mut m.body {
            Body::PackedHash(lp) => {
                let Some(i) = pairs(lp).position(|(f, _)| f.is(field)) else {
                    return Ok(false);
                };
                let keep = lp
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| j / 2 != i)
                    .map(|(_, e)| e.to_vec())
                    .collect::<Vec<_>>();
                *lp = Listpack::of(keep.iter().map(Vec::as_slice));
                Ok(true)
            }
            Body::Coll(c) => {
                if self.field(slot, c, field)?.is_none() {
                    return Ok(false);
                }
                self.delete_field(slot, c, field)?;
                c.size -= 1;
                Ok(true)
            }
            _ => Err(ModelError::WrongType),
        }
    }

    /// Fields (with values) drawn at random, as
    /// [`Tx::random_fields`] draws them.
    pub fn hash_random(
        &self,
        slot: u8,
        m: &Meta,
        n: u64,
        repeat: bool,
        rng: &mut impl rand::Rng,
    ) -> Result<Pairs, ModelError> {
        match &m.body {
            Body::PackedHash(_) => Ok(super::elements::draw(
                self.hash_all(slot, m)?,
                n,
                repeat,
                rng,
            )),
            Body::Coll(c) => self.random_fields(slot, c, n, repeat, rng),
            _ => Err(ModelError::WrongType),
        }
    }

    /// Turns a packed hash into field records under a fresh version.
    fn unpack_hash(&mut self, slot: u8, m: &mut Meta) -> Result<(), ModelError> {
        let Body::PackedHash(lp) = &m.body else {
            return Ok(());
        };
        let version = self.new_version()?;
        let mut c = Coll {
            kind: Kind::Hash,
            version,
            size: 0,
            head: 1 << 63,
            packed: false,
        };
        let all: Pairs = pairs(lp).map(|(f, v)| (f.to_vec(), v.to_vec())).collect();
        for (f, v) in all {
            self.put_field(slot, &c, &f, v)?;
            c.size += 1;
        }
        m.body = Body::Coll(c);
        Ok(())
    }
}

/// `lp` with pair `i`'s value replaced by `value`.
fn replaced(lp: &Listpack, i: usize, value: &[u8]) -> Listpack {
    let elements: Vec<Vec<u8>> = lp
        .iter()
        .enumerate()
        .map(|(j, e)| {
            if j == 2 * i + 1 {
                value.to_vec()
            } else {
                e.to_vec()
            }
        })
        .collect();
    Listpack::of(elements.iter().map(Vec::as_slice))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::model::testing::keyspace;

    #[derive(Debug, Clone)]
    enum Op {
        Put(u8, usize),
        Del(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0u8..24, 0usize..12).prop_map(|(f, n)| Op::Put(f, n)),
            1 => (0u8..24).prop_map(Op::Del),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Against a `BTreeMap`: whatever encoding the limits lead to,
        /// the hash holds the same fields and values, and it is packed
        /// exactly while the limits allow.
        #[test]
        fn a_hash_is_a_map_in_either_encoding(
            ops in proptest::collection::vec(op(), 1..60),
            entries in 0u64..12,
            value in 1u64..8,
        ) {
            let ks = keyspace();
            let limits = PackLimits { entries, value };
            let mut tx = ks.write();
            let mut m = tx.new_hash(limits).unwrap();
            let mut model = BTreeMap::new();
            let mut ever_too_big = entries == 0;
            for o in ops {
                match o {
                    Op::Put(f, n) => {
                        let field = vec![b'a' + f];
                        let v = vec![b'x'; n];
                        let new = tx.hash_put(0, &mut m, &field, v.clone(), limits).unwrap();
                        prop_assert_eq!(new, model.insert(field, v).is_none());
                        ever_too_big |= n as u64 > value || model.len() as u64 > entries;
                    }
                    Op::Del(f) => {
                        let field = vec![b'a' + f];
                        let gone = tx.hash_delete(0, &mut m, &field).unwrap();
                        prop_assert_eq!(gone, model.remove(&field).is_some());
                    }
                }
                prop_assert_eq!(m.elements(), Some(model.len() as u64));
                prop_assert_eq!(matches!(m.body, Body::PackedHash(_)), !ever_too_big);
                let mut all = tx.hash_all(0, &m).unwrap();
                all.sort();
                let want: Pairs = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                prop_assert_eq!(all, want);
                for f in 0..24u8 {
                    let field = vec![b'a' + f];
                    prop_assert_eq!(tx.hash_get(0, &m, &field).unwrap(), model.get(&field).cloned());
                }
            }
        }
    }

    #[test]
    fn integer_values_read_back_as_their_text() {
        let ks = keyspace();
        let mut tx = ks.write();
        let mut m = tx.new_hash(PackLimits::DEFAULT).unwrap();
        for v in ["12", "-7", "007", "9223372036854775807", "-0", "1.5"] {
            tx.hash_put(
                0,
                &mut m,
                v.as_bytes(),
                v.as_bytes().to_vec(),
                PackLimits::DEFAULT,
            )
            .unwrap();
            assert_eq!(
                tx.hash_get(0, &m, v.as_bytes()).unwrap().as_deref(),
                Some(v.as_bytes())
            );
        }
        assert!(matches!(m.body, Body::PackedHash(_)));
    }

    #[test]
    fn a_packed_hash_stops_at_its_byte_bound() {
        let ks = keyspace();
        let mut tx = ks.write();
        let limits = PackLimits {
            entries: 1 << 20,
            value: 1 << 20,
        };
        let mut m = tx.new_hash(limits).unwrap();
        for i in 0..20u32 {
            tx.hash_put(0, &mut m, &i.to_be_bytes(), vec![7; 4000], limits)
                .unwrap();
        }
        assert!(m.coll().is_some(), "80 KB of fields is not packed");
        assert_eq!(m.elements(), Some(20));
        assert!(tx
            .hash_put(0, &mut m, &vec![1; MAX_MEMBER + 1], Vec::new(), limits)
            .is_err());
    }
}
