//! Key and value limits, and the order-preserving key → u64 map.
//!
//! Keys are byte strings of 1..=[`MAX_KEY_LEN`] bytes compared
//! lexicographically (memcmp order); values are 0..=[`MAX_VALUE_LEN`] bytes.
//! Every engine validates with [`check_key`] and [`check_value`] before it
//! touches anything, so an oversized key is an error, never a truncation.

use crate::error::{Error, Result};

/// Longest key, in bytes.
pub const MAX_KEY_LEN: usize = 1024;
/// Longest value, in bytes (4 MiB).
pub const MAX_VALUE_LEN: usize = 4 << 20;

/// Checks a key against the limits.
pub fn check_key(key: &[u8]) -> Result<()> {
    match key.len() {
        0 => Err(Error::EmptyKey),
        n if n > MAX_KEY_LEN => Err(Error::KeyTooLarge {
            len: n,
            max: MAX_KEY_LEN,
        }),
        _ => Ok(()),
    }
}

/// Checks a value against the limits.
pub fn check_value(value: &[u8]) -> Result<()> {
    if value.len() > MAX_VALUE_LEN {
        return Err(Error::ValueTooLarge {
            len: value.len(),
            max: MAX_VALUE_LEN,
        });
    }
    Ok(())
}

/// Maps a key to a u64 for learned models: the first 8 bytes read
/// big-endian, zero-padded on the right when the key is shorter.
///
/// The map is monotone: `a <= b` (memcmp order) implies
/// `key_to_u64(a) <= key_to_u64(b)`. It is not injective: keys sharing
/// their first 8 bytes map to the same number, and so do a key and its
/// extensions by zero bytes (`b"a"` and `b"a\0"`). Models built on it must
/// treat equal images as a run, not as one key. For 8-byte big-endian
/// integer keys it is the identity on the integer.
pub fn key_to_u64(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = key.len().min(8);
    if let (Some(dst), Some(src)) = (b.get_mut(..n), key.get(..n)) {
        dst.copy_from_slice(src);
    }
    u64::from_be_bytes(b)
}

/// The key that [`key_to_u64`] maps `x` from: `x` as 8 big-endian bytes.
pub fn u64_to_key(x: u64) -> [u8; 8] {
    x.to_be_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn limits() {
        assert!(matches!(check_key(b""), Err(Error::EmptyKey)));
        assert!(check_key(&[1; MAX_KEY_LEN]).is_ok());
        assert!(matches!(
            check_key(&[1; MAX_KEY_LEN + 1]),
            Err(Error::KeyTooLarge {
                len: 1025,
                max: 1024
            })
        ));
        assert!(check_value(b"").is_ok());
        assert!(matches!(
            check_value(&vec![0; MAX_VALUE_LEN + 1]),
            Err(Error::ValueTooLarge { .. })
        ));
    }

    #[test]
    fn examples() {
        assert_eq!(key_to_u64(b"\x01"), 1 << 56);
        assert_eq!(key_to_u64(&u64_to_key(42)), 42);
        assert_eq!(key_to_u64(b"abcdefghXYZ"), key_to_u64(b"abcdefgh"));
        assert_eq!(key_to_u64(b"a"), key_to_u64(b"a\0"));
    }

    proptest! {
        #[test]
        fn monotone(a in proptest::collection::vec(any::<u8>(), 1..20),
                    b in proptest::collection::vec(any::<u8>(), 1..20)) {
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            prop_assert!(key_to_u64(&lo) <= key_to_u64(&hi));
        }

        #[test]
        fn identity_on_integers(x in any::<u64>()) {
            prop_assert_eq!(key_to_u64(&u64_to_key(x)), x);
        }
    }
}
