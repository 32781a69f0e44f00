//! Redis's conversions between replies and Lua values, both ways.
//!
//! A command's reply becomes, in Lua: an integer a number, a bulk string
//! a string, an array a table, a status `{ok=...}`, an error
//! `{err=...}`, a missing value `false` (RESP2) or `nil` (RESP3); under
//! `redis.setresp(3)` a map `{map={...}}`, a set `{set={...}}`, a double
//! `{double=n}`, a boolean a boolean. A script's result becomes, in
//! reverse: a number an integer (truncated), a string a bulk string, a
//! table with `err`/`ok`/`double`/`map`/`set` what it names, any other
//! table an array up to its first `nil`, `true` the integer 1, `false`
//! and `nil` a missing value (RESP3: booleans stay booleans).
//!
//! Invariant: a script's result is read with raw accesses only, so a
//! metatable it set cannot run code (or call the server) while the
//! result is converted; nesting deeper than [`MAX_DEPTH`] is an error,
//! not a stack overflow.

use mlua::{Lua, Table, Value};

use crate::reply::{format_score, Reply};

/// Tables nested deeper than this in a script's result are refused.
pub const MAX_DEPTH: usize = 512;

/// A reply as the script sees it.
pub fn to_lua(lua: &Lua, r: Reply, resp3: bool) -> mlua::Result<Value> {
    Ok(match r {
        Reply::Status(s) => Value::Table(field(lua, "ok", Value::String(lua.create_string(s)?))?),
        Reply::Error(e) => Value::Table(field(lua, "err", Value::String(lua.create_string(e)?))?),
        Reply::Int(n) => Value::Number(n as f64),
        Reply::Bool(b) if resp3 => Value::Boolean(b),
        Reply::Bool(b) => Value::Number(f64::from(u8::from(b))),
        Reply::Bulk(b) => Value::String(lua.create_string(b)?),
        Reply::Double(d) if resp3 => Value::Table(field(lua, "double", Value::Number(d))?),
        Reply::Double(d) => Value::String(lua.create_string(format_score(d))?),
        Reply::Null | Reply::NullArray | Reply::Nothing if resp3 => Value::Nil,
        Reply::Null | Reply::NullArray | Reply::Nothing => Value::Boolean(false),
        Reply::Array(items) | Reply::Push(items) | Reply::Several(items) => {
            Value::Table(array(lua, items, resp3)?)
        }
        Reply::Set(items) if resp3 => {
            let set = lua.create_table()?;
            for m in items {
                set.raw_set(to_lua(lua, m, resp3)?, true)?;
            }
            Value::Table(field(lua, "set", Value::Table(set))?)
        }
        Reply::Set(items) => Value::Table(array(lua, items, resp3)?),
        Reply::Map(pairs) if resp3 => {
            let map = lua.create_table()?;
            for (k, v) in pairs {
                map.raw_set(to_lua(lua, k, resp3)?, to_lua(lua, v, resp3)?)?;
            }
            Value::Table(field(lua, "map", Value::Table(map))?)
        }
        Reply::Map(pairs) => {
            let flat = pairs.into_iter().flat_map(|(k, v)| [k, v]).collect();
            Value::Table(array(lua, flat, resp3)?)
        }
        Reply::Verbatim(t) if resp3 => {
            let v = lua.create_table()?;
            v.raw_set("format", "txt")?;
            v.raw_set("string", lua.create_string(t)?)?;
            Value::Table(field(lua, "verbatim_string", Value::Table(v))?)
        }
        Reply::Verbatim(t) => Value::String(lua.create_string(t)?),
    })
}

fn field(lua: &Lua, name: &str, v: Value) -> mlua::Result<Table> {
    let t = lua.create_table_with_capacity(0, 1)?;
    t.raw_set(name, v)?;
    Ok(t)
}

fn array(lua: &Lua, items: Vec<Reply>, resp3: bool) -> mlua::Result<Table> {
    let t = lua.create_table_with_capacity(items.len(), 0)?;
    for (i, r) in items.into_iter().enumerate() {
        t.raw_set(i + 1, to_lua(lua, r, resp3)?)?;
    }
    Ok(t)
}

/// An error reply's text from what a script gave (`{err=...}`,
/// `redis.error_reply`): a leading `-` dropped, `ERR` if empty.
pub fn error_text(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    let s = s.strip_prefix('-').unwrap_or(&s).trim_end();
    if s.is_empty() {
        "ERR".into()
    } else {
        s.to_string()
    }
}

/// A script's result as the client's reply.
pub fn from_lua(v: &Value, resp3: bool) -> Reply {
    from_lua_at(v, resp3, 0)
}

fn from_lua_at(v: &Value, resp3: bool, depth: usize) -> Reply {
    if depth > MAX_DEPTH {
        return Reply::err("reached lua stack limit");
    }
    match v {
        Value::Nil => Reply::Null,
        Value::Boolean(b) if resp3 => Reply::Bool(*b),
        Value::Boolean(true) => Reply::Int(1),
        Value::Boolean(false) => Reply::Null,
        Value::Integer(n) => Reply::Int(*n),
        Value::Number(f) => Reply::Int(truncate(*f)),
        Value::String(s) => Reply::Bulk(s.as_bytes().to_vec()),
        Value::Table(t) => table(t, resp3, depth),
        _ => Reply::Null,
    }
}

/// A Lua number as Redis casts one to `long long`.
fn truncate(f: f64) -> i64 {
    if f.is_nan() {
        i64::MIN
    } else {
        f as i64
    }
}

fn table(t: &Table, resp3: bool, depth: usize) -> Reply {
    let get = |k: &str| t.raw_get::<Value>(k).unwrap_or(Value::Nil);
    if let Value::String(e) = get("err") {
        return Reply::Error(error_text(&e.as_bytes()));
    }
    if let Value::String(s) = get("ok") {
        return Reply::Status(String::from_utf8_lossy(&s.as_bytes()).into_owned());
    }
    match get("double") {
        Value::Number(d) => return Reply::Double(d),
        Value::Integer(n) => return Reply::Double(n as f64),
        _ => {}
    }
    if let Value::String(s) = get("big_number") {
        return Reply::Bulk(s.as_bytes().to_vec());
    }
    if let Value::Table(m) = get("map") {
        let mut pairs = Vec::new();
        for (k, v) in m.pairs::<Value, Value>().flatten() {
            pairs.push((
                from_lua_at(&k, resp3, depth + 1),
                from_lua_at(&v, resp3, depth + 1),
            ));
        }
        return Reply::Map(pairs);
    }
    if let Value::Table(s) = get("set") {
        let mut members = Vec::new();
        for (k, _) in s.pairs::<Value, Value>().flatten() {
            members.push(from_lua_at(&k, resp3, depth + 1));
        }
        return Reply::Set(members);
    }
    if let Value::Table(v) = get("verbatim_string") {
        if let Ok(Value::String(s)) = v.raw_get::<Value>("string") {
            return Reply::Verbatim(String::from_utf8_lossy(&s.as_bytes()).into_owned());
        }
    }
    let mut items = Vec::new();
    for i in 1.. {
        match t.raw_get::<Value>(i) {
            Ok(Value::Nil) | Err(_) => break,
            Ok(v) => items.push(from_lua_at(&v, resp3, depth + 1)),
        }
    }
    Reply::Array(items)
}

/// `%.14g`, as Lua 5.1 and lua-cjson print numbers.
pub fn number_text(f: f64) -> String {
    if f == f.trunc() && f.abs() < 1e15 {
        return format!("{}", f as i64);
    }
    let e = f.abs().log10().floor() as i32;
    if !(-5..14).contains(&e) {
        let s = format!("{f:.13e}");
        let (mant, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let mant = trim_zeros(mant);
        let exp: i32 = exp.parse().unwrap_or(0);
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mant}e{sign}{:02}", exp.abs());
    }
    let decimals = (13 - e).max(0) as usize;
    trim_zeros(&format!("{f:.decimals$}")).to_string()
}

fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}
#[cfg(test)]
mod tests {

    use super::*;

    fn eval(lua: &Lua, code: &str) -> Value {
        lua.load(code).eval().unwrap()
    }

    #[test]
    fn script_results_become_replies_as_in_redis() {
        let lua = Lua::new();
        let cases: &[(&str, Reply)] = &[
            ("return 100.5", Reply::Int(100)),
            ("return -3.9", Reply::Int(-3)),
            ("return 'hi'", Reply::bulk("hi")),
            ("return true", Reply::Int(1)),
            ("return false", Reply::Null),
            ("return nil", Reply::Null),
            ("return {ok='fine'}", Reply::Status("fine".into())),
            ("return {err='MY bad'}", Reply::Error("MY bad".into())),
            ("return {err=''}", Reply::Error("ERR".into())),
            (
                "return {1,'a',{2},nil,5}",
                Reply::Array(vec![
                    Reply::Int(1),
                    Reply::bulk("a"),
                    Reply::Array(vec![Reply::Int(2)]),
                ]),
            ),
            ("return {double=1.5}", Reply::Double(1.5)),
        ];
        for (code, want) in cases {
            assert_eq!(&from_lua(&eval(&lua, code), false), want, "{code}");
        }
        assert_eq!(
            from_lua(&eval(&lua, "return false"), true),
            Reply::Bool(false)
        );
        assert_eq!(
            from_lua(&eval(&lua, "return true"), true),
            Reply::Bool(true)
        );
    }

    #[test]
    fn a_result_with_a_metatable_runs_no_code_and_self_nesting_is_refused() {
        let lua = Lua::new();
        let v = eval(
            &lua,
            "local a = {}; setmetatable(a, {__index=function() error('ran') end}); return a",
        );
        assert_eq!(from_lua(&v, false), Reply::Array(vec![]));
        let v = eval(&lua, "local a = {}; a[1] = a; return a");
        let mut r = from_lua(&v, false);
        let mut depth = 0;
        while let Reply::Array(mut items) = r {
            r = items.remove(0);
            depth += 1;
        }
        assert!(r.is_error() && depth > MAX_DEPTH);
    }

    #[test]
    fn replies_become_lua_values_as_in_redis() {
        let lua = Lua::new();
        let check = |r: Reply, resp3: bool, code: &str| {
            let v = to_lua(&lua, r, resp3).unwrap();
            let f: mlua::Function = lua.load(code).eval().unwrap();
            let ok: bool = f.call(v).unwrap();
            assert!(ok, "{code}");
        };
        check(Reply::Int(7), false, "return function(v) return v == 7 end");
        check(
            Reply::Null,
            false,
            "return function(v) return v == false end",
        );
        check(Reply::Null, true, "return function(v) return v == nil end");
        check(
            Reply::Status("OK".into()),
            false,
            "return function(v) return v.ok == 'OK' end",
        );
        check(
            Reply::err("x"),
            false,
            "return function(v) return v.err == 'ERR x' end",
        );
        check(
            Reply::Map(vec![(Reply::bulk("a"), Reply::Int(1))]),
            false,
            "return function(v) return v[1] == 'a' and v[2] == 1 end",
        );
        check(
            Reply::Map(vec![(Reply::bulk("a"), Reply::Int(1))]),
            true,
            "return function(v) return v.map.a == 1 end",
        );
        check(
            Reply::Double(2.5),
            true,
            "return function(v) return v.double == 2.5 end",
        );
        check(
            Reply::Double(2.5),
            false,
            "return function(v) return v == '2.5' end",
        );
    }

    #[test]
    fn numbers_print_with_fourteen_digits() {
        assert_eq!(number_text(100.0), "100");
        assert_eq!(number_text(0.0003), "0.0003");
        assert_eq!(number_text(1.0 / 3.0), "0.33333333333333");
        assert_eq!(number_text(1e20), "1e+20");
        assert_eq!(number_text(-2.5e-7), "-2.5e-07");
    }
}
