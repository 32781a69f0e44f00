//! Lua BitOp (`bit`), the bitwise library Redis gives scripts: every
//! operand is taken modulo 2^32 as a signed 32-bit integer, every result
//! is one.

use mlua::{Lua, MultiValue, Table, Value};

/// A Lua number as BitOp normalizes it.
fn tobit(v: &Value) -> mlua::Result<i32> {
    let f = match v {
        Value::Integer(n) => return Ok(*n as i32),
        Value::Number(f) => *f,
        Value::String(s) => s
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<f64>().ok())
            .ok_or_else(|| mlua::Error::RuntimeError("bad argument (number expected)".into()))?,
        _ => {
            return Err(mlua::Error::RuntimeError(
                "bad argument (number expected)".into(),
            ))
        }
    };
    // As BitOp: add 2^52 + 2^51 and take the low 32 bits of the double.
    let b = (f + 6_755_399_441_055_744.0).to_bits();
    Ok(b as u32 as i32)
}

fn fold(args: MultiValue, op: fn(i32, i32) -> i32) -> mlua::Result<i32> {
    let mut it = args.iter();
    let first = it
        .next()
        .ok_or_else(|| mlua::Error::RuntimeError("bad argument #1 (number expected)".into()))?;
    let mut acc = tobit(first)?;
    for v in it {
        acc = op(acc, tobit(v)?);
    }
    Ok(acc)
}

pub fn library(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set("tobit", lua.create_function(|_, v: Value| tobit(&v))?)?;
    t.raw_set(
        "tohex",
        lua.create_function(|_, (v, n): (Value, Option<Value>)| {
            let x = tobit(&v)? as u32;
            let n = match n {
                Some(n) => tobit(&n)?,
                None => 8,
            };
            let upper = n < 0;
            let width = n.unsigned_abs().min(8) as usize;
            let s = format!("{x:08x}");
            let s = &s[8 - width..];
            Ok(if upper {
                s.to_uppercase()
            } else {
                s.to_string()
            })
        })?,
    )?;
    t.raw_set("bnot", lua.create_function(|_, v: Value| Ok(!tobit(&v)?))?)?;
    t.raw_set(
        "band",
        lua.create_function(|_, a: MultiValue| fold(a, |x, y| x & y))?,
    )?;
    t.raw_set(
        "bor",
        lua.create_function(|_, a: MultiValue| fold(a, |x, y| x | y))?,
    )?;
    t.raw_set(
        "bxor",
        lua.create_function(|_, a: MultiValue| fold(a, |x, y| x ^ y))?,
    )?;
    let shift = |f: fn(i32, u32) -> i32| {
        move |_: &Lua, (v, n): (Value, Value)| Ok(f(tobit(&v)?, (tobit(&n)? & 31) as u32))
    };
    t.raw_set(
        "lshift",
        lua.create_function(shift(|x, n| ((x as u32) << n) as i32))?,
    )?;
    t.raw_set(
        "rshift",
        lua.create_function(shift(|x, n| ((x as u32) >> n) as i32))?,
    )?;
    t.raw_set("arshift", lua.create_function(shift(|x, n| x >> n))?)?;
    t.raw_set(
        "rol",
        lua.create_function(shift(|x, n| (x as u32).rotate_left(n) as i32))?,
    )?;
    t.raw_set(
        "ror",
        lua.create_function(shift(|x, n| (x as u32).rotate_right(n) as i32))?,
    )?;
    t.raw_set(
        "bswap",
        lua.create_function(|_, v: Value| Ok(tobit(&v)?.swap_bytes()))?,
    )?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitop_answers_as_luabitop() {
        let lua = Lua::new();
        lua.globals().set("bit", library(&lua).unwrap()).unwrap();
        let cases = [
            ("return bit.tobit(0xffffffff)", -1.0),
            ("return bit.tobit(0xffffffff + 1)", 0.0),
            ("return bit.band(0x12345678, 0xff)", 0x78 as f64),
            ("return bit.bor(1, 2, 4)", 7.0),
            ("return bit.bxor(5, 3)", 6.0),
            ("return bit.bnot(0)", -1.0),
            ("return bit.lshift(1, 31)", i32::MIN as f64),
            ("return bit.rshift(-1, 28)", 15.0),
            ("return bit.arshift(-256, 4)", -16.0),
            ("return bit.rol(0x12345678, 12)", 0x45678123 as f64),
            ("return bit.bswap(0x12345678)", 0x78563412 as f64),
        ];
        for (code, want) in cases {
            let got: f64 = lua.load(code).eval().unwrap();
            assert_eq!(got, want, "{code}");
        }
        let hex: String = lua.load("return bit.tohex(65535, -4)").eval().unwrap();
        assert_eq!(hex, "FFFF");
        let hex: String = lua.load("return bit.tohex(-1)").eval().unwrap();
        assert_eq!(hex, "ffffffff");
    }
}
