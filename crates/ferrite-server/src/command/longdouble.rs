//! The number `INCRBYFLOAT` and `HINCRBYFLOAT` compute with: Redis adds in
//! C's `long double`, which on x86-64 is the x87 80-bit extended format
//! (64-bit significand), and stores the sum printed `%.17Lf` with its
//! trailing zeros cut. Doing the same here — the same rounding when a
//! decimal is read, when two are added and when the sum is printed — is
//! what makes `INCRBYFLOAT k 0.1` on `0.2` answer `0.3` as Redis does,
//! where doubles would say `0.30000000000000004`.
//!
//! Invariants: [`LongDouble::parse`] accepts what Redis's `string2ld`
//! accepts (`strtold` syntax, the whole string, no leading space, no NaN,
//! no overflow to infinity nor underflow to zero of a finite decimal);
//! [`LongDouble::to_human`] prints the exact binary value rounded half to
//! even at 17 decimals, as glibc's `printf` does.

use rustc_apfloat::ieee::X87DoubleExtended;
use rustc_apfloat::{Float, Round, Status};

/// The longest text Redis reads as a long double (`MAX_LONG_DOUBLE_CHARS`).
const MAX_CHARS: usize = 5 * 1024;

/// Decimals `%.17Lf` prints.
const DECIMALS: u32 = 17;

/// An x87 extended-precision number.
#[derive(Clone, Copy, Debug)]
pub struct LongDouble(X87DoubleExtended);

impl LongDouble {
    pub const ZERO: Self = Self(X87DoubleExtended::ZERO);

    /// Reads `b` as Redis's `string2ld` does; `None` if it is not a
    /// number Redis would take.
    pub fn parse(b: &[u8]) -> Option<Self> {
        if b.is_empty() || b.len() >= MAX_CHARS {
            return None;
        }
        let s = std::str::from_utf8(b).ok()?;
        let (neg, body) = match s.as_bytes()[0] {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        let v = if body.eq_ignore_ascii_case("inf") || body.eq_ignore_ascii_case("infinity") {
            X87DoubleExtended::INFINITY
        } else {
            let text =
                if let Some(hex) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
                    hex_text(hex)?
                } else {
                    decimal_text(body)?
                };
            let r = X87DoubleExtended::from_str_r(&text, Round::NearestTiesToEven).ok()?;
            // `strtold` reports these as ERANGE and Redis refuses them.
            if r.status.contains(Status::OVERFLOW)
                || (r.status.contains(Status::UNDERFLOW) && r.value.is_zero())
            {
                return None;
            }
            r.value
        };
        Some(Self(if neg { -v } else { v }))
    }

    /// The sum, rounded to nearest even as the FPU rounds it.
    pub fn add(self, other: Self) -> Self {
        Self((self.0 + other.0).value)
    }

    pub fn is_finite(self) -> bool {
        self.0.is_finite()
    }

    pub fn is_infinite(self) -> bool {
        self.0.is_infinite()
    }

    /// `%.17Lf` without trailing zeros (nor a trailing point), `-0` as `0`:
    /// Redis's `LD_STR_HUMAN`. Finite values only.
    pub fn to_human(self) -> String {
        let bits = self.0.to_bits();
        let negative = bits >> 79 & 1 == 1;
        let biased = (bits >> 64 & 0x7fff) as i32;
        let significand = bits as u64;
        // value = significand * 2^(e - 16383 - 63); denormals use e = 1.
        let exp2 = biased.max(1) - 16383 - 63;
        let digits = scaled_digits(significand, exp2);
        let mut text = String::with_capacity(digits.len() + 3);
        if negative {
            text.push('-');
        }
        let point = DECIMALS as usize;
        let digits = format!("{digits:0>width$}", width = point + 1);
        let (int, frac) = digits.split_at(digits.len() - point);
        text.push_str(int);
        let frac = frac.trim_end_matches('0');
        if !frac.is_empty() {
            text.push('.');
            text.push_str(frac);
        }
        if text == "-0" {
            text.remove(0);
        }
        text
    }
}

/// The decimal digits of `significand * 2^exp2 * 10^17`, rounded half to
/// even to an integer.
fn scaled_digits(significand: u64, exp2: i32) -> String {
    // 10^17 = 5^17 * 2^17, and 5^17 < 2^40: the product fits 104 bits.
    let m = u128::from(significand) * 5u128.pow(DECIMALS);
    let shift = exp2 + DECIMALS as i32;
    if shift >= 0 {
        return shifted_decimal(m, shift as u32);
    }
    let t = shift.unsigned_abs();
    if t >= 128 {
        return "0".into(); // m < 2^104: far below one half
    }
    let q = m >> t;
    let r = m & ((1u128 << t) - 1);
    let half = 1u128 << (t - 1);
    let q = if r > half || (r == half && q & 1 == 1) {
        q + 1
    } else {
        q
    };
    q.to_string()
}

/// The decimal digits of `m * 2^shift` (up to some 5,000 of them).
fn shifted_decimal(m: u128, shift: u32) -> String {
    if shift < m.leading_zeros() {
        return (m << shift).to_string();
    }
    // Base 10^9 limbs, least significant first.
    const BASE: u64 = 1_000_000_000;
    let mut limbs = Vec::new();
    let mut rest = m;
    while rest > 0 {
        limbs.push((rest % u128::from(BASE)) as u64);
        rest /= u128::from(BASE);
    }
    let mut left = shift;
    while left > 0 {
        let step = left.min(32);
        let mut carry = 0u64;
        for limb in &mut limbs {
            let v = (*limb << step) + carry;
            *limb = v % BASE;
            carry = v / BASE;
        }
        while carry > 0 {
            limbs.push(carry % BASE);
            carry /= BASE;
        }
        left -= step;
    }
    let mut text = String::with_capacity(limbs.len() * 9);
    for (i, limb) in limbs.iter().rev().enumerate() {
        if i == 0 {
            text.push_str(&limb.to_string());
        } else {
            text.push_str(&format!("{limb:09}"));
        }
    }
    text
}

/// `s` split at its exponent marker (one of `marks`) into a mantissa of
/// digits with at most one point and at least one digit, and the
/// exponent's text if there is one; `None` if the mantissa is not that.
fn split_mantissa(
    s: &str,
    marks: [char; 2],
    digit: fn(u8) -> bool,
) -> Option<(&str, Option<&str>)> {
    let (mantissa, exponent) = match s.find(marks) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let points = mantissa.bytes().filter(|&c| c == b'.').count();
    let digits = mantissa.bytes().filter(|&c| digit(c)).count();
    if points > 1 || digits == 0 || points + digits != mantissa.len() {
        return None;
    }
    Some((mantissa, exponent))
}

/// A decimal as `strtold` reads it (digits with at most one point, at
/// least one digit, an optional exponent), in the form the parser takes.
fn decimal_text(s: &str) -> Option<String> {
    let (mantissa, exponent) = split_mantissa(s, ['e', 'E'], |c| c.is_ascii_digit())?;
    let mut text = String::with_capacity(s.len() + 2);
    text.push_str(if mantissa.starts_with('.') { "0" } else { "" });
    text.push_str(mantissa);
    if let Some(e) = exponent {
        let e_digits = e.strip_prefix(['+', '-']).unwrap_or(e);
        if e_digits.is_empty() || !e_digits.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        // Exponents past what any long double reaches saturate: the
        // parser's exponent arithmetic need not see them.
        let e_digits = e_digits.trim_start_matches('0');
        let e_value = if e_digits.len() > 6 {
            "99999"
        } else if e_digits.is_empty() {
            "0"
        } else {
            e_digits
        };
        text.push('e');
        text.push_str(if e.starts_with('-') { "-" } else { "" });
        text.push_str(e_value);
    }
    Some(text)
}

/// A hexadecimal number after its `0x` (`1f`, `1.8`, `1.8p3`), with the
/// binary exponent the parser requires.
fn hex_text(s: &str) -> Option<String> {
    let (mantissa, exponent) = split_mantissa(s, ['p', 'P'], |c| c.is_ascii_hexdigit())?;
    let exponent = match exponent {
        Some(e) => {
            let d = e.strip_prefix(['+', '-']).unwrap_or(e);
            if d.is_empty() || d.len() > 6 || !d.bytes().all(|c| c.is_ascii_digit()) {
                return None;
            }
            e
        }
        None => "0",
    };
    Some(format!("0x{mantissa}p{exponent}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum(a: &str, b: &str) -> Option<String> {
        let x = LongDouble::parse(a.as_bytes())?;
        let y = LongDouble::parse(b.as_bytes())?;
        let s = x.add(y);
        s.is_finite().then(|| s.to_human())
    }

    // Expected texts are what glibc's strtold, x87 addition and
    // printf("%.17Lf") give on x86-64.
    #[test]
    fn sums_print_as_redis_prints_them() {
        assert_eq!(sum("0.1", "0.2").as_deref(), Some("0.3"));
        assert_eq!(sum("10.50", "0.1").as_deref(), Some("10.6"));
        assert_eq!(sum("5.0e3", "2.0e2").as_deref(), Some("5200"));
        assert_eq!(
            sum("9223372036854775807", "0").as_deref(),
            Some("9223372036854775807")
        );
        assert_eq!(sum("-0.0", "0").as_deref(), Some("0"));
        assert_eq!(sum("0x10", "1").as_deref(), Some("17"));
        assert_eq!(sum(".5", "1.").as_deref(), Some("1.5"));
        assert_eq!(sum("3.0e-20", "0").as_deref(), Some("0"));
        assert_eq!(
            sum("1e300", "1").as_deref(),
            Some(
                "1000000000000000000008997324079559193870523944273290747938260082321265646596\
                 1809357558491520837504971903503725086142748359035925561846729839130962605207\
                 4864628732713564184365329408425510760601678972665293237003055138294762099454\
                 0294772781889620606179267611627097410650567187386105690089424915104006144"
            )
        );
        assert_eq!(sum("inf", "-inf"), None);
    }

    #[test]
    fn refuses_what_string2ld_refuses() {
        for bad in [
            "", " 1", "1 ", "abc", "1e", "1e+", "--1", "1..2", "nan", "-nan", "1e5000", "1e-5000",
            "0x", "0x1g",
        ] {
            assert!(LongDouble::parse(bad.as_bytes()).is_none(), "{bad:?}");
        }
        for good in [
            "1",
            "-1.5",
            "+2",
            "1E3",
            "1e-3",
            "INF",
            "-Infinity",
            "0x1.8p1",
            "1e-4940",
        ] {
            assert!(LongDouble::parse(good.as_bytes()).is_some(), "{good:?}");
        }
    }
}
