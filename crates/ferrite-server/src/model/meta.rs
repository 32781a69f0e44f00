//! A key's metadata record: its type, its expiry, and either a string's
//! bytes or a collection's version, size and (for a list) head position.
//!
//! ```text
//! byte 0        type (0 string, 1 hash, 2 set, 3 zset, 4 list, 5 integer string,
//!               6 packed hash, 7 packed list) | 0x80 when an expiry follows
//! [8 bytes]     expires at, ms since the Unix epoch, u64 BE (only with 0x80)
//! string:       the value's bytes, to the end
//! integer:      the value as a zigzag LEB128 varint (1 to 10 bytes), to the end
//! collection:   version u64 BE, size u64 BE; a list (packed or not) adds its
//!               head position u64 BE
//! packed hash:  a listpack of field, value, field, value, ... to the end
//! ```
//!
//! A packed hash is a small hash held whole in its metadata record (what
//! Redis holds as a listpack, in Redis's listpack layout): reading a
//! field is the one lookup of the key, and writing one rewrites the
//! record instead of writing a field record and the header. It becomes a
//! collection of field records when it outgrows the limits
//! (`model::hash`).
//!
//! An integer string is a string whose bytes are the canonical decimal of
//! an `i64` (what Redis holds as `int`), stored by `SET` and the `INCR`
//! family as the number: a counter costs its varint, and `INCR` reads it
//! without parsing text. Its value is still the decimal text.
//!
//! Invariants: a string is one record (a point read is one lookup); a
//! collection's elements live under its version, so a new version is a
//! new, empty collection and the old elements are unreachable; `size` is
//! the number of elements (members, fields, list items). Decoding bytes
//! read from the store never panics: anything else is `Corrupt`.

use super::listpack::Listpack;
use super::ModelError;

/// The types a key can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    String,
    Hash,
    Set,
    ZSet,
    List,
}

impl Kind {
    /// What `TYPE` answers.
    pub fn name(self) -> &'static str {
        match self {
            Kind::String => "string",
            Kind::Hash => "hash",
            Kind::Set => "set",
            Kind::ZSet => "zset",
            Kind::List => "list",
        }
    }

    /// The type `TYPE` and `SCAN ... TYPE` call `name`.
    pub fn from_name(name: &[u8]) -> Option<Kind> {
        Some(match name.to_ascii_lowercase().as_slice() {
            b"string" => Kind::String,
            b"hash" => Kind::Hash,
            b"set" => Kind::Set,
            b"zset" => Kind::ZSet,
            b"list" => Kind::List,
            _ => return None,
        })
    }

    fn code(self) -> u8 {
        match self {
            Kind::String => 0,
            Kind::Hash => 1,
            Kind::Set => 2,
            Kind::ZSet => 3,
            Kind::List => 4,
        }
    }

    fn from_code(c: u8) -> Option<Kind> {
        Some(match c {
            0 => Kind::String,
            1 => Kind::Hash,
            2 => Kind::Set,
            3 => Kind::ZSet,
            4 => Kind::List,
            _ => return None,
        })
    }
}

const EXPIRES: u8 = 0x80;

/// Byte 0's type code of an integer string (a string to `TYPE`).
const INT_CODE: u8 = 5;

/// Byte 0's type code of a packed hash.
const PACKED_HASH_CODE: u8 = 6;

/// Byte 0's type code of a packed list: a list whose items are one
/// record, a listpack (`model::list_node`), not a record each.
const PACKED_LIST_CODE: u8 = 7;

/// A collection's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coll {
    pub kind: Kind,
    /// Names the element records; never reused.
    pub version: u64,
    /// Elements it holds.
    pub size: u64,
    /// A list's first position (its elements are `head..head + size`);
    /// 0 for the other types.
    pub head: u64,
    /// A list whose items are held in one record (a listpack) rather
    /// than a record each; false for the other types.
    pub packed: bool,
}

/// What a key holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    String(Vec<u8>),
    /// A string holding the decimal of this integer.
    Int(i64),
    Coll(Coll),
    /// A small hash held whole: a listpack of fields and values, in
    /// pairs (never empty once stored: an empty hash is no key).
    PackedHash(Listpack),
}

/// A key's metadata record, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    /// When the key expires (ms since the Unix epoch).
    pub expire_at: Option<u64>,
    pub body: Body,
}

impl Meta {
    pub fn string(value: Vec<u8>) -> Self {
        Self {
            expire_at: None,
            body: Body::String(value),
        }
    }

    pub fn kind(&self) -> Kind {
        match &self.body {
            Body::String(_) | Body::Int(_) => Kind::String,
            Body::Coll(c) => c.kind,
            Body::PackedHash(_) => Kind::Hash,
        }
    }

    /// The collection header, if its elements are records.
    pub fn coll(&self) -> Option<&Coll> {
        match &self.body {
            Body::Coll(c) => Some(c),
            _ => None,
        }
    }

    pub fn coll_mut(&mut self) -> Option<&mut Coll> {
        match &mut self.body {
            Body::Coll(c) => Some(c),
            _ => None,
        }
    }

    /// Elements of a collection (fields of a hash); `None` for a string.
    pub fn elements(&self) -> Option<u64> {
        match &self.body {
            Body::Coll(c) => Some(c.size),
            Body::PackedHash(lp) => Some(lp.len() as u64 / 2),
            Body::String(_) | Body::Int(_) => None,
        }
    }

    /// Whether this is a collection with no elements (which is no key).
    pub fn is_empty_collection(&self) -> bool {
        self.elements() == Some(0)
    }

    /// The version whose elements this record names.
    pub fn version(&self) -> Option<u64> {
        self.coll().map(|c| c.version)
    }

    /// Whether the key is gone at `now` (ms).
    pub fn expired(&self, now: u64) -> bool {
        self.expire_at.is_some_and(|at| at <= now)
    }

    pub fn encode(&self) -> Vec<u8> {
        let (code, len) = match &self.body {
            Body::String(v) => (Kind::String.code(), v.len()),
            Body::Int(_) => (INT_CODE, 10),
            Body::Coll(c) if c.kind == Kind::List && c.packed => (PACKED_LIST_CODE, 24),
            Body::Coll(c) if c.kind == Kind::List => (c.kind.code(), 24),
            Body::Coll(c) => (c.kind.code(), 16),
            Body::PackedHash(lp) => (PACKED_HASH_CODE, lp.as_bytes().len()),
        };
        let mut out = Vec::with_capacity(1 + 8 + len);
        let flag = if self.expire_at.is_some() { EXPIRES } else { 0 };
        out.push(code | flag);
        if let Some(at) = self.expire_at {
            out.extend_from_slice(&at.to_be_bytes());
        }
        match &self.body {
            Body::String(v) => out.extend_from_slice(v),
            Body::Int(n) => {
                // Zigzag: small magnitudes of either sign take few bytes.
                let mut z = ((n << 1) ^ (n >> 63)) as u64;
                while z >= 0x80 {
                    out.push((z as u8) | 0x80);
                    z >>= 7;
                }
                out.push(z as u8);
            }
            Body::Coll(c) => {
                out.extend_from_slice(&c.version.to_be_bytes());
                out.extend_from_slice(&c.size.to_be_bytes());
                if c.kind == Kind::List {
                    out.extend_from_slice(&c.head.to_be_bytes());
                }
            }
            Body::PackedHash(lp) => out.extend_from_slice(lp.as_bytes()),
        }
        out
    }

    pub fn decode(b: &[u8]) -> Result<Self, ModelError> {
        let corrupt = || ModelError::Corrupt("a metadata record is malformed".into());
        let (&head, mut rest) = b.split_first().ok_or_else(corrupt)?;
        let code = head & !EXPIRES;
        let kind = if code == INT_CODE {
            Kind::String
        } else if code == PACKED_HASH_CODE {
            Kind::Hash
        } else if code == PACKED_LIST_CODE {
            Kind::List
        } else {
            Kind::from_code(code).ok_or_else(corrupt)?
        };
        let word = |rest: &mut &[u8]| -> Result<u64, ModelError> {
            let (w, r) = rest.split_first_chunk::<8>().ok_or_else(corrupt)?;
            *rest = r;
            Ok(u64::from_be_bytes(*w))
        };
        let expire_at = if head & EXPIRES != 0 {
            Some(word(&mut rest)?)
        } else {
            None
        };
        let body = if code == INT_CODE {
            Body::Int(varint(rest).ok_or_else(corrupt)?)
        } else if code == PACKED_HASH_CODE {
            let lp = Listpack::decode(rest).map_err(|e| {
                ModelError::Corrupt(format!("a packed hash's metadata record: {e}"))
            })?;
            if lp.len() % 2 != 0 {
                return Err(ModelError::Corrupt(
                    "a packed hash holds a field without its value".into(),
                ));
            }
            Body::PackedHash(lp)
        } else if kind == Kind::String {
            Body::String(rest.to_vec())
        } else {
            let version = word(&mut rest)?;
            let size = word(&mut rest)?;
            let head = if kind == Kind::List {
                word(&mut rest)?
            } else {
                0
            };
            if !rest.is_empty() {
                return Err(corrupt());
            }
            Body::Coll(Coll {
                kind,
                version,
                size,
                head,
                packed: code == PACKED_LIST_CODE,
            })
        };
        Ok(Self { expire_at, body })
    }
}

/// A zigzag LEB128 varint that is all of `b`, in its shortest form: at
/// most ten bytes, the last without its continuation bit, no bits past
/// 64.
fn varint(b: &[u8]) -> Option<i64> {
    let (&last, body) = b.split_last()?;
    if b.len() > 10 || last & 0x80 != 0 || body.iter().any(|x| x & 0x80 == 0) {
        return None;
    }
    // The tenth byte holds bit 63 alone; a last byte of 0 is overlong.
    if (b.len() == 10 && last > 1) || (b.len() > 1 && last == 0) {
        return None;
    }
    let z = b
        .iter()
        .enumerate()
        .fold(0u64, |z, (i, x)| z | (u64::from(x & 0x7f) << (7 * i)));
    Some(((z >> 1) as i64) ^ -((z & 1) as i64))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn kinds() -> impl Strategy<Value = Kind> {
        prop_oneof![
            Just(Kind::Hash),
            Just(Kind::Set),
            Just(Kind::ZSet),
            Just(Kind::List)
        ]
    }

    proptest! {
        #[test]
        fn records_round_trip(
            expire in proptest::option::of(any::<u64>()),
            value in proptest::collection::vec(any::<u8>(), 0..40),
            kind in kinds(),
            version in any::<u64>(),
            size in any::<u64>(),
            head in any::<u64>(),
            int in any::<i64>(),
        ) {
            let s = Meta { expire_at: expire, body: Body::String(value.clone()) };
            prop_assert_eq!(Meta::decode(&s.encode()).unwrap(), s);
            let n = Meta { expire_at: expire, body: Body::Int(int) };
            prop_assert_eq!(Meta::decode(&n.encode()).unwrap(), n);
            let head = if kind == Kind::List { head } else { 0 };
            let packed = kind == Kind::List && head % 2 == 0;
            let c = Meta { expire_at: expire, body: Body::Coll(Coll { kind, version, size, head, packed }) };
            prop_assert_eq!(Meta::decode(&c.encode()).unwrap(), c);
            let pairs = [&b"f"[..], &value, b"12", b""];
            let p = Meta { expire_at: expire, body: Body::PackedHash(Listpack::of(pairs)) };
            prop_assert_eq!(Meta::decode(&p.encode()).unwrap(), p);
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = Meta::decode(&bytes);
        }
    }

    #[test]
    fn an_integer_string_costs_its_varint() {
        for (n, len) in [
            (0i64, 2),
            (-1, 2),
            (63, 2),
            (-64, 2),
            (64, 3),
            (i64::MIN, 11),
            (i64::MAX, 11),
        ] {
            let m = Meta {
                expire_at: None,
                body: Body::Int(n),
            };
            let b = m.encode();
            assert_eq!(b.len(), len, "{n}");
            assert_eq!(Meta::decode(&b).unwrap(), m);
        }
        // Overlong, unterminated or past 64 bits: corrupt.
        assert!(Meta::decode(&[5, 0x80]).is_err());
        assert!(Meta::decode(&[5]).is_err());
        assert!(Meta::decode(&[5, 0x80, 0x00, 0x01]).is_err());
        assert!(Meta::decode(&[5, 0x80, 0x00]).is_err());
        assert!(
            Meta::decode(&[5, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]).is_err()
        );
    }

    #[test]
    fn a_packed_hash_holds_pairs() {
        let odd = Meta {
            expire_at: None,
            body: Body::PackedHash(Listpack::of([&b"f"[..]])),
        };
        assert!(Meta::decode(&odd.encode()).is_err());
        let mut b = Meta {
            expire_at: None,
            body: Body::PackedHash(Listpack::of([&b"f"[..], b"v"])),
        }
        .encode();
        assert_eq!(Meta::decode(&b).unwrap().elements(), Some(1));
        b.pop();
        assert!(Meta::decode(&b).is_err());
    }

    #[test]
    fn a_plain_string_costs_one_byte() {
        assert_eq!(Meta::string(b"abc".to_vec()).encode(), b"\0abc");
        assert!(Meta::decode(&[9]).is_err());
        assert!(Meta::decode(&[1, 0, 0]).is_err());
    }
}
