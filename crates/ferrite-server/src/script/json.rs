//! `cjson`, the JSON library Redis gives scripts (lua-cjson's interface
//! and behaviour): `encode`, `decode`, `null`, and the settings scripts
//! may change (`encode_max_depth`, `decode_max_depth`,
//! `encode_invalid_numbers`, `encode_keep_buffer`).
//!
//! As lua-cjson: a table whose keys are all positive integers is an
//! array (an excessively sparse one is refused), any other an object
//! with string or number keys; an empty table is `{}`; `/` is escaped;
//! numbers print with 14 significant digits; JSON `null` decodes to
//! `cjson.null`. Strings are bytes: what is not valid UTF-8 passes
//! through unchanged.

use std::sync::Arc;

use mlua::{LightUserData, Lua, Table, Value};

use super::convert::number_text;
use parking_lot::Mutex;

struct Settings {
    encode_depth: usize,
    decode_depth: usize,
    invalid_numbers: bool,
}

fn null() -> Value {
    Value::LightUserData(LightUserData(std::ptr::null_mut()))
}

fn fail(text: impl Into<String>) -> mlua::Error {
    mlua::Error::RuntimeError(text.into())
}

pub fn library(lua: &Lua) -> mlua::Result<Table> {
    let settings = Arc::new(Mutex::new(Settings {
        encode_depth: 1000,
        decode_depth: 1000,
        invalid_numbers: false,
    }));
    let t = lua.create_table()?;
    t.raw_set("null", null())?;
    let s = settings.clone();
    t.raw_set(
        "encode",
        lua.create_function(move |lua, v: Value| {
            let s = s.lock();
            let mut out = Vec::new();
            encode(&v, &s, 0, &mut out)?;
            lua.create_string(out)
        })?,
    )?;
    let s = settings.clone();
    t.raw_set(
        "decode",
        lua.create_function(move |lua, text: mlua::String| {
            let depth = s.lock().decode_depth;
            let parsed: serde_json::Value = serde_json::from_slice(&text.as_bytes())
                .map_err(|e| fail(format!("Expected value but found invalid token: {e}")))?;
            decode(lua, &parsed, depth, 1)
        })?,
    )?;
    let s = settings.clone();
    t.raw_set(
        "encode_max_depth",
        lua.create_function(move |_, n: Option<usize>| {
            let mut s = s.lock();
            if let Some(n) = n {
                s.encode_depth = n.max(1);
            }
            Ok(s.encode_depth)
        })?,
    )?;
    let s = settings.clone();
    t.raw_set(
        "decode_max_depth",
        lua.create_function(move |_, n: Option<usize>| {
            let mut s = s.lock();
            if let Some(n) = n {
                s.decode_depth = n.max(1);
            }
            Ok(s.decode_depth)
        })?,
    )?;
    let s = settings;
    t.raw_set(
        "encode_invalid_numbers",
        lua.create_function(move |_, on: Option<Value>| {
            let mut s = s.lock();
            if let Some(v) = on {
                s.invalid_numbers = !matches!(v, Value::Boolean(false) | Value::Nil)
                    && !matches!(&v, Value::String(x) if x.as_bytes().as_ref() == b"off");
            }
            Ok(s.invalid_numbers)
        })?,
    )?;
    // Buffer reuse is lua-cjson's memory tuning; nothing to tune here.
    t.raw_set(
        "encode_keep_buffer",
        lua.create_function(|_, on: Option<bool>| Ok(on.unwrap_or(true)))?,
    )?;
    Ok(t)
}

fn number(f: f64, s: &Settings, out: &mut Vec<u8>) -> mlua::Result<()> {
    if !f.is_finite() {
        if !s.invalid_numbers {
            return Err(fail("Cannot serialise number: must not be NaN or Infinity"));
        }
        let text = if f.is_nan() {
            "nan"
        } else if f > 0.0 {
            "inf"
        } else {
            "-inf"
        };
        out.extend_from_slice(text.as_bytes());
        return Ok(());
    }
    out.extend_from_slice(number_text(f).as_bytes());
    Ok(())
}

fn string(b: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &c in b {
        match c {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'/' => out.extend_from_slice(b"\\/"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            c if c < 0x20 || c == 0x7f => out.extend_from_slice(format!("\\u{c:04x}").as_bytes()),
            c => out.push(c),
        }
    }
    out.push(b'"');
}

fn encode(v: &Value, s: &Settings, depth: usize, out: &mut Vec<u8>) -> mlua::Result<()> {
    match v {
        Value::Nil => out.extend_from_slice(b"null"),
        Value::LightUserData(p) if p.0.is_null() => out.extend_from_slice(b"null"),
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Integer(n) => out.extend_from_slice(n.to_string().as_bytes()),
        Value::Number(f) => number(*f, s, out)?,
        Value::String(x) => string(&x.as_bytes(), out),
        Value::Table(t) => table(t, s, depth + 1, out)?,
        other => {
            return Err(fail(format!(
                "Cannot serialise {}: type not supported",
                other.type_name()
            )))
        }
    }
    Ok(())
}

fn table(t: &Table, s: &Settings, depth: usize, out: &mut Vec<u8>) -> mlua::Result<()> {
    if depth > s.encode_depth {
        return Err(fail(format!(
            "Cannot serialise, excessive nesting ({depth})"
        )));
    }
    // Two walks, holding one pair at a time (see `msgpack.rs`).
    let mut count = 0usize;
    let mut max = 0usize;
    let mut array = true;
    for pair in t.clone().pairs::<Value, Value>() {
        let (k, _) = pair?;
        count += 1;
        match k {
            Value::Integer(n) if n >= 1 => max = max.max(n as usize),
            Value::Number(f) if f >= 1.0 && f.fract() == 0.0 => max = max.max(f as usize),
            _ => array = false,
        }
    }
    let array = array && count > 0;
    if array {
        if max > count * 2 && max > 10 {
            return Err(fail("Cannot serialise table: excessively sparse array"));
        }
        out.push(b'[');
        for i in 1..=max {
            if i > 1 {
                out.push(b',');
            }
            encode(&t.raw_get::<Value>(i)?, s, depth, out)?;
        }
        out.push(b']');
        return Ok(());
    }
    out.push(b'{');
    for (i, pair) in t.clone().pairs::<Value, Value>().enumerate() {
        let (k, v) = pair?;
        if i > 0 {
            out.push(b',');
        }
        match k {
            Value::String(x) => string(&x.as_bytes(), out),
            Value::Integer(n) => string(n.to_string().as_bytes(), out),
            Value::Number(f) => string(number_text(f).as_bytes(), out),
            other => {
                return Err(fail(format!(
                    "Cannot serialise {}: table key must be a number or string",
                    other.type_name()
                )))
            }
        }
        out.push(b':');
        encode(&v, s, depth, out)?;
    }
    out.push(b'}');
    Ok(())
}

fn decode(lua: &Lua, v: &serde_json::Value, max: usize, depth: usize) -> mlua::Result<Value> {
    use serde_json::Value as J;
    Ok(match v {
        J::Null => null(),
        J::Bool(b) => Value::Boolean(*b),
        J::Number(n) => Value::Number(n.as_f64().unwrap_or(0.0)),
        J::String(s) => Value::String(lua.create_string(s)?),
        J::Array(_) | J::Object(_) if depth > max => {
            return Err(fail(format!(
                "Found too many nested data structures ({depth})"
            )));
        }
        J::Array(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, x) in items.iter().enumerate() {
                t.raw_set(i + 1, decode(lua, x, max, depth + 1)?)?;
            }
            Value::Table(t)
        }
        J::Object(m) => {
            let t = lua.create_table_with_capacity(0, m.len())?;
            for (k, x) in m {
                t.raw_set(k.as_str(), decode(lua, x, max, depth + 1)?)?;
            }
            Value::Table(t)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lua() -> Lua {
        let lua = Lua::new();
        lua.globals().set("cjson", library(&lua).unwrap()).unwrap();
        lua
    }

    #[test]
    fn encodes_and_decodes_as_lua_cjson() {
        let lua = lua();
        let cases = [
            ("return cjson.encode({1,2,'a'})", "[1,2,\"a\"]"),
            ("return cjson.encode({})", "{}"),
            ("return cjson.encode({a='x/y'})", "{\"a\":\"x\\/y\"}"),
            ("return cjson.encode(0.1)", "0.1"),
            ("return cjson.encode(cjson.null)", "null"),
            (
                "return table.concat(cjson.decode('[0.0, -5e3, -1, 0.3e-3, 1023.2, 0e10]'), ' ')",
                "0 -5000 -1 0.0003 1023.2 0",
            ),
        ];
        for (code, want) in cases {
            let got: String = lua.load(code).eval().unwrap();
            assert_eq!(got, want, "{code}");
        }
        for bad in [
            "local t = {}; t[false] = 1; return cjson.encode(t)",
            "return cjson.encode({n=0/0})",
            "local t = {}; t[100] = 1; return cjson.encode(t)",
            "cjson.decode_max_depth(1); return cjson.decode('{\"a\":{\"b\":1}}')",
            "return cjson.decode('{bad')",
        ] {
            assert!(lua.load(bad).exec().is_err(), "{bad}");
        }
    }
}
