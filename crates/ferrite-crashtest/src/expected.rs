//! The expected state, kept beside the store (`<path>.crashtest`) after
//! every verified kill, so a run can be resumed and a failure kept. The
//! same encoding carries a power-cut guest's recovered state out of the
//! guest (`guest.rs`).
//!
//! Layout: magic `FCT1`, engine name (u16 length, bytes), seed u64, next
//! run u64, pair count u64, then per pair key and value (u32 length,
//! bytes each), all little-endian, then a CRC32C of everything before it.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::oracle::State;

const MAGIC: &[u8; 4] = b"FCT1";

pub struct Expected {
    pub engine: String,
    pub seed: u64,
    pub next_run: u64,
    pub state: State,
}

pub fn path_for(store: &Path) -> PathBuf {
    let mut p = store.as_os_str().to_owned();
    p.push(".crashtest");
    PathBuf::from(p)
}

pub fn save(path: &Path, e: &Expected) -> Result<()> {
    let b = encode(e);
    let tmp = path.with_extension("crashtest.tmp");
    std::fs::write(&tmp, &b).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("replacing {}", path.display()))?;
    Ok(())
}

pub fn encode(e: &Expected) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&(e.engine.len() as u16).to_le_bytes());
    b.extend_from_slice(e.engine.as_bytes());
    b.extend_from_slice(&e.seed.to_le_bytes());
    b.extend_from_slice(&e.next_run.to_le_bytes());
    b.extend_from_slice(&(e.state.len() as u64).to_le_bytes());
    for (k, v) in &e.state {
        for x in [k, v] {
            b.extend_from_slice(&(x.len() as u32).to_le_bytes());
            b.extend_from_slice(x);
        }
    }
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

pub fn load(path: &Path) -> Result<Option<Expected>> {
    let b = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    decode(&b)
        .map(Some)
        .with_context(|| format!("reading {}", path.display()))
}

pub fn decode(b: &[u8]) -> Result<Expected> {
    let bad = || anyhow::anyhow!("not an expected-state image");
    if b.len() < 8 || &b[..4] != MAGIC {
        return Err(bad());
    }
    let (body, crc) = b.split_at(b.len() - 4);
    if crc32c::crc32c(body).to_le_bytes() != crc {
        bail!("damaged (checksum)");
    }
    let mut at = 4;
    let mut take = |n: usize| -> Result<&[u8]> {
        let s = body.get(at..at + n).ok_or_else(bad)?;
        at += n;
        Ok(s)
    };
    let u16_ = |s: &[u8]| u16::from_le_bytes([s[0], s[1]]) as usize;
    let u32_ = |s: &[u8]| u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as usize;
    let u64_ = |s: &[u8]| u64::from_le_bytes(s.try_into().unwrap_or([0; 8]));
    let n = u16_(take(2)?);
    let engine = String::from_utf8(take(n)?.to_vec()).map_err(|_| bad())?;
    let seed = u64_(take(8)?);
    let next_run = u64_(take(8)?);
    let pairs = u64_(take(8)?);
    let mut state = State::new();
    for _ in 0..pairs {
        let kl = u32_(take(4)?);
        let k = take(kl)?.to_vec();
        let vl = u32_(take(4)?);
        let v = take(vl)?.to_vec();
        state.insert(k, v);
    }
    Ok(Expected {
        engine,
        seed,
        next_run,
        state,
    })
}
