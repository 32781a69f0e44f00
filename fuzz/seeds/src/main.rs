//! `ferrite-fuzz-seeds OUT [DATA]`: writes a seed corpus for every fuzz
//! target under `OUT/<target>/`, each input laid out the way its target
//! reads it (`fuzz/fuzz_targets/*.rs`). The seeds are real artefacts:
//! device images of stores built through the engines' own write paths
//! (B+tree with and without SHORTCUT, LSM with sparse and learned
//! indexes, ZKV on the emulated zoned device, RASK, a WAL), encoded
//! batches, identities, superblocks, NBD and RESP messages, and the first
//! lines of the shared block traces when `DATA` (the shared data folder)
//! is given. The fuzzer starts from them, so its first executions already
//! reach the checks behind the checksums.
//!
//! Output is deterministic: the same sources give the same files, so a
//! corpus directory can be regenerated instead of committed.

mod message_seeds;
mod store_images;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// A target's seeds: its name (the file in `fuzz_targets/`) and inputs.
pub struct Seeds {
    pub target: &'static str,
    pub inputs: Vec<Vec<u8>>,
}

fn write(out: &Path, seeds: &Seeds) -> std::io::Result<usize> {
    let dir = out.join(seeds.target);
    std::fs::create_dir_all(&dir)?;
    for (i, input) in seeds.inputs.iter().enumerate() {
        std::fs::write(dir.join(format!("seed-{i:03}")), input)?;
    }
    Ok(seeds.inputs.len())
}

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let Some(out) = args.next().map(PathBuf::from) else {
        eprintln!("usage: ferrite-fuzz-seeds OUT [SHARED_DATA_DIR]");
        return ExitCode::from(2);
    };
    let data = args.next().map(PathBuf::from);
    let all = match store_images::all() {
        Ok(mut s) => {
            s.extend(message_seeds::all(data.as_deref()));
            s
        }
        Err(e) => {
            eprintln!("building store images: {e}");
            return ExitCode::FAILURE;
        }
    };
    for seeds in &all {
        match write(&out, seeds) {
            Ok(n) => println!("{:<18} {n} seeds", seeds.target),
            Err(e) => {
                eprintln!("writing {}: {e}", seeds.target);
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
