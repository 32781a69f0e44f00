//! The model inputs of a table's keys, projected as the keys arrive.
//!
//! A learned index projects keys past the prefix every key of the table
//! shares (`KeyProjection`), and that prefix is known only when the last
//! key is: it is the first key's common prefix with the last. Rather than
//! hold every key until then, each key is projected past the prefix it
//! shares with the first key *so far*. In ascending order that shared
//! length never grows, so the keys projected under a longer one are a
//! prefix of the sequence, and their values are fixed when the table is
//! finished from the first key's bytes, which they share.
//!
//! Invariant: after [`ProjectedKeys::finish`], value `i` is what the
//! finished projection's `project_sharing` gives key `i`.

use ferrite_learned::KeyProjection;

#[derive(Debug, Default)]
pub struct ProjectedKeys {
    /// Per key: its eight bytes after the shared length current when it
    /// was added.
    xs: Vec<u64>,
    /// The shared length so far: at most the first key's length.
    shared: usize,
    /// `(first key index, shared length)` at each change of the shared
    /// length; lengths strictly decreasing.
    marks: Vec<(usize, usize)>,
}

impl ProjectedKeys {
    /// Adds the next key; `first` is the table's first key (the first
    /// call passes it as `key` too), and keys come in ascending order.
    #[inline]
    pub fn push(&mut self, first: &[u8], key: &[u8]) {
        // Most keys keep the shared length: a word comparison and a load,
        // inlined into the builder's per-entry path.
        if !self.xs.is_empty() && keeps_prefix(first, key, self.shared) {
            self.xs.push(KeyProjection::bytes_after(key, self.shared));
        } else {
            self.push_new_shared(first, key);
        }
    }

    /// [`push`](ProjectedKeys::push) of the first key, or of one that
    /// shortens the shared length.
    #[inline(never)]
    fn push_new_shared(&mut self, first: &[u8], key: &[u8]) {
        let shared = if self.xs.is_empty() {
            first.len()
        } else {
            let limit = self.shared.min(key.len());
            first[..limit]
                .iter()
                .zip(key)
                .take_while(|(a, b)| a == b)
                .count()
        };
        self.shared = shared;
        self.marks.push((self.xs.len(), shared));
        self.xs
            .push(KeyProjection::bytes_after(key, shared.min(key.len())));
    }

    /// The projection for the keys pushed (`first` as in [`push`]) and
    /// every key's value under it. The keys stay pushed until
    /// [`clear`](ProjectedKeys::clear).
    ///
    /// [`push`]: ProjectedKeys::push
    pub fn finish(&mut self, first: &[u8]) -> (KeyProjection, &[u64]) {
        let prefix = self.shared.min(first.len());
        let n = self.xs.len();
        for (m, &(start, shared)) in self.marks.iter().enumerate() {
            if shared <= prefix {
                break;
            }
            // These keys share `first[..shared]`: their bytes from
            // `prefix` are `first[prefix..shared]`, then what was kept.
            let head = KeyProjection::bytes_after(&first[..shared], prefix);
            let d = shared - prefix;
            let end = self.marks.get(m + 1).map_or(n, |&(s, _)| s);
            for x in self.xs.get_mut(start..end).unwrap_or_default() {
                *x = if d >= 8 { head } else { head | (*x >> (8 * d)) };
            }
        }
        // The values are final: as if every key had been pushed under the
        // prefix, so a second call shifts nothing again.
        self.marks.clear();
        self.marks.push((0, prefix));
        (
            KeyProjection::from_prefix(first[..prefix].to_vec()),
            &self.xs,
        )
    }

    /// Forgets every key, keeping the memory for the next table's.
    pub fn clear(&mut self) {
        self.xs.clear();
        self.marks.clear();
        self.shared = 0;
    }
}

/// Whether `key` starts with `first[..n]` (`n <= first.len()`). A prefix
/// of at most eight bytes, the usual one, is compared as one word rather
/// than through a call to compare slices.
#[inline]
fn keeps_prefix(first: &[u8], key: &[u8], n: usize) -> bool {
    match (first.first_chunk::<8>(), key.first_chunk::<8>()) {
        (Some(a), Some(b)) if n <= 8 => {
            let diff = u64::from_be_bytes(*a) ^ u64::from_be_bytes(*b);
            n == 0 || diff >> (64 - 8 * n) == 0
        }
        _ => key.get(..n) == first.get(..n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Through a `ProjectedKeys` that held another table's keys before, as
    /// a builder reuses it.
    fn projected(keys: &[Vec<u8>]) -> (KeyProjection, Vec<u64>) {
        let mut p = ProjectedKeys::default();
        let earlier = [b"a".to_vec(), b"ab".to_vec(), vec![0xff; 20]];
        for k in &earlier {
            p.push(&earlier[0], k);
        }
        let _ = p.finish(&earlier[0]);
        p.clear();
        for k in keys {
            p.push(&keys[0], k);
        }
        let (projection, xs) = p.finish(&keys[0]);
        (projection, xs.to_vec())
    }

    #[test]
    fn a_shrinking_shared_prefix_is_applied_to_earlier_keys() {
        let keys: Vec<Vec<u8>> = [
            &b"user0000000001"[..],
            b"user0000000002",
            b"user0000000913",
            b"user0000551234",
            b"user1",
            b"user9999999999999",
        ]
        .iter()
        .map(|k| k.to_vec())
        .collect();
        let (projection, xs) = projected(&keys);
        assert_eq!(projection.prefix(), b"user");
        for (k, x) in keys.iter().zip(&xs) {
            assert_eq!(
                *x,
                projection.project(k),
                "{:?}",
                String::from_utf8_lossy(k)
            );
        }
        assert!(xs.windows(2).all(|w| w[0] <= w[1]));
    }

    proptest! {
        #[test]
        fn values_are_what_the_finished_projection_gives(
            prefix in proptest::collection::vec(any::<u8>(), 0..12),
            tails in proptest::collection::btree_set(
                proptest::collection::vec(0u8..4, 0..14), 1..60),
        ) {
            let keys: Vec<Vec<u8>> = tails.iter().map(|t| [prefix.as_slice(), t].concat()).collect();
            let (projection, xs) = projected(&keys);
            let reference = KeyProjection::for_keys([keys[0].as_slice(), keys[keys.len() - 1].as_slice()]);
            prop_assert_eq!(&projection, &reference);
            for (k, x) in keys.iter().zip(&xs) {
                prop_assert_eq!(*x, reference.project_sharing(k));
            }
        }
    }
}
