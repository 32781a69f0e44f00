//! `ferrite kv put|get|del|scan`: key-value access to a store directory.
//!
//! Keys and values are taken as UTF-8 text, or as hex with `--hex`; output
//! prints printable bytes as text and the rest escaped.

use std::ops::{Bound, ControlFlow};
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use ferrite::{EngineKind, KeyRange, KvStore, Options, SyncMode};

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
        #[arg(long, default_value_t = 100)]
        limit: usize,
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

fn open(store: &StoreArgs) -> Result<Box<dyn KvStore>> {
    let opts = Options {
        sync: store.sync,
        ..Options::default()
    };
    match store.engine {
        Some(engine) => ferrite::open(&store.path, engine, &opts)
            .with_context(|| format!("opening {} as {engine}", store.path.display())),
        None => ferrite::open_existing(&store.path, &opts).with_context(|| {
            format!(
                "opening {} (give --engine to create a store there)",
                store.path.display()
            )
        }),
    }
}

pub fn run(op: KvOp) -> Result<()> {
    match op {
        KvOp::Put { store, key, value } => {
            let db = open(&store)?;
            db.put(&decode(&key, store.hex)?, &decode(&value, store.hex)?)?;
            db.sync()?;
        }
        KvOp::Get { store, key } => {
            let db = open(&store)?;
            match db.get(&decode(&key, store.hex)?)? {
                Some(v) => println!("{}", show(&v)),
                None => {
                    eprintln!("not found");
                    std::process::exit(1);
                }
            }
        }
        KvOp::Del { store, key } => {
            let db = open(&store)?;
            db.delete(&decode(&key, store.hex)?)?;
            db.sync()?;
        }
        KvOp::Scan {
            store,
            from,
            to,
            limit,
        } => {
            let db = open(&store)?;
            let from = from.map(|f| decode(&f, store.hex)).transpose()?;
            let to = to.map(|t| decode(&t, store.hex)).transpose()?;
            let range = KeyRange {
                start: from.as_deref().map_or(Bound::Unbounded, Bound::Included),
                end: to.as_deref().map_or(Bound::Unbounded, Bound::Excluded),
            };
            let mut left = limit;
            db.scan(range, &mut |k, v| {
                if left == 0 {
                    return ControlFlow::Break(());
                }
                left -= 1;
                println!("{}\t{}", show(k), show(v));
                ControlFlow::Continue(())
            })?;
        }
    }
    Ok(())
}
