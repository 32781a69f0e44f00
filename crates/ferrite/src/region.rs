//! [`Region`]: the part of the engine's one ordered key space that a key
//! space of the facade (the default one, or a named keyspace) occupies,
//! and the mapping between its users' keys and the engine's.
//!
//! A region is the engine keys `[prefix, end)`; a user key `k` is the
//! engine key `prefix ++ k`. The default key space has no prefix: it is
//! every key while the store has no named keyspaces, and the keys below
//! `0xFF 0xFF` once it has (the catalog's and the named keyspaces' keys
//! sit above). A named keyspace's prefix is 7 bytes (see
//! `docs/format/keyspaces.md`), so its keys may be at most
//! `MAX_KEY_LEN - 7` bytes long.
//!
//! Invariants: every engine key a region yields lies in `[prefix, end)`;
//! mapping a user range gives an engine range inside the region, so no
//! scan, iterator or range delete of one key space reaches another's keys.

use std::ops::{Bound, Deref};
use std::sync::Arc;

use ferrite_core::{
    Error, KeyRange, OwnedKeyRange, Result, ScanVisitor, StoreSnapshot, MAX_KEY_LEN,
};

/// Engine keys up to this long are built on the stack.
const INLINE: usize = 64;

/// An engine key made from a user key: the user's own bytes, or the
/// region's prefix before them (on the stack when short, so a keyspace's
/// point operation allocates nothing for its key).
pub(crate) enum EngineKey<'k> {
    Borrowed(&'k [u8]),
    Inline([u8; INLINE], usize),
    Heap(Vec<u8>),
}

impl Deref for EngineKey<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            EngineKey::Borrowed(k) => k,
            EngineKey::Inline(buf, n) => &buf[..*n],
            EngineKey::Heap(k) => k,
        }
    }
}

/// Where a key space's keys sit among the engine's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Region {
    prefix: Vec<u8>,
    /// The first engine key past the region; `None`: the key space ends
    /// where the engine's does.
    end: Option<Vec<u8>>,
}

impl Region {
    /// Every engine key: the default key space of a store without named
    /// keyspaces.
    pub(crate) fn everything() -> Self {
        Self {
            prefix: Vec::new(),
            end: None,
        }
    }

    /// The keys below `end`, unprefixed: the default key space of a store
    /// with named keyspaces.
    pub(crate) fn below(end: &[u8]) -> Self {
        Self {
            prefix: Vec::new(),
            end: Some(end.to_vec()),
        }
    }

    /// The keys that start with `prefix`, seen without it.
    pub(crate) fn prefixed(prefix: Vec<u8>) -> Self {
        let end = match OwnedKeyRange::prefix(&prefix).end {
            Bound::Excluded(e) => Some(e),
            _ => None,
        };
        Self { prefix, end }
    }

    /// Whether the region is the whole engine (nothing to map).
    pub(crate) fn is_everything(&self) -> bool {
        self.prefix.is_empty() && self.end.is_none()
    }

    /// The longest user key the region holds.
    pub(crate) fn max_key_len(&self) -> usize {
        MAX_KEY_LEN - self.prefix.len()
    }

    /// The engine key of user key `key`. Errors: [`Error::EmptyKey`],
    /// [`Error::KeyTooLarge`] (against this region's limit),
    /// [`Error::ReservedKey`] for a default-space key at or past its end.
    pub(crate) fn key<'k>(&self, key: &'k [u8]) -> Result<EngineKey<'k>> {
        if key.is_empty() {
            return Err(Error::EmptyKey);
        }
        if key.len() > self.max_key_len() {
            return Err(Error::KeyTooLarge {
                len: key.len(),
                max: self.max_key_len(),
            });
        }
        if self.prefix.is_empty() {
            if let Some(end) = &self.end {
                if key >= end.as_slice() {
                    return Err(Error::ReservedKey {
                        key: key.escape_ascii().to_string(),
                    });
                }
            }
            return Ok(EngineKey::Borrowed(key));
        }
        let n = self.prefix.len() + key.len();
        if n <= INLINE {
            let mut buf = [0u8; INLINE];
            buf[..self.prefix.len()].copy_from_slice(&self.prefix);
            buf[self.prefix.len()..n].copy_from_slice(key);
            return Ok(EngineKey::Inline(buf, n));
        }
        let mut k = Vec::with_capacity(n);
        k.extend_from_slice(&self.prefix);
        k.extend_from_slice(key);
        Ok(EngineKey::Heap(k))
    }

    /// The user key of engine key `key`, which lies in the region.
    #[cfg(test)]
    fn user<'k>(&self, key: &'k [u8]) -> &'k [u8] {
        &key[self.prefix.len()..]
    }

    /// The bytes an engine key has before its user key.
    pub(crate) fn prefix_len(&self) -> usize {
        self.prefix.len()
    }

    fn bound(&self, b: Bound<&[u8]>) -> Bound<Vec<u8>> {
        b.map(|k| {
            let mut v = Vec::with_capacity(self.prefix.len() + k.len());
            v.extend_from_slice(&self.prefix);
            v.extend_from_slice(k);
            v
        })
    }

    /// The engine range of user range `range`, cut to the region.
    pub(crate) fn range(&self, range: KeyRange<'_>) -> OwnedKeyRange {
        let start = match range.start {
            Bound::Unbounded if self.prefix.is_empty() => Bound::Unbounded,
            Bound::Unbounded => Bound::Included(self.prefix.clone()),
            b => self.bound(b),
        };
        let mut end = match range.end {
            Bound::Unbounded => self.end.clone().map_or(Bound::Unbounded, Bound::Excluded),
            b => self.bound(b),
        };
        // A default-space bound at or past the reserved keys stops there
        // (a prefixed bound can never pass its region's end).
        if let (Some(limit), Bound::Included(e) | Bound::Excluded(e)) = (&self.end, &end) {
            if e >= limit {
                end = Bound::Excluded(limit.clone());
            }
        }
        OwnedKeyRange { start, end }
    }

    /// The engine keys of user range `start..end` for a range delete,
    /// cut to the region; `None` when nothing of it lies inside.
    pub(crate) fn delete_range(
        &self,
        start: &[u8],
        end: &[u8],
    ) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        if start >= end {
            return Err(Error::EmptyRange);
        }
        let r = self.range(KeyRange {
            start: Bound::Included(start),
            end: Bound::Excluded(end),
        });
        match (r.start, r.end) {
            (Bound::Included(s), Bound::Excluded(e)) if s < e => {
                ferrite_core::engine::check_key(&s)?;
                ferrite_core::engine::check_key(&e)?;
                Ok(Some((s, e)))
            }
            _ => Ok(None),
        }
    }

    /// `snapshot` seen as this region: user keys in, user keys out.
    pub(crate) fn view(&self, snapshot: Arc<dyn StoreSnapshot>) -> Arc<dyn StoreSnapshot> {
        if self.is_everything() {
            return snapshot;
        }
        Arc::new(RegionSnapshot {
            inner: snapshot,
            region: self.clone(),
        })
    }

    /// Visits the engine's `range` through `scan`, handing the visitor
    /// user keys.
    pub(crate) fn scan_with(
        &self,
        range: KeyRange<'_>,
        visit: &mut ScanVisitor<'_>,
        scan: impl FnOnce(KeyRange<'_>, &mut ScanVisitor<'_>) -> Result<()>,
    ) -> Result<()> {
        let r = self.range(range);
        if r.as_range().is_empty() {
            return Ok(());
        }
        let n = self.prefix_len();
        scan(r.as_range(), &mut |k, v| visit(&k[n..], v))
    }
}

/// A snapshot seen through a [`Region`].
struct RegionSnapshot {
    inner: Arc<dyn StoreSnapshot>,
    region: Region,
}

impl StoreSnapshot for RegionSnapshot {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.inner.get(&self.region.key(key)?)
    }

    fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.region
            .scan_with(range, visit, |r, v| self.inner.scan(r, v))
    }

    fn scan_rev(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.region
            .scan_with(range, visit, |r, v| self.inner.scan_rev(r, v))
    }

    fn write_sequence(&self) -> Option<u64> {
        self.inner.write_sequence()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds(r: &OwnedKeyRange) -> (Bound<&[u8]>, Bound<&[u8]>) {
        (
            r.start.as_ref().map(Vec::as_slice),
            r.end.as_ref().map(Vec::as_slice),
        )
    }

    #[test]
    fn a_prefixed_region_maps_keys_and_keeps_ranges_inside() {
        let r = Region::prefixed(vec![0xFF, 0xFF, 1, 0, 0, 0, 7]);
        assert_eq!(&*r.key(b"a").unwrap(), &[0xFF, 0xFF, 1, 0, 0, 0, 7, b'a']);
        assert_eq!(r.user(&r.key(b"abc").unwrap()), b"abc");
        let all = r.range(KeyRange::all());
        assert_eq!(
            bounds(&all),
            (
                Bound::Included(&[0xFF, 0xFF, 1, 0, 0, 0, 7][..]),
                Bound::Excluded(&[0xFF, 0xFF, 1, 0, 0, 0, 8][..])
            )
        );
        // Keys of 0xFF bytes stay inside.
        let high = r.key(&[0xFF; 20]).unwrap();
        assert!(*high < [0xFF, 0xFF, 1, 0, 0, 0, 8][..]);
        let long = r.key(&[3; 100]).unwrap();
        assert_eq!(long.len(), 107);
        assert_eq!(r.user(&long), &[3; 100][..]);
        assert!(matches!(
            r.key(&vec![1; MAX_KEY_LEN - 6]),
            Err(Error::KeyTooLarge { max, .. }) if max == MAX_KEY_LEN - 7
        ));
        assert!(matches!(r.key(b""), Err(Error::EmptyKey)));
    }

    #[test]
    fn the_default_region_of_a_store_with_keyspaces_stops_below_the_reserved_keys() {
        let r = Region::below(&[0xFF, 0xFF]);
        assert_eq!(&*r.key(b"\xff\xfe").unwrap(), b"\xff\xfe");
        assert!(matches!(r.key(b"\xff\xff"), Err(Error::ReservedKey { .. })));
        assert!(matches!(
            r.key(b"\xff\xff\x01"),
            Err(Error::ReservedKey { .. })
        ));
        let all = r.range(KeyRange::all());
        assert_eq!(
            bounds(&all),
            (Bound::Unbounded, Bound::Excluded(&[0xFF, 0xFF][..]))
        );
        let past = r.range(KeyRange {
            start: Bound::Included(b"a"),
            end: Bound::Included(b"\xff\xff\xff"),
        });
        assert_eq!(past.end, Bound::Excluded(vec![0xFF, 0xFF]));
        assert_eq!(
            r.delete_range(b"a", b"\xff\xff\x05").unwrap(),
            Some((b"a".to_vec(), vec![0xFF, 0xFF]))
        );
        assert_eq!(
            r.delete_range(b"\xff\xff\x01", b"\xff\xff\x05").unwrap(),
            None
        );
        assert!(matches!(r.delete_range(b"b", b"a"), Err(Error::EmptyRange)));
    }

    #[test]
    fn everything_maps_nothing() {
        let r = Region::everything();
        assert!(r.is_everything());
        assert_eq!(&*r.key(b"\xff\xff\x00").unwrap(), b"\xff\xff\x00");
        assert_eq!(r.range(KeyRange::all()), OwnedKeyRange::all());
    }
}
