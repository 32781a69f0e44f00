//! Bit commands over strings: `SETBIT GETBIT BITCOUNT BITPOS BITOP
//! BITFIELD BITFIELD_RO`. Bit 0 is the most significant bit of the first
//! byte, as in Redis; a bit field of `n` bits is read and written most
//! significant bit first from its offset.

use super::args::{int, is, parse_int};
use super::strings::{read, write, MAX_STRING};
use super::{fail, syntax_error, CmdResult, Ctx, Fail};
use crate::reply::Reply;
use crate::request::Args;

/// A bit offset: within the longest string a request may carry.
fn offset(ctx: &Ctx<'_, '_>, b: &[u8]) -> Result<u64, Fail> {
    bit_offset(ctx, parse_int(b))
}

fn bit_offset(ctx: &Ctx<'_, '_>, n: Option<i64>) -> Result<u64, Fail> {
    let limit = ctx.shared.settings.max_bulk().min(MAX_STRING) as u64 * 8;
    match n {
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

/// A `BITFIELD` field type: `i1`..`i64` or `u1`..`u63`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Field {
    signed: bool,
    bits: u32,
}

/// What a `BITFIELD` write does when its result leaves the type's range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Overflow {
    Wrap,
    Sat,
    Fail,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FieldOp {
    Get,
    Set(i64),
    IncrBy(i64),
}

fn field_type(b: &[u8]) -> Result<Field, Fail> {
    let bad = || {
        fail("Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.")
    };
    let (&first, rest) = b.split_first().ok_or_else(bad)?;
    // Lower case only, as Redis reads it.
    let signed = match first {
        b'i' => true,
        b'u' => false,
        _ => return Err(bad()),
    };
    let bits = parse_int(rest).ok_or_else(bad)?;
    let max = if signed { 64 } else { 63 };
    if !(1..=max).contains(&bits) {
        return Err(bad());
    }
    Ok(Field {
        signed,
        bits: bits as u32,
    })
}

/// A field's bit offset: `N` bits, or `#N`, the N-th field of its width.
fn field_offset(ctx: &Ctx<'_, '_>, b: &[u8], f: Field) -> Result<u64, Fail> {
    let n = match b.strip_prefix(b"#") {
        Some(n) => parse_int(n).and_then(|n| n.checked_mul(i64::from(f.bits))),
        None => parse_int(b),
    };
    bit_offset(ctx, n)
}

fn get_unsigned(v: &[u8], off: u64, bits: u32) -> u64 {
    (0..u64::from(bits)).fold(0, |acc, j| (acc << 1) | u64::from(bit_at(v, off + j)))
}

fn get_signed(v: &[u8], off: u64, bits: u32) -> i64 {
    let u = get_unsigned(v, off, bits);
    if bits < 64 && u & (1 << (bits - 1)) != 0 {
        (u | (u64::MAX << bits)) as i64
    } else {
        u as i64
    }
}

/// Writes the low `bits` bits of `value` at `off` (`v` holds them).
fn set_field(v: &mut [u8], off: u64, bits: u32, value: u64) {
    for j in 0..u64::from(bits) {
        let i = off + j;
        let mask = 1u8 << (7 - (i % 8));
        let byte = &mut v[(i / 8) as usize];
        if (value >> (u64::from(bits) - 1 - j)) & 1 == 1 {
            *byte |= mask;
        } else {
            *byte &= !mask;
        }
    }
}

/// `value + incr` in an unsigned field of `bits` bits, as Redis computes
/// it: `None` when it overflows under `Fail`, else the wrapped or
/// saturated result (a `SET` is an increment of 0 from its value).
fn unsigned_add(value: u64, incr: i64, bits: u32, ow: Overflow) -> Option<u64> {
    let max = (1u64 << bits) - 1;
    let maxincr = max.wrapping_sub(value) as i64;
    let minincr = value.wrapping_neg() as i64;
    let wrap = || value.wrapping_add(incr as u64) & max;
    if value > max || (incr > 0 && incr > maxincr) {
        match ow {
            Overflow::Wrap => Some(wrap()),
            Overflow::Sat => Some(max),
            Overflow::Fail => None,
        }
    } else if incr < 0 && incr < minincr {
        match ow {
            Overflow::Wrap => Some(wrap()),
            Overflow::Sat => Some(0),
            Overflow::Fail => None,
        }
    } else {
        Some(value.wrapping_add(incr as u64))
    }
}

/// The signed counterpart of [`unsigned_add`].
fn signed_add(value: i64, incr: i64, bits: u32, ow: Overflow) -> Option<i64> {
    let max = if bits == 64 {
        i64::MAX
    } else {
        (1i64 << (bits - 1)) - 1
    };
    let min = -max - 1;
    let maxincr = max.wrapping_sub(value);
    let minincr = min.wrapping_sub(value);
    let wrap = || {
        let c = (value as u64).wrapping_add(incr as u64);
        if bits == 64 {
            c as i64
        } else if c & (1 << (bits - 1)) != 0 {
            (c | (u64::MAX << bits)) as i64
        } else {
            (c & !(u64::MAX << bits)) as i64
        }
    };
    let up =
        value > max || (bits != 64 && incr > maxincr) || (value >= 0 && incr > 0 && incr > maxincr);
    let down =
        value < min || (bits != 64 && incr < minincr) || (value < 0 && incr < 0 && incr < minincr);
    if up || down {
        match ow {
            Overflow::Wrap => Some(wrap()),
            Overflow::Sat => Some(if up { max } else { min }),
            Overflow::Fail => None,
        }
    } else {
        Some(value.wrapping_add(incr))
    }
}

/// The operations of a `BITFIELD` request, every argument checked before
/// any runs (a bad one fails the whole command, as in Redis).
fn field_ops(
    ctx: &Ctx<'_, '_>,
    a: &Args,
    read_only: bool,
) -> Result<Vec<(Field, u64, FieldOp, Overflow)>, Fail> {
    let mut ops = Vec::new();
    let mut ow = Overflow::Wrap;
    let mut i = 2;
    while i < a.len() {
        let sub = a[i];
        // Arguments the subcommand takes after its name.
        let need = if is(sub, "OVERFLOW") {
            1
        } else if is(sub, "GET") {
            2
        } else if is(sub, "SET") || is(sub, "INCRBY") {
            3
        } else {
            return Err(syntax_error());
        };
        if i + need >= a.len() {
            return Err(syntax_error());
        }
        if is(sub, "OVERFLOW") {
            ow = match a[i + 1] {
                o if is(o, "WRAP") => Overflow::Wrap,
                o if is(o, "SAT") => Overflow::Sat,
                o if is(o, "FAIL") => Overflow::Fail,
                _ => return Err(fail("Invalid OVERFLOW type specified")),
            };
            i += 2;
            continue;
        }
        let f = field_type(a[i + 1])?;
        let off = field_offset(ctx, a[i + 2], f)?;
        let op = if is(sub, "GET") {
            FieldOp::Get
        } else {
            let n = int(a[i + 3])?;
            if is(sub, "SET") {
                FieldOp::Set(n)
            } else {
                FieldOp::IncrBy(n)
            }
        };
        ops.push((f, off, op, ow));
        i += need + 1;
    }
    // Checked once every argument parsed, as Redis does.
    if read_only && ops.iter().any(|(_, _, op, _)| *op != FieldOp::Get) {
        return Err(fail("BITFIELD_RO only supports the GET subcommand"));
    }
    Ok(ops)
}

/// `BITFIELD key [GET type offset | SET type offset value | INCRBY type
/// offset increment | OVERFLOW WRAP|SAT|FAIL] ...`. A request with a
/// write grows (or makes) the string to its highest written bit first,
/// even when `OVERFLOW FAIL` then writes nothing, as Redis does.
pub fn bitfield(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    run_bitfield(ctx, a, false)
}

/// `BITFIELD_RO key [GET type offset] ...`.
pub fn bitfield_ro(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    run_bitfield(ctx, a, true)
}

fn run_bitfield(ctx: &mut Ctx<'_, '_>, a: &Args, read_only: bool) -> CmdResult {
    let ops = field_ops(ctx, a, read_only)?;
    let (mut f, v) = read(ctx, a[1])?;
    let end = ops
        .iter()
        .filter(|(_, _, op, _)| *op != FieldOp::Get)
        .map(|(t, off, _, _)| off + u64::from(t.bits))
        .max();
    let existed = v.is_some();
    let mut v = v.unwrap_or_default();
    let grown = match end {
        Some(end) if (v.len() as u64) * 8 < end => {
            v.resize(end.div_ceil(8) as usize, 0);
            true
        }
        _ => false,
    };
    let mut changes = 0;
    let mut out = Vec::with_capacity(ops.len());
    for (t, off, op, ow) in ops {
        let reply = match (t.signed, op) {
            (true, FieldOp::Get) => Reply::Int(get_signed(&v, off, t.bits)),
            (false, FieldOp::Get) => Reply::Int(get_unsigned(&v, off, t.bits) as i64),
            (true, FieldOp::Set(n) | FieldOp::IncrBy(n)) => {
                let old = get_signed(&v, off, t.bits);
                let (from, by) = match op {
                    FieldOp::Set(_) => (n, 0),
                    _ => (old, n),
                };
                match signed_add(from, by, t.bits, ow) {
                    None => Reply::Null,
                    Some(new) => {
                        set_field(&mut v, off, t.bits, new as u64);
                        changes += 1;
                        Reply::Int(if matches!(op, FieldOp::Set(_)) {
                            old
                        } else {
                            new
                        })
                    }
                }
            }
            (false, FieldOp::Set(n) | FieldOp::IncrBy(n)) => {
                let old = get_unsigned(&v, off, t.bits);
                let (from, by) = match op {
                    FieldOp::Set(_) => (n as u64, 0),
                    _ => (old, n),
                };
                match unsigned_add(from, by, t.bits, ow) {
                    None => Reply::Null,
                    Some(new) => {
                        set_field(&mut v, off, t.bits, new);
                        changes += 1;
                        let shown = if matches!(op, FieldOp::Set(_)) {
                            old
                        } else {
                            new
                        };
                        Reply::Int(shown as i64)
                    }
                }
            }
        };
        out.push(reply);
    }
    if changes > 0 || grown || (end.is_some() && !existed) {
        write(ctx, &mut f, v, true, None)?;
        if changes > 0 {
            ctx.tx.notify('$', "setbit", f.db, a[1]);
        }
    }
    Ok(Reply::Array(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_fields_overflow_as_redis_computes_them() {
        // Values taken from redis-server 7.0.15.
        assert_eq!(unsigned_add(0, 300, 8, Overflow::Wrap), Some(44));
        assert_eq!(unsigned_add(255, 0, 8, Overflow::Sat), Some(255));
        assert_eq!(unsigned_add(u64::MAX, 0, 8, Overflow::Sat), Some(255));
        assert_eq!(unsigned_add(0, -1, 8, Overflow::Wrap), Some(255));
        assert_eq!(unsigned_add(0, -1, 8, Overflow::Sat), Some(0));
        assert_eq!(unsigned_add(4, 0, 2, Overflow::Fail), None);
        assert_eq!(signed_add(300, 0, 8, Overflow::Sat), Some(127));
        assert_eq!(signed_add(127, -300, 8, Overflow::Sat), Some(-128));
        assert_eq!(signed_add(i64::MIN, -1, 64, Overflow::Wrap), Some(i64::MAX));
        assert_eq!(signed_add(-5, 0, 3, Overflow::Fail), None);
        assert_eq!(signed_add(3, 0, 3, Overflow::Fail), Some(3));
        assert_eq!(signed_add(-1, 1, 1, Overflow::Wrap), Some(0));
        assert_eq!(signed_add(0, -1, 1, Overflow::Wrap), Some(-1));
    }

    #[test]
    fn bit_fields_read_back_what_is_written() {
        let mut v = vec![0u8; 4];
        set_field(&mut v, 3, 13, 0x1abc);
        assert_eq!(get_unsigned(&v, 3, 13), 0x1abc);
        assert_eq!(get_signed(&v, 3, 13), 0x1abc - 0x2000);
        set_field(&mut v, 0, 1, 1);
        assert_eq!(v[0] & 0x80, 0x80);
        assert_eq!(get_signed(&v, 0, 1), -1);
    }

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
