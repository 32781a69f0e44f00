//! Sorted-set scores as eight bytes whose byte order is the numeric
//! order of the doubles, so a score range is one ordered scan of the
//! score index.
//!
//! Invariants: `decode(encode(x)) == x` for every double but NaN (which
//! no score is: commands refuse it) and `-0.0`, which is stored as `0.0`
//! (Redis compares them equal, and one encoding per value keeps the
//! index free of duplicates); `a < b` exactly when `encode(a) < encode(b)`
//! bytewise.

/// The encoded form of `score`.
pub fn encode(score: f64) -> [u8; 8] {
    let score = if score == 0.0 { 0.0 } else { score };
    let bits = score.to_bits();
    // Positive numbers: flip the sign bit so they sort above negatives.
    // Negative numbers: flip every bit so larger magnitudes sort lower.
    let ordered = if bits >> 63 == 0 {
        bits | (1 << 63)
    } else {
        !bits
    };
    ordered.to_be_bytes()
}

/// The score `bytes` encode.
pub fn decode(bytes: [u8; 8]) -> f64 {
    let ordered = u64::from_be_bytes(bytes);
    let bits = if ordered >> 63 == 1 {
        ordered & !(1 << 63)
    } else {
        !ordered
    };
    f64::from_bits(bits)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn special_values_keep_their_order() {
        let xs = [
            f64::NEG_INFINITY,
            -1e300,
            -1.5,
            -f64::MIN_POSITIVE,
            0.0,
            f64::MIN_POSITIVE,
            1.0,
            1e300,
            f64::INFINITY,
        ];
        for w in xs.windows(2) {
            assert!(encode(w[0]) < encode(w[1]), "{} < {}", w[0], w[1]);
        }
        assert_eq!(encode(-0.0), encode(0.0));
        assert_eq!(decode(encode(-0.0)), 0.0);
    }

    proptest! {
        #[test]
        fn order_and_round_trip(a in any::<f64>(), b in any::<f64>()) {
            prop_assume!(!a.is_nan() && !b.is_nan());
            prop_assume!(a != 0.0 && b != 0.0);
            prop_assert_eq!(decode(encode(a)), a);
            prop_assert_eq!(a < b, encode(a) < encode(b));
            prop_assert_eq!(a == b, encode(a) == encode(b));
        }
    }
}
