//! `cmsgpack`, the MessagePack library Redis gives scripts, with
//! lua-cmsgpack's interface and encodings: `pack(...)`, `unpack(s)`,
//! `unpack_one(s, offset)`, `unpack_limit(s, limit, offset)`.
//!
//! As lua-cmsgpack: a number that is an integer packs as the smallest
//! integer format, any other as a 32-bit float when that loses nothing,
//! else 64-bit; a table whose keys are exactly 1..n is an array, any
//! other a map; tables nested deeper than [`MAX_NESTING`] (a table that
//! holds itself, say) pack as nil; functions and userdata pack as nil.

use mlua::{Lua, MultiValue, Table, Value};

/// Table depth packed before the rest packs as nil.
pub const MAX_NESTING: usize = 16;

/// Values one call returns at most (each is a slot of the interpreter's
/// stack).
const MAX_RESULTS: usize = 4096;

fn fail(text: &str) -> mlua::Error {
    mlua::Error::RuntimeError(text.into())
}

pub fn library(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set(
        "pack",
        lua.create_function(|lua, args: MultiValue| {
            if args.is_empty() {
                return Err(fail("MessagePack pack needs input."));
            }
            let mut out = Vec::new();
            for v in args.iter() {
                pack(v, 0, &mut out)?;
            }
            lua.create_string(out)
        })?,
    )?;
    t.raw_set(
        "unpack",
        lua.create_function(|lua, s: mlua::String| {
            let b = s.as_bytes();
            let mut at = 0;
            let mut out = MultiValue::new();
            while at < b.len() {
                if out.len() == MAX_RESULTS {
                    return Err(fail("too many objects to unpack at once"));
                }
                out.push_back(unpack(lua, &b, &mut at)?);
            }
            Ok(out)
        })?,
    )?;
    t.raw_set(
        "unpack_one",
        lua.create_function(|lua, (s, offset): (mlua::String, Option<i64>)| {
            limited(lua, &s.as_bytes(), 1, offset.unwrap_or(0))
        })?,
    )?;
    t.raw_set(
        "unpack_limit",
        lua.create_function(
            |lua, (s, limit, offset): (mlua::String, i64, Option<i64>)| {
                limited(lua, &s.as_bytes(), limit, offset.unwrap_or(0))
            },
        )?,
    )?;
    Ok(t)
}

/// Up to `limit` objects (0: all) from `offset`: the next offset (-1 at
/// the end), then the objects.
fn limited(lua: &Lua, b: &[u8], limit: i64, offset: i64) -> mlua::Result<MultiValue> {
    if offset < 0 || limit < 0 {
        return Err(fail("Invalid request to unpack with offset or limit."));
    }
    let mut at = offset as usize;
    if at > b.len() {
        return Err(fail("Start offset greater than input length."));
    }
    let mut objs = Vec::new();
    while at < b.len() && (limit == 0 || (objs.len() as i64) < limit) {
        if objs.len() == MAX_RESULTS {
            return Err(fail("too many objects to unpack at once"));
        }
        objs.push(unpack(lua, b, &mut at)?);
    }
    let next = if at >= b.len() { -1 } else { at as i64 };
    let mut out = MultiValue::new();
    out.push_back(Value::Number(next as f64));
    out.extend(objs);
    Ok(out)
}

fn pack(v: &Value, level: usize, out: &mut Vec<u8>) -> mlua::Result<()> {
    match v {
        Value::Nil => out.push(0xc0),
        Value::Boolean(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        Value::Integer(n) => int(*n, out),
        Value::Number(f) => number(*f, out),
        Value::String(s) => string(&s.as_bytes(), out),
        Value::Table(_) if level >= MAX_NESTING => out.push(0xc0),
        Value::Table(t) => table(t, level, out)?,
        _ => out.push(0xc0),
    }
    Ok(())
}

fn number(f: f64, out: &mut Vec<u8>) {
    if f.is_finite() && f == f.trunc() && f.abs() < 9.2e18 {
        int(f as i64, out);
    } else if f64::from(f as f32) == f || f.is_nan() {
        out.push(0xca);
        out.extend_from_slice(&(f as f32).to_be_bytes());
    } else {
        out.push(0xcb);
        out.extend_from_slice(&f.to_be_bytes());
    }
}

fn int(n: i64, out: &mut Vec<u8>) {
    if n >= 0 {
        match n {
            0..=127 => out.push(n as u8),
            128..=0xff => out.extend_from_slice(&[0xcc, n as u8]),
            0x100..=0xffff => {
                out.push(0xcd);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            }
            0x1_0000..=0xffff_ffff => {
                out.push(0xce);
                out.extend_from_slice(&(n as u32).to_be_bytes());
            }
            _ => {
                out.push(0xcf);
                out.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
    } else if n >= -32 {
        out.push(n as i8 as u8);
    } else if n >= -128 {
        out.extend_from_slice(&[0xd0, n as i8 as u8]);
    } else if n >= -32768 {
        out.push(0xd1);
        out.extend_from_slice(&(n as i16).to_be_bytes());
    } else if n >= -2_147_483_648 {
        out.push(0xd2);
        out.extend_from_slice(&(n as i32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn string(b: &[u8], out: &mut Vec<u8>) {
    let n = b.len();
    if n < 32 {
        out.push(0xa0 | n as u8);
    } else if n <= 0xff {
        out.extend_from_slice(&[0xd9, n as u8]);
    } else if n <= 0xffff {
        out.push(0xda);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
    out.extend_from_slice(b);
}

fn header(n: usize, fix: u8, w16: u8, w32: u8, out: &mut Vec<u8>) {
    if n < 16 {
        out.push(fix | n as u8);
    } else if n <= 0xffff {
        out.push(w16);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(w32);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

fn table(t: &Table, level: usize, out: &mut Vec<u8>) -> mlua::Result<()> {
    // Two walks, holding one pair at a time: the interpreter has room
    // for only a few thousand references from outside at once.
    let mut count = 0usize;
    let mut max = 0.0f64;
    let mut array = true;
    for p in t.clone().pairs::<Value, Value>() {
        let (k, _) = p?;
        count += 1;
        let n = match k {
            Value::Integer(n) => n as f64,
            Value::Number(f) => f,
            _ => {
                array = false;
                continue;
            }
        };
        max = max.max(n);
        array &= n >= 1.0 && n == n.trunc();
    }
    if array && max as usize == count {
        header(count, 0x90, 0xdc, 0xdd, out);
        for i in 1..=count {
            pack(&t.raw_get::<Value>(i)?, level + 1, out)?;
        }
    } else {
        header(count, 0x80, 0xde, 0xdf, out);
        for p in t.clone().pairs::<Value, Value>() {
            let (k, v) = p?;
            pack(&k, level + 1, out)?;
            pack(&v, level + 1, out)?;
        }
    }
    Ok(())
}

fn take<'b>(b: &'b [u8], at: &mut usize, n: usize) -> mlua::Result<&'b [u8]> {
    let end = at
        .checked_add(n)
        .filter(|&e| e <= b.len())
        .ok_or_else(|| fail("Missing bytes in input."))?;
    let s = &b[*at..end];
    *at = end;
    Ok(s)
}

fn be(b: &[u8]) -> u64 {
    b.iter().fold(0, |acc, &x| acc << 8 | u64::from(x))
}

fn unpack(lua: &Lua, b: &[u8], at: &mut usize) -> mlua::Result<Value> {
    let tag = take(b, at, 1)?[0];
    let num = |x: f64| Ok(Value::Number(x));
    match tag {
        0x00..=0x7f => num(f64::from(tag)),
        0xe0..=0xff => num(f64::from(tag as i8)),
        0x80..=0x8f => map(lua, b, at, usize::from(tag & 0x0f)),
        0x90..=0x9f => array(lua, b, at, usize::from(tag & 0x0f)),
        0xa0..=0xbf => str_of(lua, b, at, usize::from(tag & 0x1f)),
        0xc0 => Ok(Value::Nil),
        0xc2 => Ok(Value::Boolean(false)),
        0xc3 => Ok(Value::Boolean(true)),
        0xca => num(f64::from(f32::from_bits(be(take(b, at, 4)?) as u32))),
        0xcb => num(f64::from_bits(be(take(b, at, 8)?))),
        0xcc => num(be(take(b, at, 1)?) as f64),
        0xcd => num(be(take(b, at, 2)?) as f64),
        0xce => num(be(take(b, at, 4)?) as f64),
        0xcf => num(be(take(b, at, 8)?) as f64),
        0xd0 => num(f64::from(be(take(b, at, 1)?) as u8 as i8)),
        0xd1 => num(f64::from(be(take(b, at, 2)?) as u16 as i16)),
        0xd2 => num(f64::from(be(take(b, at, 4)?) as u32 as i32)),
        0xd3 => num(be(take(b, at, 8)?) as i64 as f64),
        0xc4 | 0xd9 => {
            let n = be(take(b, at, 1)?) as usize;
            str_of(lua, b, at, n)
        }
        0xc5 | 0xda => {
            let n = be(take(b, at, 2)?) as usize;
            str_of(lua, b, at, n)
        }
        0xc6 | 0xdb => {
            let n = be(take(b, at, 4)?) as usize;
            str_of(lua, b, at, n)
        }
        0xdc => {
            let n = be(take(b, at, 2)?) as usize;
            array(lua, b, at, n)
        }
        0xdd => {
            let n = be(take(b, at, 4)?) as usize;
            array(lua, b, at, n)
        }
        0xde => {
            let n = be(take(b, at, 2)?) as usize;
            map(lua, b, at, n)
        }
        0xdf => {
            let n = be(take(b, at, 4)?) as usize;
            map(lua, b, at, n)
        }
        _ => Err(fail("Bad data format in input.")),
    }
}

fn str_of(lua: &Lua, b: &[u8], at: &mut usize, n: usize) -> mlua::Result<Value> {
    Ok(Value::String(lua.create_string(take(b, at, n)?)?))
}

fn array(lua: &Lua, b: &[u8], at: &mut usize, n: usize) -> mlua::Result<Value> {
    // A count the input cannot hold is refused before any table is sized
    // by it.
    if n > b.len() - *at {
        return Err(fail("Missing bytes in input."));
    }
    let t = lua.create_table_with_capacity(n, 0)?;
    for i in 1..=n {
        t.raw_set(i, unpack(lua, b, at)?)?;
    }
    Ok(Value::Table(t))
}

fn map(lua: &Lua, b: &[u8], at: &mut usize, n: usize) -> mlua::Result<Value> {
    if n > (b.len() - *at) / 2 {
        return Err(fail("Missing bytes in input."));
    }
    let t = lua.create_table_with_capacity(0, n)?;
    for _ in 0..n {
        let k = unpack(lua, b, at)?;
        let v = unpack(lua, b, at)?;
        if k != Value::Nil {
            t.raw_set(k, v)?;
        }
    }
    Ok(Value::Table(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(lua: &Lua, code: &str) -> String {
        let s: mlua::String = lua.load(code).eval().unwrap();
        s.as_bytes().iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn packs_as_lua_cmsgpack_and_round_trips() {
        let lua = Lua::new();
        lua.globals()
            .set("cmsgpack", library(&lua).unwrap())
            .unwrap();
        assert_eq!(hex(&lua, "return cmsgpack.pack(0.1)"), "cb3fb999999999999a");
        assert_eq!(
            hex(&lua, "return cmsgpack.pack(-1099511627776)"),
            "d3ffffff0000000000"
        );
        assert_eq!(hex(&lua, "return cmsgpack.pack({1,2,3})"), "93010203");
        assert_eq!(hex(&lua, "return cmsgpack.pack(1.5)"), "ca3fc00000");
        let ok: bool = lua
            .load(
                "local t = {a={1,2,{b='x'}}, n=-3147483648, s=string.rep('y', 300)}
                 local r = cmsgpack.unpack(cmsgpack.pack(t))
                 local off, one = cmsgpack.unpack_one(cmsgpack.pack(1, 'z'), 0)
                 return r.a[3].b == 'x' and r.n == -3147483648 and #r.s == 300
                    and off == 1 and one == 1",
            )
            .eval()
            .unwrap();
        assert!(ok);
        for bad in [
            "return cmsgpack.unpack('\\220\\255\\255')",
            "return cmsgpack.unpack('\\193')",
        ] {
            assert!(lua.load(bad).exec().is_err(), "{bad}");
        }
    }
}
