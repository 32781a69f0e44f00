//! Arguments as Redis reads them: integers (`string2ll`), doubles
//! (`strtod`, no NaN), timeouts, and the error texts that go with each.

use super::{fail, Fail};

/// Redis's `string2ll` (the data model's rule for integers).
pub use crate::model::parse_int;

pub fn not_an_integer() -> Fail {
    fail("value is not an integer or out of range")
}

/// An integer argument.
pub fn int(b: &[u8]) -> Result<i64, Fail> {
    parse_int(b).ok_or_else(not_an_integer)
}

/// A double as Redis reads one (`strtod`): decimal or exponent form,
/// `inf`; no spaces, not NaN.
pub fn parse_float(b: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(b).ok()?;
    if s.is_empty() || s.starts_with(char::is_whitespace) || s.ends_with(char::is_whitespace) {
        return None;
    }
    let v: f64 = match s.parse() {
        Ok(v) => v,
        Err(_) => parse_hex(s)?,
    };
    (!v.is_nan()).then_some(v)
}

/// A hexadecimal integer (`0x1F`, `-0x1f`), which `strtod` reads too.
fn parse_hex(s: &str) -> Option<f64> {
    let (neg, rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let digits = rest
        .strip_prefix("0x")
        .or_else(|| rest.strip_prefix("0X"))?;
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let v = digits.bytes().fold(0f64, |acc, c| {
        acc * 16.0 + (c as char).to_digit(16).unwrap_or(0) as f64
    });
    Some(if neg { -v } else { v })
}

/// A double argument.
pub fn float(b: &[u8]) -> Result<f64, Fail> {
    parse_float(b).ok_or_else(|| fail("value is not a valid float"))
}

/// Whether `a` is the option `name` (any case).
pub fn is(a: &[u8], name: &str) -> bool {
    a.eq_ignore_ascii_case(name.as_bytes())
}

/// A positive count (`COUNT n` of the pop commands).
pub fn positive(b: &[u8]) -> Result<u64, Fail> {
    match parse_int(b) {
        Some(n) if n > 0 => Ok(n as u64),
        _ => Err(fail("value is out of range, must be positive")),
    }
}

/// A blocking command's timeout in seconds (fractions allowed; 0 waits
/// forever), as milliseconds.
pub fn timeout_ms(b: &[u8]) -> Result<u64, Fail> {
    let t = parse_float(b)
        .filter(|t| t.is_finite())
        .ok_or_else(|| fail("timeout is not a float or out of range"))?;
    if t < 0.0 {
        return Err(fail("timeout is negative"));
    }
    let ms = t * 1000.0;
    if ms > (i64::MAX / 2) as f64 {
        return Err(fail("timeout is out of range"));
    }
    Ok(ms.ceil() as u64)
}

/// A `numkeys` argument at `at`, checked against what follows it;
/// returns the keys.
pub fn numkeys<'a>(a: &'a [&'a [u8]], at: usize) -> Result<&'a [&'a [u8]], Fail> {
    let n = match parse_int(a[at]) {
        Some(n) if n > 0 => n as usize,
        _ => return Err(fail("numkeys should be greater than 0")),
    };
    if n > a.len() - at - 1 {
        return Err(fail("Number of keys can't be greater than number of args"));
    }
    Ok(&a[at + 1..at + 1 + n])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_parse_as_redis_parses_them() {
        assert_eq!(parse_int(b"0"), Some(0));
        assert_eq!(parse_int(b"-12"), Some(-12));
        assert_eq!(parse_int(b"9223372036854775807"), Some(i64::MAX));
        for bad in [
            &b""[..],
            b"-",
            b"01",
            b"-0",
            b"+1",
            b" 1",
            b"1.0",
            b"9223372036854775808",
        ] {
            assert_eq!(parse_int(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn floats_parse_as_redis_parses_them() {
        assert_eq!(parse_float(b"10.5"), Some(10.5));
        assert_eq!(parse_float(b"5.0e3"), Some(5000.0));
        assert_eq!(parse_float(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_float(b"0x10"), Some(16.0));
        assert_eq!(parse_float(b"0x"), None);
        assert_eq!(parse_float(b" 1"), None);
        assert_eq!(parse_float(b"nan"), None);
        assert_eq!(parse_float(b"abc"), None);
    }

    #[test]
    fn timeouts() {
        assert_eq!(timeout_ms(b"0").ok(), Some(0));
        assert_eq!(timeout_ms(b"0.1").ok(), Some(100));
        assert!(timeout_ms(b"-1").is_err());
        assert!(timeout_ms(b"abc").is_err());
    }
}
