//! Key sets and value sizes: the data a benchmark loads.
//!
//! Records are numbered `0..n` in insertion order; a [`KeySet`] turns a
//! record number into key bytes, so every engine in a run gets exactly the
//! same keys in the same order. Values are generated from the record number
//! and a version, so they differ between updates without any storage.

use std::path::{Path, PathBuf};

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::distribution::fnv1a64;
use crate::error::{BenchError, Result};

/// How keys are made.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum KeySpec {
    /// Record `i` has key `i` as 8 big-endian bytes (inserted in key order).
    Sequential,
    /// Record `i` has a distinct pseudo-random u64 key (8 big-endian bytes).
    UniformU64,
    /// Record `i` has a 16-byte key: its [`KeySpec::UniformU64`] key, then
    /// `i` (8 big-endian bytes each).
    Uniform16,
    /// YCSB's keys: `"user"` followed by the decimal FNV-64 hash of `i`.
    YcsbString,
    /// Keys from a SOSD-format file (u64 count, then u64 keys, little
    /// endian), inserted in a seeded random order, as 8 big-endian bytes.
    Sosd { path: PathBuf },
}

impl KeySpec {
    /// Parses `sequential`, `uniform`, `uniform16`, `ycsb`, `geolite2` (the shared real
    /// key set) or `sosd:<path>`.
    pub fn parse(s: &str, data_dir: &Path) -> Result<Self> {
        Ok(match s {
            "sequential" => KeySpec::Sequential,
            "uniform" => KeySpec::UniformU64,
            "uniform16" => KeySpec::Uniform16,
            "ycsb" => KeySpec::YcsbString,
            "geolite2" => KeySpec::Sosd {
                path: data_dir.join("keys/geolite2_ipv4_starts.u64"),
            },
            _ => match s.strip_prefix("sosd:") {
                Some(p) => KeySpec::Sosd { path: p.into() },
                None => {
                    return Err(BenchError::Config(format!(
                        "key set {s:?}: expected sequential, uniform, uniform16, ycsb, geolite2 or sosd:<path>"
                    )))
                }
            },
        })
    }

    pub fn label(&self) -> String {
        match self {
            KeySpec::Sequential => "sequential u64".into(),
            KeySpec::UniformU64 => "uniform u64".into(),
            KeySpec::Uniform16 => "uniform 16-byte".into(),
            KeySpec::YcsbString => "ycsb string".into(),
            KeySpec::Sosd { path } => format!(
                "sosd {}",
                path.file_name()
                    .map(|f| f.to_string_lossy())
                    .unwrap_or_default()
            ),
        }
    }
}

/// A bijective 64-bit mixer (the splitmix64 finalizer): distinct inputs
/// give distinct outputs, so hashed record numbers never collide.
pub fn mix64(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Reads a SOSD key file.
pub fn read_sosd(path: &Path) -> Result<Vec<u64>> {
    let bytes = std::fs::read(path).map_err(|e| BenchError::Data {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let bad = |reason: String| BenchError::Data {
        path: path.to_path_buf(),
        reason,
    };
    let count_bytes: [u8; 8] = bytes
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| bad("shorter than the 8-byte count".into()))?;
    let count = u64::from_le_bytes(count_bytes);
    let body = bytes.get(8..).unwrap_or_default();
    if body.len() as u64 != count.saturating_mul(8) {
        return Err(bad(format!(
            "header says {count} keys but the file holds {} bytes of keys",
            body.len()
        )));
    }
    Ok(body
        .chunks_exact(8)
        .filter_map(|c| c.try_into().ok().map(u64::from_le_bytes))
        .collect())
}

/// The materialised key set of one run.
#[derive(Debug, Clone)]
pub struct KeySet {
    spec: KeySpec,
    /// For SOSD sets: keys in insertion order.
    table: Vec<u64>,
}

impl KeySet {
    /// Prepares the key set; SOSD files are read and shuffled with `seed`.
    pub fn new(spec: KeySpec, seed: u64) -> Result<Self> {
        let table = match &spec {
            KeySpec::Sosd { path } => {
                let mut keys = read_sosd(path)?;
                keys.shuffle(&mut rand::rngs::SmallRng::seed_from_u64(seed));
                keys
            }
            _ => Vec::new(),
        };
        Ok(Self { spec, table })
    }

    pub fn spec(&self) -> &KeySpec {
        &self.spec
    }

    /// How many records the set can supply (`u64::MAX` for generated sets).
    pub fn capacity(&self) -> u64 {
        match self.spec {
            KeySpec::Sosd { .. } => self.table.len() as u64,
            _ => u64::MAX,
        }
    }

    /// Writes the key of record `i` into `out` (cleared first).
    pub fn key(&self, i: u64, out: &mut Vec<u8>) {
        out.clear();
        match self.spec {
            KeySpec::Sequential => out.extend_from_slice(&i.to_be_bytes()),
            KeySpec::UniformU64 => out.extend_from_slice(&mix64(i).to_be_bytes()),
            KeySpec::Uniform16 => {
                out.extend_from_slice(&mix64(i).to_be_bytes());
                out.extend_from_slice(&i.to_be_bytes());
            }
            KeySpec::YcsbString => {
                use std::io::Write;
                out.extend_from_slice(b"user");
                let _ = write!(out, "{}", fnv1a64(i));
            }
            KeySpec::Sosd { .. } => {
                let k = self.table.get(i as usize).copied().unwrap_or(u64::MAX - i);
                out.extend_from_slice(&k.to_be_bytes());
            }
        }
    }

    /// Average key length in bytes (exact for fixed-size keys, sampled for strings).
    pub fn mean_key_len(&self) -> f64 {
        let mut buf = Vec::new();
        let n = 1000u64;
        (0..n)
            .map(|i| {
                self.key(i * 7919, &mut buf);
                buf.len() as f64
            })
            .sum::<f64>()
            / n as f64
    }
}

/// Values: random bytes of a size, or records from a file.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ValueSpec {
    Fixed {
        bytes: usize,
    },
    /// Uniform in `[min, max]`, drawn per write.
    Uniform {
        min: usize,
        max: usize,
    },
    /// Real records: the paragraphs (blank-line separated) of a text file,
    /// such as Debian's package index (`records:PATH`), or whole files
    /// named one per line in a list (`files:LIST`, such as the packages'
    /// copyright texts); record `i` at a version gets one of them, picked
    /// by hashing, so what a store sees compresses as the records
    /// themselves do.
    Records(Records),
}

/// The paragraphs of one file.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Records {
    pub path: PathBuf,
    pub count: usize,
    pub mean_bytes: f64,
    #[serde(skip)]
    paragraphs: std::sync::Arc<Vec<Vec<u8>>>,
}

impl Records {
    /// Reads every file `list` names (one path per line), each a record.
    pub fn files(list: &Path) -> Result<Self> {
        let unreadable = |p: &Path, e: std::io::Error| {
            BenchError::Config(format!("values: cannot read {}: {e}", p.display()))
        };
        let names = std::fs::read_to_string(list).map_err(|e| unreadable(list, e))?;
        let mut files = Vec::new();
        for name in names.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let p = Path::new(name);
            files.push(std::fs::read(p).map_err(|e| unreadable(p, e))?);
        }
        Self::of(list, files)
    }

    fn of(path: &Path, paragraphs: Vec<Vec<u8>>) -> Result<Self> {
        if paragraphs.is_empty() {
            return Err(BenchError::Config(format!(
                "values: {} holds no records",
                path.display()
            )));
        }
        let mean_bytes =
            paragraphs.iter().map(Vec::len).sum::<usize>() as f64 / paragraphs.len() as f64;
        Ok(Self {
            path: path.to_path_buf(),
            count: paragraphs.len(),
            mean_bytes,
            paragraphs: std::sync::Arc::new(paragraphs),
        })
    }

    /// Reads `path` and splits it at blank lines.
    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read(path).map_err(|e| {
            BenchError::Config(format!("values: cannot read {}: {e}", path.display()))
        })?;
        let mut paragraphs = Vec::new();
        let mut cur: Vec<u8> = Vec::new();
        for line in text.split_inclusive(|&b| b == b'\n') {
            if line.iter().all(u8::is_ascii_whitespace) {
                if !cur.is_empty() {
                    paragraphs.push(std::mem::take(&mut cur));
                }
            } else {
                cur.extend_from_slice(line);
            }
        }
        if !cur.is_empty() {
            paragraphs.push(cur);
        }
        Self::of(path, paragraphs)
    }
}

impl ValueSpec {
    /// Parses `N`, `MIN-MAX`, `records:PATH` or `files:LIST`.
    pub fn parse(s: &str) -> Result<Self> {
        if let Some(path) = s.strip_prefix("records:") {
            return Ok(ValueSpec::Records(Records::read(Path::new(path))?));
        }
        if let Some(list) = s.strip_prefix("files:") {
            return Ok(ValueSpec::Records(Records::files(Path::new(list))?));
        }
        let bad = || {
            BenchError::Config(format!(
                "values {s:?}: expected N, MIN-MAX, records:PATH or files:LIST"
            ))
        };
        match s.split_once('-') {
            None => Ok(ValueSpec::Fixed {
                bytes: s.parse().map_err(|_| bad())?,
            }),
            Some((a, b)) => {
                let (min, max) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                if min > max {
                    return Err(bad());
                }
                Ok(ValueSpec::Uniform { min, max })
            }
        }
    }

    pub fn mean(&self) -> f64 {
        match *self {
            ValueSpec::Fixed { bytes } => bytes as f64,
            ValueSpec::Uniform { min, max } => (min + max) as f64 / 2.0,
            ValueSpec::Records(ref r) => r.mean_bytes,
        }
    }

    pub fn label(&self) -> String {
        match *self {
            ValueSpec::Fixed { bytes } => format!("{bytes} B"),
            ValueSpec::Uniform { min, max } => format!("{min}-{max} B"),
            ValueSpec::Records(ref r) => format!(
                "records of {} ({} records, mean {:.0} B)",
                r.path.display(),
                r.count,
                r.mean_bytes
            ),
        }
    }

    /// Fills `out` with the value of record `i` at `version`.
    pub fn value(&self, i: u64, version: u64, rng: &mut impl Rng, out: &mut Vec<u8>) {
        let len = match *self {
            ValueSpec::Fixed { bytes } => bytes,
            ValueSpec::Uniform { min, max } => rng.gen_range(min..=max),
            ValueSpec::Records(ref r) => {
                let pick = mix64(i ^ version.rotate_left(32)) % r.paragraphs.len() as u64;
                out.clear();
                out.extend_from_slice(&r.paragraphs[pick as usize]);
                return;
            }
        };
        pseudo_random_bytes(mix64(i ^ version.rotate_left(32)), len, out);
    }
}

/// Fills `out` with `len` bytes of the [`mix64`] chain that starts at
/// `seed`: incompressible, and the same for the same seed.
pub fn pseudo_random_bytes(seed: u64, len: usize, out: &mut Vec<u8>) {
    out.clear();
    let mut x = seed;
    while out.len() < len {
        x = mix64(x);
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_are_distinct_and_shaped() {
        let mut seen = std::collections::HashSet::new();
        let mut k = Vec::new();
        for spec in [
            KeySpec::Sequential,
            KeySpec::UniformU64,
            KeySpec::YcsbString,
        ] {
            let ks = KeySet::new(spec.clone(), 1).unwrap();
            seen.clear();
            for i in 0..100_000 {
                ks.key(i, &mut k);
                assert!(seen.insert(k.clone()), "{spec:?}: duplicate key for {i}");
            }
        }
        let ks = KeySet::new(KeySpec::YcsbString, 1).unwrap();
        ks.key(0, &mut k);
        assert!(k.starts_with(b"user") && k[4..].iter().all(u8::is_ascii_digit));
    }

    #[test]
    fn values_have_the_asked_sizes() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let mut v = Vec::new();
        ValueSpec::Fixed { bytes: 100 }.value(5, 0, &mut rng, &mut v);
        assert_eq!(v.len(), 100);
        let u = ValueSpec::parse("10-20").unwrap();
        for i in 0..1000 {
            u.value(i, 1, &mut rng, &mut v);
            assert!((10..=20).contains(&v.len()));
        }
        assert!(ValueSpec::parse("20-10").is_err());
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("records");
        std::fs::write(
            &file,
            "Package: a\nVersion: 1\n\n\nPackage: b\n \nPackage: c\n",
        )
        .unwrap();
        let r = ValueSpec::parse(&format!("records:{}", file.display())).unwrap();
        let ValueSpec::Records(rec) = &r else {
            panic!("records:PATH reads records");
        };
        assert_eq!(rec.count, 3);
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..100 {
            r.value(i, 0, &mut rng, &mut v);
            seen.insert(v.clone());
        }
        let want: std::collections::BTreeSet<Vec<u8>> = [
            b"Package: a\nVersion: 1\n".to_vec(),
            b"Package: b\n".to_vec(),
            b"Package: c\n".to_vec(),
        ]
        .into();
        assert_eq!(seen, want);
        assert!(ValueSpec::parse("records:/nonexistent/file").is_err());
        let list = dir.path().join("list");
        std::fs::write(&list, format!("{}\n\n{}\n", file.display(), list.display())).unwrap();
        let ValueSpec::Records(files) =
            ValueSpec::parse(&format!("files:{}", list.display())).unwrap()
        else {
            panic!("files:LIST reads files");
        };
        assert_eq!(files.count, 2, "one record per file named");
    }

    #[test]
    fn geolite2_keys_load_when_present() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/data/keys/geolite2_ipv4_starts.u64");
        if !path.exists() {
            eprintln!("skipping: {} is absent", path.display());
            return;
        }
        let keys = read_sosd(&path).unwrap();
        assert_eq!(keys.len(), 3_074_175);
        assert!(
            keys.windows(2).all(|w| w[0] < w[1]),
            "SOSD keys are sorted and distinct"
        );
        let ks = KeySet::new(KeySpec::Sosd { path }, 7).unwrap();
        assert_eq!(ks.capacity(), 3_074_175);
    }
}
