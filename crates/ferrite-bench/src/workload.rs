//! Workloads: the mix of operations and how records are chosen.
//!
//! YCSB's core workloads A–F with their standard parameters, plus custom
//! mixes from the command line, which may also scan backwards (`rscan`)
//! and delete ranges (`delrange`). A [`Workload`] is pure data; [`OpStream`]
//! turns it into a sequence of operations for one client thread.

use std::sync::atomic::{AtomicU64, Ordering};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::distribution::{Chooser, RequestDistribution};
use crate::error::{BenchError, Result};

/// The kind of one operation.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    Read,
    Update,
    Insert,
    Scan,
    ReadModifyWrite,
    ReverseScan,
    DeleteRange,
}

impl OpKind {
    pub const ALL: [OpKind; 7] = [
        OpKind::Read,
        OpKind::Update,
        OpKind::Insert,
        OpKind::Scan,
        OpKind::ReadModifyWrite,
        OpKind::ReverseScan,
        OpKind::DeleteRange,
    ];

    pub fn name(self) -> &'static str {
        match self {
            OpKind::Read => "read",
            OpKind::Update => "update",
            OpKind::Insert => "insert",
            OpKind::Scan => "scan",
            OpKind::ReadModifyWrite => "rmw",
            OpKind::ReverseScan => "rscan",
            OpKind::DeleteRange => "delrange",
        }
    }
}

/// An operation mix.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Workload {
    pub name: String,
    pub read: f64,
    pub update: f64,
    pub insert: f64,
    pub scan: f64,
    pub rmw: f64,
    /// Scans from a record downwards.
    pub rscan: f64,
    /// Range deletes of `delete_range_len` records from a chosen one
    /// (exactly those records when keys are sequential; a span of key
    /// space as wide otherwise).
    pub delrange: f64,
    pub distribution: RequestDistribution,
    /// Scans read a uniform number of records in `1..=max_scan_len`.
    pub max_scan_len: u64,
    pub delete_range_len: u64,
}

impl Workload {
    fn mix(name: &str, parts: [f64; 5], distribution: RequestDistribution) -> Self {
        let [read, update, insert, scan, rmw] = parts;
        Self {
            name: name.into(),
            read,
            update,
            insert,
            scan,
            rmw,
            rscan: 0.0,
            delrange: 0.0,
            distribution,
            max_scan_len: 100,
            delete_range_len: 100,
        }
    }

    /// YCSB core workload `A`..`F`.
    pub fn ycsb(letter: char) -> Option<Self> {
        use RequestDistribution::*;
        Some(match letter.to_ascii_uppercase() {
            'A' => Self::mix("A", [0.5, 0.5, 0.0, 0.0, 0.0], Zipfian),
            'B' => Self::mix("B", [0.95, 0.05, 0.0, 0.0, 0.0], Zipfian),
            'C' => Self::mix("C", [1.0, 0.0, 0.0, 0.0, 0.0], Zipfian),
            'D' => Self::mix("D", [0.95, 0.0, 0.05, 0.0, 0.0], Latest),
            'E' => Self::mix("E", [0.0, 0.0, 0.05, 0.95, 0.0], Zipfian),
            'F' => Self::mix("F", [0.5, 0.0, 0.0, 0.0, 0.5], Zipfian),
            _ => return None,
        })
    }

    /// Parses a YCSB letter (`a`..`f`) or a custom mix such as
    /// `read=0.9,insert=0.1,dist=uniform,scanlen=50` (keys `read`,
    /// `update`, `insert`, `scan`, `rmw`, `rscan`, `delrange`, `dist`,
    /// `scanlen`, `delrangelen`).
    pub fn parse(s: &str) -> Result<Self> {
        let mut chars = s.chars();
        if let (Some(c), None) = (chars.next(), chars.next()) {
            if let Some(w) = Self::ycsb(c) {
                return Ok(w);
            }
        }
        let bad = |why: String| BenchError::Config(format!("workload {s:?}: {why}"));
        let mut w = Self::mix(s, [0.0; 5], RequestDistribution::Uniform);
        for part in s.split(',') {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| bad(format!("{part:?} is not key=value")))?;
            let num = || {
                v.parse::<f64>()
                    .map_err(|_| bad(format!("{v:?} is not a number")))
            };
            match k {
                "read" => w.read = num()?,
                "update" => w.update = num()?,
                "insert" => w.insert = num()?,
                "scan" => w.scan = num()?,
                "rmw" => w.rmw = num()?,
                "rscan" => w.rscan = num()?,
                "delrange" => w.delrange = num()?,
                "delrangelen" => w.delete_range_len = num()?.max(1.0) as u64,
                "dist" => {
                    w.distribution = RequestDistribution::parse(v)
                        .ok_or_else(|| bad(format!("unknown distribution {v:?}")))?
                }
                "scanlen" => w.max_scan_len = num()?.max(1.0) as u64,
                _ => return Err(bad(format!("unknown key {k:?}"))),
            }
        }
        w.validate().map_err(bad)?;
        Ok(w)
    }

    fn parts(&self) -> [(f64, OpKind); 7] {
        [
            (self.read, OpKind::Read),
            (self.update, OpKind::Update),
            (self.insert, OpKind::Insert),
            (self.scan, OpKind::Scan),
            (self.rmw, OpKind::ReadModifyWrite),
            (self.rscan, OpKind::ReverseScan),
            (self.delrange, OpKind::DeleteRange),
        ]
    }

    fn validate(&self) -> Result<(), String> {
        let parts = self.parts().map(|(p, _)| p);
        if parts.iter().any(|p| !(p.is_finite() && *p >= 0.0)) {
            return Err("proportions must be non-negative".into());
        }
        let total: f64 = parts.iter().sum();
        if (total - 1.0).abs() > 1e-6 {
            return Err(format!("proportions sum to {total}, not 1"));
        }
        Ok(())
    }

    fn cumulative(&self) -> [(f64, OpKind); 7] {
        let mut acc = 0.0;
        let mut out = [(0.0, OpKind::Read); 7];
        for (slot, (p, k)) in out.iter_mut().zip(self.parts()) {
            acc += p;
            *slot = (acc, k);
        }
        out
    }
}

/// One generated operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Read(u64),
    Update(u64),
    /// Insert of a new record with this number.
    Insert(u64),
    Scan(u64, u64),
    ReadModifyWrite(u64),
    /// Up to this many records from the record's key downwards.
    ReverseScan(u64, u64),
    /// The records from this one, this many.
    DeleteRange(u64, u64),
}

impl Op {
    pub fn kind(&self) -> OpKind {
        match self {
            Op::Read(_) => OpKind::Read,
            Op::Update(_) => OpKind::Update,
            Op::Insert(_) => OpKind::Insert,
            Op::Scan(..) => OpKind::Scan,
            Op::ReadModifyWrite(_) => OpKind::ReadModifyWrite,
            Op::ReverseScan(..) => OpKind::ReverseScan,
            Op::DeleteRange(..) => OpKind::DeleteRange,
        }
    }
}

/// Record counters shared by the client threads of one store.
#[derive(Debug)]
pub struct RecordCounter {
    /// The next record number an insert will take.
    next: AtomicU64,
}

impl RecordCounter {
    pub fn new(loaded: u64) -> Self {
        Self {
            next: AtomicU64::new(loaded),
        }
    }

    /// Records that exist (loaded plus inserted so far).
    pub fn count(&self) -> u64 {
        self.next.load(Ordering::Acquire)
    }

    fn take(&self) -> u64 {
        self.next.fetch_add(1, Ordering::AcqRel)
    }
}

/// The operation sequence of one client thread.
pub struct OpStream<'a> {
    cumulative: [(f64, OpKind); 7],
    chooser: Box<dyn Chooser>,
    rng: SmallRng,
    records: &'a RecordCounter,
    max_scan_len: u64,
    delete_range_len: u64,
}

impl<'a> OpStream<'a> {
    pub fn new(w: &Workload, records: &'a RecordCounter, seed: u64) -> Self {
        Self {
            cumulative: w.cumulative(),
            chooser: w.distribution.chooser(records.count()),
            rng: SmallRng::seed_from_u64(seed),
            records,
            max_scan_len: w.max_scan_len.max(1),
            delete_range_len: w.delete_range_len.max(1),
        }
    }

    pub fn rng(&mut self) -> &mut SmallRng {
        &mut self.rng
    }
}

impl Iterator for OpStream<'_> {
    type Item = Op;

    fn next(&mut self) -> Option<Op> {
        let u: f64 = self.rng.gen();
        let kind = self
            .cumulative
            .iter()
            .find(|(c, _)| u < *c)
            .map_or(OpKind::Read, |&(_, k)| k);
        let count = self.records.count().max(1);
        let pick = |s: &mut Self| s.chooser.next(&mut s.rng, count);
        Some(match kind {
            OpKind::Read => Op::Read(pick(self)),
            OpKind::Update => Op::Update(pick(self)),
            OpKind::ReadModifyWrite => Op::ReadModifyWrite(pick(self)),
            OpKind::Scan => {
                let start = pick(self);
                Op::Scan(start, self.rng.gen_range(1..=self.max_scan_len))
            }
            OpKind::ReverseScan => {
                let start = pick(self);
                Op::ReverseScan(start, self.rng.gen_range(1..=self.max_scan_len))
            }
            OpKind::DeleteRange => Op::DeleteRange(pick(self), self.delete_range_len),
            OpKind::Insert => Op::Insert(self.records.take()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proportions_within_one_percent() {
        for letter in ['A', 'B', 'C', 'D', 'E', 'F'] {
            let w = Workload::ycsb(letter).unwrap();
            let counter = RecordCounter::new(100_000);
            let mut counts = std::collections::HashMap::new();
            let n = 1_000_000;
            for op in OpStream::new(&w, &counter, 9).take(n) {
                *counts.entry(op.kind()).or_insert(0usize) += 1;
            }
            for (p, k) in w.parts() {
                let got = *counts.get(&k).unwrap_or(&0) as f64 / n as f64;
                assert!((got - p).abs() < 0.01, "{letter} {k:?}: {got} vs {p}");
            }
        }
    }

    #[test]
    fn scan_lengths_are_uniform_1_to_100() {
        let w = Workload::ycsb('E').unwrap();
        let counter = RecordCounter::new(1000);
        let lens: Vec<u64> = OpStream::new(&w, &counter, 3)
            .take(1_000_000)
            .filter_map(|op| match op {
                Op::Scan(_, n) => Some(n),
                _ => None,
            })
            .collect();
        assert_eq!(lens.iter().min(), Some(&1));
        assert_eq!(lens.iter().max(), Some(&100));
        let mean = lens.iter().sum::<u64>() as f64 / lens.len() as f64;
        assert!((mean - 50.5).abs() < 0.2, "{mean}");
    }

    #[test]
    fn inserts_take_fresh_record_numbers() {
        let w = Workload::parse("insert=1").unwrap();
        let counter = RecordCounter::new(10);
        let ops: Vec<Op> = OpStream::new(&w, &counter, 1).take(3).collect();
        assert_eq!(ops, vec![Op::Insert(10), Op::Insert(11), Op::Insert(12)]);
        assert_eq!(counter.count(), 13);
    }

    #[test]
    fn custom_mixes_parse_and_validate() {
        let w = Workload::parse("read=0.9,scan=0.1,dist=hotspot,scanlen=10").unwrap();
        assert_eq!((w.read, w.scan, w.max_scan_len), (0.9, 0.1, 10));
        assert_eq!(w.distribution, RequestDistribution::Hotspot);
        assert!(Workload::parse("read=0.5").is_err());
        assert!(Workload::parse("read=0.5,write=0.5").is_err());
        assert_eq!(Workload::parse("c").unwrap().name, "C");
        let w = Workload::parse("rscan=0.5,delrange=0.5,delrangelen=1000").unwrap();
        assert_eq!((w.rscan, w.delrange, w.delete_range_len), (0.5, 0.5, 1000));
        let counter = RecordCounter::new(5000);
        let ops: Vec<Op> = OpStream::new(&w, &counter, 2).take(1000).collect();
        assert!(ops.iter().any(|o| matches!(o, Op::ReverseScan(..))));
        assert!(ops.iter().all(|o| match o {
            Op::DeleteRange(_, n) => *n == 1000,
            Op::ReverseScan(_, n) => (1..=100).contains(n),
            _ => false,
        }));
    }
}
