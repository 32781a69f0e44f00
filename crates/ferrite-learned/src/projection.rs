//! Byte keys to model inputs.
//!
//! Models take `u64`s. A level's keys often share a prefix ("user0000…"),
//! and the first eight bytes would then map them all to one number, so a
//! projection strips the prefix common to the keys it was built from and
//! reads the next eight bytes big-endian (zero-padded). It is
//! order-preserving for keys that share the prefix; a key that does not
//! share it maps to 0 or `u64::MAX`, whichever side of the prefix it is on,
//! which keeps the order as well.

/// Order-preserving map from byte keys to `u64`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyProjection {
    prefix: Vec<u8>,
}

impl KeyProjection {
    /// The projection for a set of keys: their common prefix is dropped.
    pub fn for_keys<'k>(keys: impl IntoIterator<Item = &'k [u8]>) -> Self {
        let mut it = keys.into_iter();
        let Some(first) = it.next() else {
            return Self::default();
        };
        let mut len = first.len();
        for k in it {
            len = len.min(first.iter().zip(k).take_while(|(a, b)| a == b).count());
            if len == 0 {
                break;
            }
        }
        Self {
            prefix: first[..len].to_vec(),
        }
    }

    /// The projection that drops `prefix` (as stored by an index).
    pub fn from_prefix(prefix: Vec<u8>) -> Self {
        Self { prefix }
    }

    /// The dropped prefix.
    pub fn prefix(&self) -> &[u8] {
        &self.prefix
    }

    /// Projects `key`.
    pub fn project(&self, key: &[u8]) -> u64 {
        let p = self.prefix.len();
        let head = &key[..p.min(key.len())];
        match head.cmp(&self.prefix[..head.len()]) {
            std::cmp::Ordering::Less => return 0,
            std::cmp::Ordering::Greater => return u64::MAX,
            std::cmp::Ordering::Equal if key.len() < p => return 0,
            std::cmp::Ordering::Equal => {}
        }
        let mut b = [0u8; 8];
        let rest = &key[p..];
        let n = rest.len().min(8);
        b[..n].copy_from_slice(&rest[..n]);
        u64::from_be_bytes(b)
    }

    /// Projects `key`, which the caller knows starts with the prefix (a
    /// key between the two keys the projection was built from): the
    /// comparison against the prefix is skipped, which matters when a
    /// table builder projects every key it writes.
    pub fn project_sharing(&self, key: &[u8]) -> u64 {
        debug_assert!(key.starts_with(&self.prefix));
        Self::bytes_after(key, self.prefix.len())
    }

    /// The eight bytes of `key` from `at`, big-endian, zero-padded: what a
    /// projection dropping `at` bytes gives a key sharing its prefix.
    #[inline]
    pub fn bytes_after(key: &[u8], at: usize) -> u64 {
        let rest = key.get(at..).unwrap_or_default();
        if let Some(b) = rest.first_chunk::<8>() {
            return u64::from_be_bytes(*b);
        }
        // Fewer than eight bytes left: when the key has eight, its last
        // eight shifted up put them in place without a variable-length
        // copy (a prefix shorter than the key is the common case).
        match (key.last_chunk::<8>(), rest.len()) {
            (_, 0) => 0,
            (Some(b), r) => u64::from_be_bytes(*b) << (8 * (8 - r)),
            (None, _) => {
                let mut b = [0u8; 8];
                b[..rest.len()].copy_from_slice(rest);
                u64::from_be_bytes(b)
            }
        }
    }

    /// Bytes held.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.prefix.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn common_prefix_is_dropped() {
        let keys: Vec<&[u8]> = vec![b"user0001", b"user0002", b"user0100"];
        let p = KeyProjection::for_keys(keys.iter().copied());
        assert!(p.project(b"user0001") < p.project(b"user0002"));
        assert!(p.project(b"user0002") < p.project(b"user0100"));
        assert_eq!(p.project(b"aaa"), 0);
        assert_eq!(p.project(b"zzz"), u64::MAX);
    }

    proptest! {
        #[test]
        fn sharing_keys_project_alike(
            prefix in proptest::collection::vec(any::<u8>(), 0..12),
            tails in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..12), 2..20),
        ) {
            let keys: Vec<Vec<u8>> = tails.iter().map(|t| [prefix.as_slice(), t].concat()).collect();
            let p = KeyProjection::for_keys(keys.iter().map(|k| k.as_slice()));
            for k in &keys {
                prop_assert_eq!(p.project_sharing(k), p.project(k));
            }
        }

        #[test]
        fn order_is_kept(
            keys in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..20), 1..20),
            a in proptest::collection::vec(any::<u8>(), 0..20),
            b in proptest::collection::vec(any::<u8>(), 0..20),
        ) {
            let p = KeyProjection::for_keys(keys.iter().map(|k| k.as_slice()));
            if a <= b {
                prop_assert!(p.project(&a) <= p.project(&b));
            } else {
                prop_assert!(p.project(&a) >= p.project(&b));
            }
        }
    }
}
