//! Key-space commands: deleting, testing, renaming, copying and moving
//! keys, iterating them, counting and flushing databases. Renaming a
//! collection within a database moves its metadata record only (its
//! elements stay under their version); copying, or moving it to another
//! database, copies its elements.

use std::ops::ControlFlow;

use rand::Rng;

use super::args::{int, is, parse_int};
use super::scan::{self, db_scope};
use super::{fail, syntax_error, CmdResult, Ctx, Fail};
use crate::model::{Body, Found, Meta, DATABASES};
use crate::reply::Reply;
use crate::request::Args;

/// `KEYS` answers at most this many keys; past it, `SCAN` is the way.
pub const KEYS_LIMIT: usize = 1_000_000;

/// Databases a key of RANDOMKEY is drawn from by reading them whole.
const RANDOM_SCAN_LIMIT: u64 = 1024;

pub fn del(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let mut n = 0;
    for k in &a[1..] {
        let mut f = ctx.tx.lookup(ctx.db(), k)?;
        if ctx.tx.remove(&mut f)? {
            ctx.tx.notify('g', "del", f.db, k);
            n += 1;
        }
    }
    Ok(Reply::Int(n))
}

pub fn exists(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let mut n = 0;
    for k in &a[1..] {
        n += ctx.tx.lookup(ctx.db(), k)?.exists() as i64;
    }
    Ok(Reply::Int(n))
}

pub fn type_of(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let f = ctx.tx.lookup(ctx.db(), a[1])?;
    Ok(Reply::Status(
        f.live().map_or("none", |m| m.kind().name()).into(),
    ))
}

fn rename_generic(ctx: &mut Ctx<'_, '_>, a: &Args, nx: bool) -> CmdResult {
    let db = ctx.db();
    let mut src = ctx.tx.lookup(db, a[1])?;
    let Some(meta) = src.live().cloned() else {
        return Err(fail("no such key"));
    };
    if a[1] == a[2] {
        return Ok(if nx { Reply::Int(0) } else { Reply::ok() });
    }
    let mut dst = ctx.tx.lookup(db, a[2])?;
    if dst.exists() {
        if nx {
            return Ok(Reply::Int(0));
        }
        ctx.tx.notify('g', "del", db, a[2]);
    }
    // The destination takes the record as it is, version and all; the
    // source lets go of it without giving the elements to the sweeper.
    ctx.tx.set(&mut dst, Some(meta))?;
    ctx.tx.detach(&mut src)?;
    ctx.tx.notify('g', "rename_from", db, a[1]);
    ctx.tx.notify('g', "rename_to", db, a[2]);
    Ok(if nx { Reply::Int(1) } else { Reply::ok() })
}

pub fn rename(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    rename_generic(ctx, a, false)
}

pub fn renamenx(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    rename_generic(ctx, a, true)
}

fn db_index(b: &[u8]) -> Result<u8, Fail> {
    let n = int(b)?;
    if !(0..DATABASES as i64).contains(&n) {
        return Err(fail("DB index is out of range"));
    }
    Ok(n as u8)
}

/// Copies what `src` holds into `dst` (a fresh version for a
/// collection), with its expiry.
fn copy_into(
    ctx: &mut Ctx<'_, '_>,
    src: &Found,
    dst: &mut Found,
    keep_version: bool,
) -> Result<(), Fail> {
    let Some(mut meta) = src.live().cloned() else {
        return Ok(());
    };
    if let Some(c) = meta.coll().copied() {
        let version = if keep_version {
            c.version
        } else {
            ctx.tx.new_version()?
        };
        ctx.tx.copy_elements(src.slot, &c, dst.slot, version)?;
        if let Some(m) = meta.coll_mut() {
            m.version = version;
        }
    }
    ctx.tx.set(dst, Some(meta))?;
    Ok(())
}

/// `COPY source destination [DB db] [REPLACE]`.
pub fn copy(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let mut to_db = ctx.db();
    let mut replace = false;
    let mut j = 3;
    while j < a.len() {
        if is(a[j], "REPLACE") {
            replace = true;
        } else if is(a[j], "DB") && j + 1 < a.len() {
            to_db = db_index(a[j + 1])?;
            j += 1;
        } else {
            return Err(syntax_error());
        }
        j += 1;
    }
    if to_db == ctx.db() && a[1] == a[2] {
        return Err(fail("source and destination objects are the same"));
    }
    let src = ctx.tx.lookup(ctx.db(), a[1])?;
    if !src.exists() {
        return Ok(Reply::Int(0));
    }
    let mut dst = ctx.tx.lookup(to_db, a[2])?;
    if dst.exists() {
        if !replace {
            return Ok(Reply::Int(0));
        }
        ctx.tx.notify('g', "del", to_db, a[2]);
    }
    copy_into(ctx, &src, &mut dst, false)?;
    ctx.tx.notify('g', "copy_to", to_db, a[2]);
    Ok(Reply::Int(1))
}

pub fn move_key(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let to_db = match parse_int(a[2]) {
        Some(n) if (0..DATABASES as i64).contains(&n) => n as u8,
        Some(_) => return Err(fail("DB index is out of range")),
        None => return Err(super::args::not_an_integer()),
    };
    let from_db = ctx.db();
    if to_db == from_db {
        return Err(fail("source and destination objects are the same"));
    }
    let mut src = ctx.tx.lookup(from_db, a[1])?;
    if !src.exists() {
        return Ok(Reply::Int(0));
    }
    let mut dst = ctx.tx.lookup(to_db, a[1])?;
    if dst.exists() {
        return Ok(Reply::Int(0));
    }
    // Versions are unique across slots too: the copy keeps its version
    // under the other slot, and the source's elements go to the sweeper.
    copy_into(ctx, &src, &mut dst, true)?;
    ctx.tx.set(&mut src, None)?;
    ctx.tx.notify('g', "move_from", from_db, a[1]);
    ctx.tx.notify('g', "move_to", to_db, a[1]);
    Ok(Reply::Int(1))
}

pub fn randomkey(ctx: &mut Ctx<'_, '_>, _: &Args) -> CmdResult {
    let db = ctx.db();
    let (n, _) = ctx.tx.db_size(db);
    if n == 0 {
        return Ok(Reply::Null);
    }
    let mut rng = rand::thread_rng();
    if n <= RANDOM_SCAN_LIMIT {
        let mut keys = Vec::new();
        ctx.tx.scan_keys(db, b"", None, &mut |k, _| {
            keys.push(k.to_vec());
            ControlFlow::Continue(())
        })?;
        if keys.is_empty() {
            return Ok(Reply::Null);
        }
        let i = rng.gen_range(0..keys.len());
        return Ok(Reply::Bulk(keys.swap_remove(i)));
    }
    // A large database: seek to a random point and take the next live
    // key, wrapping around (keys after long gaps are likelier).
    for _ in 0..8 {
        let at: [u8; 8] = rng.gen();
        for from in [Some(&at[..]), None] {
            let mut got = None;
            ctx.tx.scan_keys(db, b"", from, &mut |k, _| {
                got = Some(k.to_vec());
                ControlFlow::Break(())
            })?;
            if let Some(k) = got {
                return Ok(Reply::Bulk(k));
            }
        }
    }
    Ok(Reply::Null)
}

/// The names `OBJECT ENCODING` answers, each the name of what the
/// record holds: `int` for an integer string, `raw` for a string of
/// bytes, `listpack` for a hash packed in its metadata record or a list
/// whose items are one record (Redis's listpack layout), `hashtable` for
/// a hash or set whose elements are
/// records placed by the hash of their member (the ordered store used as
/// a hash table: a member is found by its hash, and they lie in hash
/// order), `records` for a sorted set or list (one record per element
/// in member or position order, and a score index).
pub fn encoding_name(m: &Meta) -> &'static str {
    match &m.body {
        Body::Int(_) => "int",
        Body::String(_) => "raw",
        Body::PackedHash(_) => "listpack",
        Body::Coll(c) if c.packed => "listpack",
        Body::Coll(c) if crate::model::layout::hashed(c.kind) => "hashtable",
        Body::Coll(_) => "records",
    }
}

/// `OBJECT ENCODING|REFCOUNT|IDLETIME|FREQ|HELP`.
pub fn object(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let sub = a[1].to_ascii_uppercase();
    if sub == b"HELP" && a.len() == 2 {
        return Ok(Reply::Array(
            [
                "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "ENCODING <key>",
                "    Return the kind of internal representation used in order to store the value",
                "    associated with a <key>: 'int' or 'raw' for strings, 'listpack' for small",
                "    hashes and lists, 'hashtable' for other hashes and sets, 'records' for",
                "    sorted sets and other lists.",
                "REFCOUNT <key>",
                "    Return the number of references of the value associated with the specified",
                "    <key> (always 1: values are not shared).",
                "HELP",
                "    Print this help.",
            ]
            .iter()
            .map(|s| Reply::Status((*s).into()))
            .collect(),
        ));
    }
    if a.len() != 3 {
        return Err(fail(format!(
            "unknown subcommand or wrong number of arguments for '{}'. Try OBJECT HELP.",
            String::from_utf8_lossy(a[1])
        )));
    }
    let f = ctx.tx.lookup(ctx.db(), a[2])?;
    let Some(m) = f.live() else {
        return Ok(Reply::Null);
    };
    match sub.as_slice() {
        b"ENCODING" => Ok(Reply::bulk(encoding_name(m))),
        b"REFCOUNT" => Ok(Reply::Int(1)),
        b"IDLETIME" | b"FREQ" => Err(fail(
            "this server does not track access times or frequencies",
        )),
        _ => Err(fail(format!(
            "unknown subcommand '{}'. Try OBJECT HELP.",
            String::from_utf8_lossy(a[1])
        ))),
    }
}

/// `SCAN cursor [MATCH pattern] [COUNT n] [TYPE t]`.
pub fn scan(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let o = scan::options(&a[2..], &["TYPE"])?;
    let db = ctx.db();
    let scope = db_scope(db);
    let from = scan::resume(ctx, a[1], &scope)?;
    let mut keys = Vec::new();
    let mut next = None;
    let mut seen = 0;
    ctx.tx
        .scan_keys(db, &o.prefix(), from.as_deref(), &mut |k, m| {
            if seen == o.count {
                next = Some(k.to_vec());
                return ControlFlow::Break(());
            }
            seen += 1;
            if o.kind.is_none_or(|t| t == m.kind()) && o.matches(k) {
                keys.push(Reply::Bulk(k.to_vec()));
            }
            ControlFlow::Continue(())
        })?;
    Ok(scan::reply(ctx, scope, next, keys))
}

pub fn keys(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let pattern = &a[1];
    let mut out = Vec::new();
    let mut over = false;
    let prefix = crate::glob::literal_prefix(pattern);
    ctx.tx.scan_keys(ctx.db(), &prefix, None, &mut |k, _| {
        if crate::glob::matches(pattern, k) {
            if out.len() == KEYS_LIMIT {
                over = true;
                return ControlFlow::Break(());
            }
            out.push(Reply::Bulk(k.to_vec()));
        }
        ControlFlow::Continue(())
    })?;
    if over {
        return Err(fail(format!(
            "KEYS would answer more than {KEYS_LIMIT} keys; iterate with SCAN instead"
        )));
    }
    Ok(Reply::Array(out))
}

/// Keys in the session's database, expired ones not yet removed
/// included, as Redis counts them.
pub fn dbsize(ctx: &mut Ctx<'_, '_>, _: &Args) -> CmdResult {
    Ok(Reply::Int(ctx.tx.db_size(ctx.db()).0 as i64))
}

fn flush_mode(a: &Args) -> Result<(), Fail> {
    match a.get(1) {
        None => Ok(()),
        Some(m) if a.len() == 2 && (is(m, "ASYNC") || is(m, "SYNC")) => Ok(()),
        Some(_) => Err(syntax_error()),
    }
}

/// Touches the watched keys of `db` that hold a value now or will once
/// `db` holds what `other` holds (`SWAPDB`); with `other` `None`, once
/// `db` is empty (a flush).
fn touch_watched(ctx: &mut Ctx<'_, '_>, db: u8, other: Option<u8>) -> Result<(), Fail> {
    for k in ctx.shared.ks.watches().watched_in(db) {
        let here = ctx.tx.lookup(db, &k)?.exists();
        let there = match other {
            Some(o) => ctx.tx.lookup(o, &k)?.exists(),
            None => false,
        };
        if here || there {
            ctx.tx.touch(db, &k, there);
        }
    }
    Ok(())
}

fn flush(ctx: &mut Ctx<'_, '_>, dbs: std::ops::Range<u8>) -> Result<(), Fail> {
    for db in dbs {
        touch_watched(ctx, db, None)?;
        ctx.tx.clear_db(db)?;
    }
    Ok(())
}

pub fn flushdb(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    flush_mode(a)?;
    let db = ctx.db();
    flush(ctx, db..db + 1)?;
    Ok(Reply::ok())
}

pub fn flushall(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    flush_mode(a)?;
    flush(ctx, 0..DATABASES)?;
    Ok(Reply::ok())
}

pub fn swapdb(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let first = parse_int(a[1]).ok_or_else(|| fail("invalid first DB index"))?;
    let second = parse_int(a[2]).ok_or_else(|| fail("invalid second DB index"))?;
    let range = 0..DATABASES as i64;
    if !range.contains(&first) || !range.contains(&second) {
        return Err(fail("DB index is out of range"));
    }
    let (x, y) = (first as u8, second as u8);
    if x != y {
        touch_watched(ctx, x, Some(y))?;
        touch_watched(ctx, y, Some(x))?;
        ctx.tx.swap_dbs(x, y);
        super::blocking::wake_swapped(ctx, &[x, y])?;
    }
    Ok(Reply::ok())
}
