//! Where every record of the data model lives in the ordered store: one
//! key space shared by metadata, elements, the expiry index, the stale
//! collections awaiting the sweeper, and the server's own records.
//! `docs/format/redis-types.md` draws each byte.
//!
//! ```text
//! [slot][user key]                                   a key's metadata (slot < 16)
//! [0x10][slot][version: u64 BE][0x00][position]      hash field, set member, zset member -> score
//! [0x10][slot][version][0x01][score: 8][member]      zset score index (score order-preserving)
//! [0x10][slot][version][0x02][position: u64 BE]      list element
//! [0x10][slot][version][0x03]                        a packed list's items, all in one
//! [0x11][expires at: u64 BE ms][slot][user key]      expiry index
//! [0x12][slot][version]                              a dead collection the sweeper removes
//! [0x13][name]                                       server records (format, db map, version ceiling,
//!                                                    function libraries)
//! ```
//!
//! A member's position is its bytes for a sorted set (member order, for
//! lexicographic ranges) and, for a hash or a set, a four-byte hash of
//! the member (xxh3, big-endian) followed by its bytes: Redis keeps
//! those unordered, and hash order spreads members evenly over the key
//! space, so a seek to random bytes draws a member at random, and the
//! deletes of `SPOP` fall everywhere rather than pile up at the front.
//!
//! Invariants: each database slot's metadata is one contiguous range and
//! its elements another, so a flush is two range deletes; a collection's
//! elements are one contiguous range under its version (deleting it is
//! one range delete, whatever its size); versions are never reused, so a
//! dead collection's elements are unreachable from the moment its
//! metadata stops naming them. Pure functions, no I/O.

use ferrite::MAX_KEY_LEN;

use super::meta::Kind;
use super::ModelError;

/// Databases a client may `SELECT`, as in Redis; each lives in a slot.
pub const DATABASES: u8 = 16;

/// First byte of element records.
const ELEMENT: u8 = 0x10;
/// First byte of expiry-index records.
const EXPIRY: u8 = 0x11;
/// First byte of dead-collection records.
const TRASH: u8 = 0x12;
/// First byte of the server's own records.
const SERVER: u8 = 0x13;

/// What follows a collection's prefix.
const FIELD: u8 = 0x00;
const SCORE: u8 = 0x01;
const ITEM: u8 = 0x02;
const NODE: u8 = 0x03;

/// `[0x10][slot][version]`.
const PREFIX_LEN: usize = 10;

/// Longest user key: one byte of its metadata key names the slot.
pub const MAX_USER_KEY: usize = MAX_KEY_LEN - 1;

/// Longest member (hash field, set or sorted-set member): what fits in a
/// score-index key.
pub const MAX_MEMBER: usize = MAX_KEY_LEN - PREFIX_LEN - 1 - 8;

/// An owned key range, start included, end excluded.
pub type Span = (Vec<u8>, Vec<u8>);

/// The metadata key of `key` in `slot`.
pub fn meta_key(slot: u8, key: &[u8]) -> Result<Vec<u8>, ModelError> {
    if key.len() > MAX_USER_KEY {
        return Err(ModelError::KeyTooLong {
            len: key.len(),
            max: MAX_USER_KEY,
        });
    }
    let mut out = Vec::with_capacity(key.len() + 1);
    out.push(slot);
    out.extend_from_slice(key);
    Ok(out)
}

/// Every metadata key of `slot` whose user key starts with `prefix`.
pub fn meta_span(slot: u8, prefix: &[u8]) -> (Vec<u8>, Option<Vec<u8>>) {
    let mut start = vec![slot];
    start.extend_from_slice(prefix);
    let end = successor(&start);
    (start, end)
}

/// Every record of a slot's elements.
pub fn slot_elements(slot: u8) -> Span {
    (vec![ELEMENT, slot], vec![ELEMENT, slot + 1])
}

/// Every dead-collection record of a slot.
pub fn slot_trash(slot: u8) -> Span {
    (vec![TRASH, slot], vec![TRASH, slot + 1])
}

fn prefix(slot: u8, version: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(PREFIX_LEN + 16);
    out.push(ELEMENT);
    out.push(slot);
    out.extend_from_slice(&version.to_be_bytes());
    out
}

/// Every element record of one collection.
pub fn collection(slot: u8, version: u64) -> Span {
    let start = prefix(slot, version);
    let end = match version.checked_add(1) {
        Some(v) => prefix(slot, v),
        None => vec![ELEMENT, slot + 1],
    };
    (start, end)
}

fn check_member(member: &[u8]) -> Result<(), ModelError> {
    if member.len() > MAX_MEMBER {
        return Err(ModelError::MemberTooLong {
            len: member.len(),
            max: MAX_MEMBER,
        });
    }
    Ok(())
}

/// Whether a collection of `kind` keeps its members in hash order.
pub fn hashed(kind: Kind) -> bool {
    matches!(kind, Kind::Hash | Kind::Set)
}

/// Bytes of the hash in front of a hashed member.
pub const HASH_LEN: usize = 4;

/// Where `member` sits among the members of a collection of `kind`.
pub fn position(kind: Kind, member: &[u8]) -> Vec<u8> {
    if !hashed(kind) {
        return member.to_vec();
    }
    let h = xxhash_rust::xxh3::xxh3_64(member) as u32;
    let mut p = Vec::with_capacity(HASH_LEN + member.len());
    p.extend_from_slice(&h.to_be_bytes());
    p.extend_from_slice(member);
    p
}

/// The member at `position` in a collection of `kind`.
pub fn member_at(kind: Kind, position: &[u8]) -> Option<&[u8]> {
    if hashed(kind) {
        position.get(HASH_LEN..)
    } else {
        Some(position)
    }
}

/// The record of a hash field, set member or sorted-set member.
pub fn field(slot: u8, version: u64, kind: Kind, member: &[u8]) -> Result<Vec<u8>, ModelError> {
    check_member(member)?;
    Ok(field_at(slot, version, &position(kind, member)))
}

/// The field record at `position` (no length check: a bound for scans).
pub fn field_at(slot: u8, version: u64, position: &[u8]) -> Vec<u8> {
    let mut k = prefix(slot, version);
    k.push(FIELD);
    k.extend_from_slice(position);
    k
}

/// Where members start in a field key.
pub const FIELD_AT: usize = PREFIX_LEN + 1;

/// Every field record of a collection.
pub fn fields(slot: u8, version: u64) -> Span {
    let mut start = prefix(slot, version);
    start.push(FIELD);
    let mut end = prefix(slot, version);
    end.push(FIELD + 1);
    (start, end)
}

/// The score-index record of a sorted-set member.
pub fn score(slot: u8, version: u64, score: f64, member: &[u8]) -> Result<Vec<u8>, ModelError> {
    check_member(member)?;
    let mut k = score_bound(slot, version, score);
    k.extend_from_slice(member);
    Ok(k)
}

/// The first score-index key of `score` (before any member of it).
pub fn score_bound(slot: u8, version: u64, s: f64) -> Vec<u8> {
    let mut k = prefix(slot, version);
    k.push(SCORE);
    k.extend_from_slice(&super::score::encode(s));
    k
}

/// Every score-index record of a sorted set.
pub fn scores(slot: u8, version: u64) -> Span {
    let mut start = prefix(slot, version);
    start.push(SCORE);
    let mut end = prefix(slot, version);
    end.push(SCORE + 1);
    (start, end)
}

/// The score and member of a score-index key.
pub fn decode_score(k: &[u8]) -> Option<(f64, &[u8])> {
    let s: [u8; 8] = k.get(FIELD_AT..FIELD_AT + 8)?.try_into().ok()?;
    Some((super::score::decode(s), &k[FIELD_AT + 8..]))
}

/// The collection (slot, version) whose score index holds `k`, if `k`
/// is a score-index key.
pub fn score_owner(k: &[u8]) -> Option<(u8, u64)> {
    if k.first() != Some(&ELEMENT) || k.get(PREFIX_LEN) != Some(&SCORE) {
        return None;
    }
    let v: [u8; 8] = k.get(2..PREFIX_LEN)?.try_into().ok()?;
    Some((k[1], u64::from_be_bytes(v)))
}

/// The record of the list element at `position`.
pub fn item(slot: u8, version: u64, position: u64) -> Vec<u8> {
    let mut k = prefix(slot, version);
    k.push(ITEM);
    k.extend_from_slice(&position.to_be_bytes());
    k
}

/// The one record holding every item of a packed list.
pub fn list_node(slot: u8, version: u64) -> Vec<u8> {
    let mut k = prefix(slot, version);
    k.push(NODE);
    k
}

/// The position of a list element's key.
pub fn decode_item(k: &[u8]) -> Option<u64> {
    let p: [u8; 8] = k.get(FIELD_AT..FIELD_AT + 8)?.try_into().ok()?;
    Some(u64::from_be_bytes(p))
}

/// The expiry-index record of `key` in `slot`, expiring at `at` (ms).
pub fn expiry(at: u64, slot: u8, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(10 + key.len());
    k.push(EXPIRY);
    k.extend_from_slice(&at.to_be_bytes());
    k.push(slot);
    k.extend_from_slice(key);
    k
}

/// The expiry-index records due at or before `at`.
pub fn expiries_until(at: u64) -> Span {
    let mut end = vec![EXPIRY];
    end.extend_from_slice(&at.saturating_add(1).to_be_bytes());
    (vec![EXPIRY], end)
}

/// The time, slot and user key of an expiry-index key.
pub fn decode_expiry(k: &[u8]) -> Option<(u64, u8, &[u8])> {
    if k.first() != Some(&EXPIRY) || k.len() < 10 {
        return None;
    }
    let at = u64::from_be_bytes(k[1..9].try_into().ok()?);
    Some((at, k[9], &k[10..]))
}

/// The dead-collection record of a version.
pub fn trash(slot: u8, version: u64) -> Vec<u8> {
    let mut k = vec![TRASH, slot];
    k.extend_from_slice(&version.to_be_bytes());
    k
}

/// Every dead-collection record.
pub fn all_trash() -> Span {
    (vec![TRASH], vec![TRASH + 1])
}

/// The slot and version of a dead-collection key.
pub fn decode_trash(k: &[u8]) -> Option<(u8, u64)> {
    if k.len() != 10 || k[0] != TRASH {
        return None;
    }
    Some((k[1], u64::from_be_bytes(k[2..10].try_into().ok()?)))
}

/// A server record.
pub fn server(name: &str) -> Vec<u8> {
    let mut k = vec![SERVER];
    k.extend_from_slice(name.as_bytes());
    k
}

/// The record of a function library (`FUNCTION LOAD`): its code.
pub fn library(name: &str) -> Vec<u8> {
    server(&format!("library:{name}"))
}

/// Every function library's record.
pub fn libraries() -> Span {
    (server("library:"), server("library;"))
}

/// Every metadata record of every slot.
pub fn all_meta() -> Span {
    (vec![0], vec![DATABASES])
}

/// The first key after every key starting with `k` (`None`: no such
/// key, `k` is all 0xff).
pub fn successor(k: &[u8]) -> Option<Vec<u8>> {
    let mut out = k.to_vec();
    while let Some(last) = out.pop() {
        if last < 0xff {
            out.push(last + 1);
            return Some(out);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_collection_holds_its_fields_scores_and_items_and_nothing_else() {
        let (start, end) = collection(3, 7);
        let f = field(3, 7, Kind::Set, b"f").unwrap();
        let s = score(3, 7, -2.5, b"m").unwrap();
        let i = item(3, 7, u64::MAX);
        for k in [&f, &s, &i] {
            assert!(&start <= k && k < &end);
        }
        for k in [
            field(3, 8, Kind::Hash, b"").unwrap(),
            field(4, 7, Kind::Set, b"f").unwrap(),
            meta_key(3, b"k").unwrap(),
        ] {
            assert!(!(start <= k && k < end));
        }
        assert_eq!(decode_score(&s), Some((-2.5, &b"m"[..])));
        assert_eq!(decode_item(&i), Some(u64::MAX));
        let (fs, fe) = fields(3, 7);
        assert!(fs <= f && f < fe && !(fs <= s && s < fe));
        let (ss, se) = scores(3, 7);
        assert!(ss <= s && s < se);
    }

    #[test]
    fn slot_ranges_hold_their_slot_only() {
        let m = meta_key(15, &[0xff; 5]).unwrap();
        let (a, b) = all_meta();
        assert!(a <= m && m < b);
        let (es, ee) = slot_elements(2);
        assert!(es <= field(2, u64::MAX, Kind::Set, b"x").unwrap());
        assert!(field(2, 0, Kind::Set, b"").unwrap() < ee);
        assert!(field(3, 0, Kind::ZSet, b"").unwrap() >= ee);
        assert_eq!(collection(1, u64::MAX).1, vec![ELEMENT, 2]);
    }

    #[test]
    fn expiry_keys_sort_by_time_and_decode() {
        let a = expiry(5, 1, b"zzz");
        let b = expiry(6, 0, b"a");
        assert!(a < b);
        assert_eq!(decode_expiry(&a), Some((5, 1, &b"zzz"[..])));
        let (s, e) = expiries_until(5);
        assert!(s <= a && a < e && b >= e);
        assert_eq!(decode_trash(&trash(4, 9)), Some((4, 9)));
    }

    #[test]
    fn too_long_keys_and_members_are_refused() {
        assert!(meta_key(0, &vec![1; MAX_USER_KEY]).is_ok());
        assert!(meta_key(0, &vec![1; MAX_USER_KEY + 1]).is_err());
        let s = score(0, 1, 1.0, &vec![1; MAX_MEMBER]).unwrap();
        assert_eq!(s.len(), MAX_KEY_LEN);
        assert!(field(0, 1, Kind::Hash, &vec![1; MAX_MEMBER + 1]).is_err());
        assert!(field(0, 1, Kind::Hash, &vec![1; MAX_MEMBER]).unwrap().len() <= MAX_KEY_LEN);
    }

    #[test]
    fn hashed_members_carry_their_hash_and_sorted_set_members_their_bytes() {
        let p = position(Kind::Set, b"abc");
        assert_eq!(p.len(), HASH_LEN + 3);
        assert_eq!(member_at(Kind::Set, &p), Some(&b"abc"[..]));
        assert_eq!(position(Kind::ZSet, b"abc"), b"abc");
        assert_eq!(member_at(Kind::ZSet, b"abc"), Some(&b"abc"[..]));
    }

    #[test]
    fn successors() {
        assert_eq!(successor(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(successor(&[1, 0xff]), Some(vec![2]));
        assert_eq!(successor(&[0xff]), None);
    }
}
