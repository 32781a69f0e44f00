//! The bound on persisted counters.
//!
//! Epochs, generations, sequence numbers and ids that a store writes to
//! disk start at zero and rise by one per event, so none of them reaches
//! [`COUNTER_LIMIT`] in any store's life (2^62 events at a billion a
//! second take 146 years). A decoder refuses a larger value as damage:
//! that keeps every increment made after recovery far from overflowing,
//! whatever bytes the recovered image held.

/// No persisted counter reaches this value.
pub const COUNTER_LIMIT: u64 = 1 << 62;

/// `v` if it is a counter value a store can have written.
pub fn check_counter(v: u64) -> Option<u64> {
    (v < COUNTER_LIMIT).then_some(v)
}

/// Refuses to persist counter `v` once it reached the limit: a decoder
/// would take what is written for damage, and the store would come back
/// without it. A store reaches the limit only from a damaged value that
/// recovery read as one just below it, so the refusal is corruption.
pub fn persistable_counter(v: u64, what: &str) -> crate::Result<u64> {
    check_counter(v).ok_or_else(|| {
        crate::Error::corruption(
            what,
            format!(
                "counter {v} reached the limit of persisted counters; it rose from a damaged value"
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_is_exclusive() {
        assert_eq!(check_counter(0), Some(0));
        assert_eq!(check_counter(COUNTER_LIMIT - 1), Some(COUNTER_LIMIT - 1));
        assert_eq!(check_counter(COUNTER_LIMIT), None);
        assert_eq!(check_counter(u64::MAX), None);
        assert!(persistable_counter(COUNTER_LIMIT - 1, "x").is_ok());
        assert!(matches!(
            persistable_counter(COUNTER_LIMIT, "x"),
            Err(crate::Error::Corruption { .. })
        ));
    }
}
