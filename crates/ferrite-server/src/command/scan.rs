//! What `SCAN`, `HSCAN`, `SSCAN` and `ZSCAN` share: their options, and
//! cursors that name where the next call resumes (kept by the server,
//! `cursor.rs`). Every element present from the first call to the last
//! is returned at least once, in key (or member) order.

use super::args::{is, parse_int};
use super::{fail, syntax_error, Ctx, Fail};
use crate::glob;
use crate::model::Kind;
use crate::reply::Reply;

/// Elements one call returns at most, whatever `COUNT` says.
const MAX_COUNT: usize = 100_000;

/// The options of a scan.
pub struct ScanOpts {
    pub pattern: Option<Vec<u8>>,
    pub count: usize,
    pub kind: Option<Kind>,
    pub novalues: bool,
    pub noscores: bool,
}

impl ScanOpts {
    /// Whether `name` matches the `MATCH` pattern.
    pub fn matches(&self, name: &[u8]) -> bool {
        self.pattern
            .as_deref()
            .is_none_or(|p| glob::matches(p, name))
    }

    /// The literal prefix every match starts with.
    pub fn prefix(&self) -> Vec<u8> {
        self.pattern
            .as_deref()
            .map(glob::literal_prefix)
            .unwrap_or_default()
    }
}

/// Parses `[MATCH p] [COUNT n]` and the options `extra` allows (`TYPE`,
/// `NOVALUES`, `NOSCORES`) from `opts`.
pub fn options(opts: &[&[u8]], extra: &[&str]) -> Result<ScanOpts, Fail> {
    let mut o = ScanOpts {
        pattern: None,
        count: 10,
        kind: None,
        novalues: false,
        noscores: false,
    };
    let mut i = 0;
    while i < opts.len() {
        let opt = &opts[i];
        let value = opts.get(i + 1);
        if is(opt, "NOVALUES") && extra.contains(&"NOVALUES") {
            o.novalues = true;
            i += 1;
            continue;
        }
        if is(opt, "NOSCORES") && extra.contains(&"NOSCORES") {
            o.noscores = true;
            i += 1;
            continue;
        }
        let Some(value) = value else {
            return Err(syntax_error());
        };
        if is(opt, "MATCH") {
            o.pattern = Some(value.to_vec()).filter(|p| p.as_slice() != b"*");
        } else if is(opt, "COUNT") {
            o.count = match parse_int(value) {
                Some(n) if n >= 1 => (n as usize).min(MAX_COUNT),
                Some(_) => return Err(syntax_error()),
                None => return Err(super::args::not_an_integer()),
            };
        } else if is(opt, "TYPE") && extra.contains(&"TYPE") {
            o.kind = Some(Kind::from_name(value).ok_or_else(|| fail("unknown type name"))?);
        } else {
            return Err(syntax_error());
        }
        i += 2;
    }
    Ok(o)
}

/// Where a scan of `scope` given cursor argument `cursor` starts: `None`
/// from the beginning.
pub fn resume(ctx: &Ctx<'_, '_>, cursor: &[u8], scope: &[u8]) -> Result<Option<Vec<u8>>, Fail> {
    let id = std::str::from_utf8(cursor)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| fail("invalid cursor"))?;
    if id == 0 {
        return Ok(None);
    }
    ctx.shared
        .cursors
        .resume(id, scope)
        .map(Some)
        .ok_or_else(|| fail("invalid cursor"))
}

/// The reply of a scan: the next cursor (0 when done) and the elements.
pub fn reply(ctx: &Ctx<'_, '_>, scope: Vec<u8>, next: Option<Vec<u8>>, items: Vec<Reply>) -> Reply {
    let cursor = match next {
        Some(from) => ctx.shared.cursors.issue(scope, from),
        None => 0,
    };
    Reply::Array(vec![
        Reply::Bulk(cursor.to_string().into_bytes()),
        Reply::Array(items),
    ])
}

/// The scope of a scan over key `key` of database `db` (`HSCAN` and
/// kin).
pub fn key_scope(db: u8, key: &[u8]) -> Vec<u8> {
    let mut s = vec![b'E', db];
    s.extend_from_slice(key);
    s
}

/// The scope of `SCAN` over database `db`.
pub fn db_scope(db: u8) -> Vec<u8> {
    vec![b'K', db]
}
