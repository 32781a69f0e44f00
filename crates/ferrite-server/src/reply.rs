//! Replies, and their encoding in RESP2 or RESP3 (after `HELLO 3`).
//!
//! RESP3 adds a null, doubles, booleans, maps, sets, verbatim text and
//! out-of-band pushes; in RESP2 each falls back to what Redis sends
//! there: `$-1` (or `*-1` for a missing array), a bulk string of the
//! double as `%.17g` prints it, an integer, flat arrays, a bulk string.

use std::io::Write;

/// One reply to one command.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `+OK`: a status line (no CR or LF inside).
    Status(String),
    /// `-ERR ...`: the text after the dash, code first.
    Error(String),
    Int(i64),
    /// A RESP3 boolean (a script's `true`/`false` under `redis.setresp(3)`);
    /// RESP2 `:1`/`:0`.
    Bool(bool),
    Bulk(Vec<u8>),
    /// A score: RESP3 double, RESP2 bulk string (`%.17g`).
    Double(f64),
    /// No value (`GET` of a missing key).
    Null,
    /// No array (`EXEC` of an aborted transaction).
    NullArray,
    Array(Vec<Reply>),
    /// Pairs: a RESP3 map, a flat array in RESP2.
    Map(Vec<(Reply, Reply)>),
    /// Members: a RESP3 set, an array in RESP2.
    Set(Vec<Reply>),
    /// An out-of-band message (pub/sub): RESP3 push, RESP2 array.
    Push(Vec<Reply>),
    /// Text meant for people (`INFO`): RESP3 verbatim `txt`, RESP2 bulk.
    Verbatim(String),
    /// Several replies to one command, one after another (`SUBSCRIBE a b`
    /// answers once per channel).
    Several(Vec<Reply>),
    /// No reply at all (`CLIENT REPLY OFF`).
    Nothing,
}

impl Reply {
    pub fn ok() -> Self {
        Reply::Status("OK".into())
    }

    /// An error with Redis's `ERR` code.
    pub fn err(text: impl std::fmt::Display) -> Self {
        Reply::Error(format!("ERR {text}"))
    }

    pub fn bulk(b: impl Into<Vec<u8>>) -> Self {
        Reply::Bulk(b.into())
    }

    pub fn opt(v: Option<Vec<u8>>) -> Self {
        v.map_or(Reply::Null, Reply::Bulk)
    }

    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// A list of byte strings as bulk replies.
    pub fn bulks<I: IntoIterator<Item = Vec<u8>>>(items: I) -> Self {
        Reply::Array(items.into_iter().map(Reply::Bulk).collect())
    }

    /// Appends the reply to `out` in protocol version `proto` (2 or 3).
    pub fn encode(&self, proto: u8, out: &mut Vec<u8>) {
        let resp3 = proto >= 3;
        // Writing to a Vec cannot fail.
        let _ = match self {
            Reply::Status(s) => write!(out, "+{}\r\n", one_line(s)),
            Reply::Error(s) => write!(out, "-{}\r\n", one_line(s)),
            Reply::Int(n) => write!(out, ":{n}\r\n"),
            Reply::Bool(b) if resp3 => write!(out, "#{}\r\n", if *b { 't' } else { 'f' }),
            Reply::Bool(b) => write!(out, ":{}\r\n", u8::from(*b)),
            Reply::Bulk(b) => bulk(out, b),
            Reply::Double(d) if resp3 => write!(out, ",{}\r\n", format_score(*d)),
            Reply::Double(d) => bulk(out, format_score(*d).as_bytes()),
            Reply::Null if resp3 => out.write_all(b"_\r\n"),
            Reply::Null => out.write_all(b"$-1\r\n"),
            Reply::NullArray if resp3 => out.write_all(b"_\r\n"),
            Reply::NullArray => out.write_all(b"*-1\r\n"),
            Reply::Array(items) => sequence(out, '*', items, proto),
            Reply::Set(items) => sequence(out, if resp3 { '~' } else { '*' }, items, proto),
            Reply::Push(items) => sequence(out, if resp3 { '>' } else { '*' }, items, proto),
            Reply::Map(pairs) => {
                let _ = if resp3 {
                    write!(out, "%{}\r\n", pairs.len())
                } else {
                    write!(out, "*{}\r\n", pairs.len() * 2)
                };
                for (k, v) in pairs {
                    k.encode(proto, out);
                    v.encode(proto, out);
                }
                Ok(())
            }
            Reply::Verbatim(t) if resp3 => {
                let _ = write!(out, "={}\r\ntxt:", t.len() + 4);
                let _ = out.write_all(t.as_bytes());
                out.write_all(b"\r\n")
            }
            Reply::Verbatim(t) => bulk(out, t.as_bytes()),
            Reply::Several(rs) => {
                for r in rs {
                    r.encode(proto, out);
                }
                Ok(())
            }
            Reply::Nothing => Ok(()),
        };
    }
}

fn sequence(out: &mut Vec<u8>, mark: char, items: &[Reply], proto: u8) -> std::io::Result<()> {
    write!(out, "{mark}{}\r\n", items.len())?;
    for r in items {
        r.encode(proto, out);
    }
    Ok(())
}

fn bulk(out: &mut Vec<u8>, b: &[u8]) -> std::io::Result<()> {
    write!(out, "${}\r\n", b.len())?;
    out.write_all(b)?;
    out.write_all(b"\r\n")
}

/// Status and error lines cannot hold line breaks; Redis replaces them.
fn one_line(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains(['\r', '\n']) {
        s.replace(['\r', '\n'], " ").into()
    } else {
        s.into()
    }
}

/// A score as Redis prints one (`%.17g`; `inf`, `-inf`, `nan`).
pub fn format_score(d: f64) -> String {
    if d.is_nan() {
        return "nan".into();
    }
    if d.is_infinite() {
        return if d > 0.0 { "inf" } else { "-inf" }.into();
    }
    if d == 0.0 {
        return if d.is_sign_negative() { "-0" } else { "0" }.into();
    }
    // Seventeen significant digits in exponent form tells the exponent
    // after rounding; %g picks fixed or exponent form from it.
    let e_form = format!("{d:.16e}");
    let Some((mantissa, exp)) = e_form.split_once('e') else {
        return e_form;
    };
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..17).contains(&exp) {
        let m = trim_fraction(mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{m}e{sign}{:02}", exp.abs())
    } else {
        let decimals = (16 - exp) as usize;
        trim_fraction(&format!("{d:.decimals$}")).to_string()
    }
}

/// Drops trailing zeros of a fraction, and the point if nothing is left.
fn trim_fraction(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(r: &Reply, proto: u8) -> String {
        let mut out = Vec::new();
        r.encode(proto, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn each_reply_has_its_resp2_and_resp3_form() {
        assert_eq!(enc(&Reply::ok(), 2), "+OK\r\n");
        assert_eq!(enc(&Reply::err("no"), 2), "-ERR no\r\n");
        assert_eq!(enc(&Reply::Int(-3), 3), ":-3\r\n");
        assert_eq!(enc(&Reply::bulk("ab"), 2), "$2\r\nab\r\n");
        assert_eq!(enc(&Reply::Null, 2), "$-1\r\n");
        assert_eq!(enc(&Reply::Null, 3), "_\r\n");
        assert_eq!(enc(&Reply::NullArray, 2), "*-1\r\n");
        let m = Reply::Map(vec![(Reply::bulk("a"), Reply::Int(1))]);
        assert_eq!(enc(&m, 2), "*2\r\n$1\r\na\r\n:1\r\n");
        assert_eq!(enc(&m, 3), "%1\r\n$1\r\na\r\n:1\r\n");
        assert_eq!(enc(&Reply::Verbatim("x".into()), 3), "=5\r\ntxt:x\r\n");
        assert_eq!(enc(&Reply::err("a\r\nb"), 2), "-ERR a  b\r\n");
        assert_eq!(enc(&Reply::Double(1.5), 2), "$3\r\n1.5\r\n");
        assert_eq!(enc(&Reply::Double(1.5), 3), ",1.5\r\n");
        assert_eq!(enc(&Reply::Set(vec![Reply::Int(1)]), 3), "~1\r\n:1\r\n");
        assert_eq!(enc(&Reply::Push(vec![Reply::Int(1)]), 2), "*1\r\n:1\r\n");
        assert_eq!(enc(&Reply::Push(vec![Reply::Int(1)]), 3), ">1\r\n:1\r\n");
        assert_eq!(
            enc(&Reply::Several(vec![Reply::Int(1), Reply::Int(2)]), 2),
            ":1\r\n:2\r\n"
        );
    }

    #[test]
    fn scores_print_as_percent_17g() {
        for (d, want) in [
            (1.5, "1.5"),
            (0.1, "0.10000000000000001"),
            (1.1, "1.1000000000000001"),
            (3.0, "3"),
            (-2.0, "-2"),
            (1e17, "1e+17"),
            (123456789012345678.0, "1.2345678901234568e+17"),
            (1e16, "10000000000000000"),
            (0.0001, "0.0001"),
            (0.00001, "1.0000000000000001e-05"),
            (f64::NEG_INFINITY, "-inf"),
            (-0.0, "-0"),
            (2.5e-300, "2.5e-300"),
        ] {
            assert_eq!(format_score(d), want, "{d}");
        }
    }
}
