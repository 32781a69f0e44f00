//! Bit commands over strings: `SETBIT GETBIT BITCOUNT BITPOS BITOP`. Bit
//! 0 is the most significant bit of the first byte, as in Redis.

use super::args::{int, is, parse_int};
use super::strings::{read, write, MAX_STRING};
use super::{fail, syntax_error, CmdResult, Ctx, Fail};
use crate::reply::Reply;
use crate::request::Args;

/// A bit offset: within the longest string a request may carry.
fn offset(ctx: &Ctx<'_, '_>, b: &[u8]) -> Result<u64, Fail> {
    let limit = ctx.shared.settings.max_bulk().min(MAX_STRING) as u64 * 8;
    match parse_int(b) {
        Some(n) if n >= 0 && (n as u64) < limit => Ok(n as u64),
        _ => Err(fail("bit offset is not an integer or out of range")),
    }
}

fn bit_at(v: &[u8], i: u64) -> u8 {
    v.get((i / 8) as usize)
        .map_or(0, |b| (b >> (7 - (i % 8))) & 1)
}

pub fn setbit(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let off = offset(ctx, a[2])?;
    let on = match parse_int(a[3]) {
        Some(b @ (0 | 1)) => b == 1,
        _ => return Err(fail("bit is not an integer or out of range")),
    };
    let (mut f, v) = read(ctx, a[1])?;
    let mut v = v.unwrap_or_default();
    let byte = (off / 8) as usize;
    if v.len() <= byte {
        v.resize(byte + 1, 0);
    }
    let old = bit_at(&v, off);
    let mask = 1u8 << (7 - (off % 8));
    if on {
        v[byte] |= mask;
    } else {
        v[byte] &= !mask;
    }
    write(ctx, &mut f, v, true, None)?;
    ctx.tx.notify('$', "setbit", f.db, a[1]);
    Ok(Reply::Int(old as i64))
}

pub fn getbit(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let off = offset(ctx, a[2])?;
    let (_, v) = read(ctx, a[1])?;
    Ok(Reply::Int(bit_at(&v.unwrap_or_default(), off) as i64))
}

/// The bit range `[first, last]` of `start end [BYTE | BIT]` over a
/// string of `len` bytes, Redis's negative indexes and clamping applied;
/// `None` when empty.
fn bit_range(start: i64, end: i64, bits: bool, len: usize) -> Option<(u64, u64)> {
    let total = if bits { len as i64 * 8 } else { len as i64 };
    let mut s = if start < 0 { total + start } else { start };
    let mut e = if end < 0 { total + end } else { end };
    s = s.max(0);
    e = e.max(0);
    if e >= total {
        e = total - 1;
    }
    if s > e || total == 0 {
        return None;
    }
    let (s, e) = (s as u64, e as u64);
    Some(if bits { (s, e) } else { (s * 8, e * 8 + 7) })
}

fn unit(a: Option<&&[u8]>) -> Result<bool, Fail> {
    match a {
        None => Ok(false),
        Some(u) if is(u, "BIT") => Ok(true),
        Some(u) if is(u, "BYTE") => Ok(false),
        Some(_) => Err(syntax_error()),
    }
}

fn count_ones(v: &[u8], first: u64, last: u64) -> i64 {
    let (fb, lb) = ((first / 8) as usize, (last / 8) as usize);
    let mut n: i64 = v[fb..=lb].iter().map(|b| b.count_ones() as i64).sum();
    // Take off the bits of the edge bytes outside the range.
    for i in fb as u64 * 8..first {
        n -= bit_at(v, i) as i64;
    }
    for i in last + 1..(lb as u64 + 1) * 8 {
        n -= bit_at(v, i) as i64;
    }
    n
}

/// `BITCOUNT key [start [end [BYTE | BIT]]]`. As Redis 7.0: a missing
/// key answers 0 before the range is read; a start without an end counts
/// to the end (a later Redis's extension).
pub fn bitcount(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let (_, v) = read(ctx, a[1])?;
    let Some(v) = v else {
        return Ok(Reply::Int(0));
    };
    if a.len() > 5 {
        return Err(syntax_error());
    }
    let range = if a.len() >= 3 {
        let start = int(a[2])?;
        let end = match a.get(3) {
            Some(e) => int(e)?,
            None => -1,
        };
        Some((start, end, unit(a.get(4))?))
    } else {
        None
    };
    let (first, last) = match range {
        Some((s, e, _)) if s < 0 && e < 0 && s > e => return Ok(Reply::Int(0)),
        Some((s, e, bits)) => match bit_range(s, e, bits, v.len()) {
            Some(r) => r,
            None => return Ok(Reply::Int(0)),
        },
        None if v.is_empty() => return Ok(Reply::Int(0)),
        None => (0, v.len() as u64 * 8 - 1),
    };
    Ok(Reply::Int(count_ones(&v, first, last)))
}

/// `BITPOS key bit [start [end [BYTE | BIT]]]`. As Redis 7.0: the bit
/// is checked first, then a missing key answers before the range is read.
pub fn bitpos(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let want = match int(a[2])? {
        b @ (0 | 1) => b as u8,
        _ => return Err(fail("The bit argument must be 1 or 0.")),
    };
    let (_, v) = read(ctx, a[1])?;
    let Some(v) = v else {
        return Ok(Reply::Int(if want == 1 { -1 } else { 0 }));
    };
    if a.len() > 6 {
        return Err(syntax_error());
    }
    let start = a.get(3).map(|s| int(s)).transpose()?;
    let end = a.get(4).map(|e| int(e)).transpose()?;
    let bits = unit(a.get(5))?;
    let end_given = end.is_some();
    let range = match start {
        None => (!v.is_empty()).then(|| (0, v.len() as u64 * 8 - 1)),
        Some(s) => {
            let e = end.unwrap_or(if bits {
                v.len() as i64 * 8 + 7
            } else {
                v.len() as i64 - 1
            });
            bit_range(s, e, bits, v.len())
        }
    };
    let Some((first, last)) = range else {
        return Ok(Reply::Int(-1));
    };
    let mut i = first;
    while i <= last {
        // Whole bytes that cannot hold the bit are skipped at once.
        if i % 8 == 0 && i + 7 <= last {
            let b = v[(i / 8) as usize];
            if (want == 1 && b == 0) || (want == 0 && b == 0xff) {
                i += 8;
                continue;
            }
        }
        if bit_at(&v, i) == want {
            return Ok(Reply::Int(i as i64));
        }
        i += 1;
    }
    if want == 0 && !end_given {
        return Ok(Reply::Int(last as i64 + 1));
    }
    Ok(Reply::Int(-1))
}

pub fn bitop(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let op = a[1].to_ascii_uppercase();
    if !matches!(op.as_slice(), b"AND" | b"OR" | b"XOR" | b"NOT") {
        return Err(syntax_error());
    }
    if op == b"NOT" && a.len() != 4 {
        return Err(fail("BITOP NOT must be called with a single source key."));
    }
    let mut srcs = Vec::with_capacity(a.len() - 3);
    for k in &a[3..] {
        let (_, v) = read(ctx, k)?;
        srcs.push(v.unwrap_or_default());
    }
    let len = srcs.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = vec![0u8; len];
    for (i, o) in out.iter_mut().enumerate() {
        let byte = |s: &Vec<u8>| s.get(i).copied().unwrap_or(0);
        *o = match op.as_slice() {
            b"NOT" => !byte(&srcs[0]),
            b"AND" => srcs.iter().map(byte).fold(0xff, |x, y| x & y),
            b"OR" => srcs.iter().map(byte).fold(0, |x, y| x | y),
            _ => srcs.iter().map(byte).fold(0, |x, y| x ^ y),
        };
    }
    let mut f = ctx.tx.lookup(ctx.db(), a[2])?;
    if out.is_empty() {
        if ctx.tx.remove(&mut f)? {
            ctx.tx.notify('g', "del", f.db, a[2]);
        }
    } else {
        write(ctx, &mut f, out, false, None)?;
        ctx.tx.notify('$', "set", f.db, a[2]);
    }
    Ok(Reply::Int(len as i64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_ranges_follow_redis_index_rules() {
        assert_eq!(bit_range(0, -1, false, 3), Some((0, 23)));
        assert_eq!(bit_range(1, 1, false, 3), Some((8, 15)));
        assert_eq!(bit_range(5, 30, true, 2), Some((5, 15)));
        assert_eq!(bit_range(2, 1, false, 3), None);
        assert_eq!(count_ones(&[0xff, 0xf0], 4, 11), 8);
        assert_eq!(count_ones(&[0xff, 0xf0], 0, 15), 12);
    }
}
