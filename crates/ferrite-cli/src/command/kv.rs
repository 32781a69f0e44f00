//! `ferrite kv put|get|del|scan|load`: key-value access to a store
//! directory.
//!
//! Keys and values are taken as UTF-8 text, or as hex with `--hex`; output
//! prints printable bytes as text and the rest escaped (`\t`, `\n`,
//! `\\`, `\xNN`, ...), one `KEY<TAB>VALUE` line per pair. `load` reads
//! that same form back, so `scan --all` of one store piped into `load` of
//! another copies it, whichever engines the two use.

use std::io::{BufRead, Write};
use std::ops::{Bound, ControlFlow};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use ferrite::{
    Config, EngineKind, KeyRange, Keyspace, KeyspaceBatch, Options, Store, SyncMode, WalRecovery,
    WriteBatch,
};

#[derive(Args, Clone)]
pub struct StoreArgs {
    /// Engine to create the store with (see `ferrite engines`). An existing
    /// store opens with the engine that made it, which this must match if
    /// given.
    #[arg(long)]
    engine: Option<EngineKind>,
    /// Store directory.
    #[arg(long)]
    path: PathBuf,
    /// Durability: always, never or batched:<ms>.
    #[arg(long, default_value = "always", value_parser = parse_sync)]
    sync: SyncMode,
    /// Keys and values are hex strings.
    #[arg(long)]
    hex: bool,
    /// Open a store whose write-ahead log is damaged by cutting the log
    /// off at the damage: the writes logged after it are lost. Without
    /// it, such a store is refused and left as it is.
    #[arg(long)]
    salvage_wal: bool,
    /// The named keyspace to work in (created by `put` and `load` when
    /// new); the store's default key space without it.
    #[arg(long)]
    keyspace: Option<String>,
}

#[derive(Subcommand)]
pub enum KvOp {
    /// Insert or replace a value.
    Put {
        #[command(flatten)]
        store: StoreArgs,
        key: String,
        value: String,
    },
    /// Print the value of a key.
    Get {
        #[command(flatten)]
        store: StoreArgs,
        key: String,
    },
    /// Delete a key.
    Del {
        #[command(flatten)]
        store: StoreArgs,
        key: String,
    },
    /// Print pairs in key order from `--from` (inclusive) to `--to` (exclusive).
    Scan {
        #[command(flatten)]
        store: StoreArgs,
        #[arg(long)]
        from: Option<String>,
        #[arg(long)]
        to: Option<String>,
        /// Most pairs printed.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Print every pair in the range, whatever `--limit` says.
        #[arg(long)]
        all: bool,
    },
    /// Put every `KEY<TAB>VALUE` line of a file, or of standard input, in
    /// the form `scan` prints (or hex with `--hex`), a batch at a time.
    Load {
        #[command(flatten)]
        store: StoreArgs,
        /// File to read; standard input if absent.
        input: Option<PathBuf>,
        /// Pairs per atomic write batch.
        #[arg(long, default_value_t = 1000)]
        batch: usize,
    },
    /// Drop a named keyspace and everything in it (its keys are removed
    /// in the background; the command waits for that).
    DropKeyspace {
        #[command(flatten)]
        store: StoreArgs,
        name: String,
    },
}

pub fn parse_sync(s: &str) -> Result<SyncMode, String> {
    SyncMode::parse(s).map_err(|e| e.to_string())
}

fn decode(s: &str, hex: bool) -> Result<Vec<u8>> {
    if !hex {
        return Ok(s.as_bytes().to_vec());
    }
    if !s.len().is_multiple_of(2) {
        anyhow::bail!("hex string {s:?} has an odd number of digits");
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            s.get(i..i + 2)
                .and_then(|d| u8::from_str_radix(d, 16).ok())
                .with_context(|| format!("{s:?} is not hex"))
        })
        .collect()
}

fn show(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string()
}

/// The bytes `show` printed as `s`.
fn unescape(s: &str) -> Result<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        if c != b'\\' {
            out.push(c);
            i += 1;
            continue;
        }
        let byte = match b.get(i + 1) {
            Some(b't') => b'\t',
            Some(b'r') => b'\r',
            Some(b'n') => b'\n',
            Some(&e @ (b'\\' | b'\'' | b'"')) => e,
            Some(b'x') => {
                let digits = s.get(i + 2..i + 4).context("\\x wants two hex digits")?;
                i += 2;
                u8::from_str_radix(digits, 16)
                    .with_context(|| format!("\\x{digits} is not a hex byte"))?
            }
            Some(&e) => bail!("unknown escape \\{}", char::from(e)),
            None => bail!("a line ends in a lone backslash"),
        };
        out.push(byte);
        i += 2;
    }
    Ok(out)
}

/// Puts the pairs of `lines` into `db`, `batch` to a write batch, and
/// syncs. A line that is not a pair stops the load with an error naming
/// it, once every pair before it is stored. Returns how many pairs it put.
fn load(
    db: &Store,
    ks: Option<&Keyspace<'_>>,
    lines: impl BufRead,
    hex: bool,
    batch: usize,
) -> Result<u64> {
    let column = |s: &str| if hex { decode(s, true) } else { unescape(s) };
    let pair = |line: &str| -> Result<(Vec<u8>, Vec<u8>)> {
        let (k, v) = line
            .split_once('\t')
            .context("no tab between key and value")?;
        Ok((column(k)?, column(v)?))
    };
    let mut b = WriteBatch::new();
    let mut pairs = 0u64;
    let mut stopped = None;
    for (n, line) in lines.lines().enumerate() {
        let parsed = line
            .context("reading the input")
            .and_then(|line| match line.is_empty() {
                true => Ok(None),
                false => pair(&line).map(Some),
            });
        let put = parsed.and_then(|p| match p {
            Some((k, v)) => Ok(match ks {
                Some(ks) => b.put_in(ks, &k, &v),
                None => b.put(&k, &v),
            }
            .map(|_| 1)?),
            None => Ok(0),
        });
        match put {
            Ok(added) => pairs += added,
            Err(e) => {
                stopped = Some((n + 1, e));
                break;
            }
        }
        if b.len() >= batch.max(1) {
            db.write(&b)?;
            b = WriteBatch::new();
        }
    }
    if !b.is_empty() {
        db.write(&b)?;
    }
    db.sync()?;
    match stopped {
        Some((line, e)) => bail!("line {line}: {e:#} (the {pairs} pairs before it are stored)"),
        None => Ok(pairs),
    }
}

fn open(store: &StoreArgs) -> Result<Store> {
    let opts = Options::default()
        .sync(store.sync)
        .wal_recovery(wal_recovery(store.salvage_wal));
    let opened = match store.engine {
        Some(engine) => Config::builder(engine).options(opts).open(&store.path),
        None => ferrite::open_existing(&store.path, &opts),
    };
    opened.map_err(|e| {
        let hint = match (&e, store.engine) {
            (ferrite::Error::NotAStore { .. }, None) => " (give --engine to create a store there)",
            _ => salvage_hint(&e),
        };
        let what = store.engine.map(|e| format!(" as {e}")).unwrap_or_default();
        anyhow::Error::new(e).context(format!("opening {}{what}{hint}", store.path.display()))
    })
}

/// A hint for an error opening a store or index: how to salvage a damaged
/// write-ahead log.
pub fn salvage_hint(e: &ferrite::Error) -> &'static str {
    match e {
        ferrite::Error::Corruption { location, .. }
            if location.to_ascii_lowercase().contains("wal") =>
        {
            " (--salvage-wal opens it as it was before the damage, dropping the writes logged \
             after it)"
        }
        _ => "",
    }
}

/// The recovery `--salvage-wal` asks for.
pub fn wal_recovery(salvage: bool) -> WalRecovery {
    if salvage {
        WalRecovery::TruncateAtDamage
    } else {
        WalRecovery::Refuse
    }
}

/// The keyspace `--keyspace` names: created when `create`, else it must
/// exist.
fn keyspace<'s>(db: &'s Store, store: &StoreArgs, create: bool) -> Result<Option<Keyspace<'s>>> {
    let Some(name) = &store.keyspace else {
        return Ok(None);
    };
    if create {
        return Ok(Some(db.keyspace(name)?));
    }
    match db.existing_keyspace(name) {
        Some(ks) => Ok(Some(ks)),
        None => bail!(
            "{} has no keyspace {name:?} (it has: {})",
            store.path.display(),
            db.keyspaces().join(", ")
        ),
    }
}

pub fn run(op: KvOp) -> Result<()> {
    match op {
        KvOp::Put { store, key, value } => {
            let db = open(&store)?;
            let (key, value) = (decode(&key, store.hex)?, decode(&value, store.hex)?);
            match keyspace(&db, &store, true)? {
                Some(ks) => ks.put(key, value)?,
                None => db.put(key, value)?,
            }
            db.close()?;
        }
        KvOp::Get { store, key } => {
            let db = open(&store)?;
            let key = decode(&key, store.hex)?;
            let value = match keyspace(&db, &store, false)? {
                Some(ks) => ks.get(key)?,
                None => db.get(key)?,
            };
            match value {
                Some(v) => println!("{}", show(&v)),
                None => {
                    eprintln!("not found");
                    std::process::exit(1);
                }
            }
        }
        KvOp::Del { store, key } => {
            let db = open(&store)?;
            let key = decode(&key, store.hex)?;
            match keyspace(&db, &store, false)? {
                Some(ks) => ks.delete(key)?,
                None => db.delete(key)?,
            }
            db.close()?;
        }
        KvOp::DropKeyspace { store, name } => {
            let db = open(&store)?;
            if !db.drop_keyspace(&name)? {
                bail!("{} has no keyspace {name:?}", store.path.display());
            }
            db.wait_for_dropped_keyspaces();
            db.close()?;
        }
        KvOp::Scan {
            store,
            from,
            to,
            limit,
            all,
        } => {
            let db = open(&store)?;
            let from = from.map(|f| decode(&f, store.hex)).transpose()?;
            let to = to.map(|t| decode(&t, store.hex)).transpose()?;
            let range = KeyRange {
                start: from.as_deref().map_or(Bound::Unbounded, Bound::Included),
                end: to.as_deref().map_or(Bound::Unbounded, Bound::Excluded),
            };
            let mut left = if all { usize::MAX } else { limit };
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            let mut failed = None;
            let ks = keyspace(&db, &store, false)?;
            let scan = |visit: &mut ferrite::ScanVisitor<'_>| match &ks {
                Some(ks) => ks.scan(range, visit),
                None => db.scan(range, visit),
            };
            scan(&mut |k, v| {
                if left == 0 {
                    return ControlFlow::Break(());
                }
                left -= 1;
                match writeln!(out, "{}\t{}", k.escape_ascii(), v.escape_ascii()) {
                    Ok(()) => ControlFlow::Continue(()),
                    Err(e) => {
                        failed = Some(e);
                        ControlFlow::Break(())
                    }
                }
            })?;
            if let Some(e) = failed {
                return Err(e).context("writing the pairs");
            }
            out.flush().context("writing the pairs")?;
        }
        KvOp::Load {
            store,
            input,
            batch,
        } => {
            let db = open(&store)?;
            let ks = keyspace(&db, &store, true)?;
            let pairs = match &input {
                Some(path) => {
                    let file = std::fs::File::open(path)
                        .with_context(|| format!("opening {}", path.display()))?;
                    load(
                        &db,
                        ks.as_ref(),
                        std::io::BufReader::new(file),
                        store.hex,
                        batch,
                    )?
                }
                None => load(&db, ks.as_ref(), std::io::stdin().lock(), store.hex, batch)?,
            };
            db.close()?;
            eprintln!("loaded {pairs} pairs");
        }
    }
    Ok(())
}
