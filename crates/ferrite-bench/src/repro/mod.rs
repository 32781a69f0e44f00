//! Paper reproductions: the registry behind `ferrite repro`.
//!
//! Each [`Experiment`] runs at a [`Scale`] and returns metrics; the paper's
//! claims are stated as targets on those metrics (`"<= 0.65"`) and judged
//! here, never by the experiment itself. At smoke scale (what CI runs, to
//! keep every experiment building and running) no claim is judged.

/// An experiment's claims, a line each, and the struct of figures they
/// are judged on:
///
/// ```text
/// claims! {
///     struct Claims {
///         speedup >= 1.5, "what the paper reports";
///     }
/// }
/// ```
///
/// makes `Claims` with one [`driver::Figure`] field per claim (`speedup`),
/// which the experiment's metrics set. Code that sets a figure no claim
/// names does not compile, so a misspelt name is an error rather than a
/// claim left unmeasured; a claim's name set as an ordinary figure is
/// refused when the run's figures are gathered. The comparison is one of
/// `<=`, `>=`, `==`, `<`, `>` against a number (see [`judge`]).
macro_rules! claims {
    (struct $name:ident { $($metric:ident $op:tt $bound:literal, $paper:expr;)* }) => {
        #[derive(Debug, Clone, Copy, PartialEq)]
        pub struct $name {
            $($metric: $crate::repro::driver::Figure,)*
        }

        impl Default for $name {
            fn default() -> Self {
                Self {
                    $($metric: $crate::repro::driver::Figure::named(stringify!($metric)),)*
                }
            }
        }

        impl $crate::repro::ClaimFigures for $name {
            const SPECS: &'static [$crate::repro::ClaimSpec] = &[$($crate::repro::ClaimSpec::new(
                stringify!($metric),
                concat!(stringify!($op), " ", stringify!($bound)),
                $paper,
            )),*];

            fn figures(&self) -> Vec<$crate::repro::driver::Figure> {
                vec![$(self.$metric),*]
            }
        }
    };
}

/// Says how far a run has got, on stderr, when `ctx` shows progress:
/// `progress!(ctx, "zkv: {w}")`.
macro_rules! progress {
    ($ctx:expr, $($arg:tt)*) => {
        if $ctx.show_progress {
            eprintln!($($arg)*);
        }
    };
}

/// An experiment's sizes, a row per field with its value at each scale:
/// `records: u64 = (5_000, 1_000_000, 10_000_000),` for smoke, default
/// and full. Makes the struct and its [`SizeTable`]: the driver picks the
/// sizes at the run's scale, hands them to the experiment, and writes them
/// to the run's JSON; `repro list` prints the table as written.
macro_rules! sizes {
    ($(#[$meta:meta])* struct $name:ident {
        $($(#[$fmeta:meta])* $field:ident: $ty:ty = ($smoke:expr, $default:expr, $full:expr $(,)?),)*
    }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
        pub struct $name {
            $($(#[$fmeta])* $field: $ty,)*
        }

        impl $crate::repro::SizeTable for $name {
            fn at(scale: $crate::repro::Scale) -> Self {
                Self {
                    $($field: scale.pick($smoke, $default, $full),)*
                }
            }

            const ROWS: &'static [$crate::repro::SizeRow] = &[$($crate::repro::SizeRow {
                name: stringify!($field),
                at: [stringify!($smoke), stringify!($default), stringify!($full)],
            }),*];
        }
    };
}

mod baselines;
mod btree;
mod checkpoint;
pub mod driver;
mod expiry;
mod keyspaces;
mod rask;
mod replication;
mod resp;
mod serve;
mod shortcut;
mod swiftkv;
mod transactions;
mod turboindex;
mod valkey_suite;
mod volume;
mod zkv;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{BenchError, Result};
use crate::provenance::{Machine, Provenance};

/// How big a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scale {
    /// Seconds; for CI. Claims are not judged.
    Smoke,
    /// At most about ten minutes here; where claims are judged.
    Default,
    /// As large as this machine allows.
    Full,
}

impl Scale {
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "smoke" => Ok(Scale::Smoke),
            "default" => Ok(Scale::Default),
            "full" => Ok(Scale::Full),
            _ => Err(BenchError::Config(format!(
                "scale {s:?}: expected smoke, default or full"
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Scale::Smoke => "smoke",
            Scale::Default => "default",
            Scale::Full => "full",
        }
    }

    /// The value for this scale.
    pub fn pick<T>(self, smoke: T, default: T, full: T) -> T {
        match self {
            Scale::Smoke => smoke,
            Scale::Default => default,
            Scale::Full => full,
        }
    }
}

/// An experiment's sizes (a `sizes!` table): its values at a scale, and
/// the table as written.
pub trait SizeTable: Copy + Serialize {
    /// The sizes at `scale`.
    fn at(scale: Scale) -> Self;
    /// Each field with its smoke, default and full value, as written.
    const ROWS: &'static [SizeRow];
}

/// One row of an experiment's sizes: a field and its value, as written,
/// at smoke, default and full scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizeRow {
    pub name: &'static str,
    pub at: [&'static str; 3],
}

/// A claim as an experiment states it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimSpec {
    /// The metric the claim is about.
    pub metric: &'static str,
    /// What the paper reports.
    pub paper: &'static str,
    /// A comparison such as `<= 0.65` or `>= 1.0`.
    pub target: &'static str,
}

impl ClaimSpec {
    /// The claim that `metric` meets `target`, where the paper reports `paper`.
    pub const fn new(metric: &'static str, target: &'static str, paper: &'static str) -> Self {
        Self {
            metric,
            paper,
            target,
        }
    }
}

/// An experiment's claims with the figures they are judged on (made by
/// `claims!`).
pub trait ClaimFigures: Default {
    /// The claims, one per figure, in the order written.
    const SPECS: &'static [ClaimSpec];
    /// Every figure, measured or not.
    fn figures(&self) -> Vec<driver::Figure>;
}

/// No claims: an experiment that reports figures without judging them.
#[derive(Debug, Default)]
pub struct NoClaims;

impl ClaimFigures for NoClaims {
    const SPECS: &'static [ClaimSpec] = &[];

    fn figures(&self) -> Vec<driver::Figure> {
        Vec::new()
    }
}

/// A claim with its measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    pub name: String,
    pub paper: String,
    pub target: String,
    pub measured: Option<f64>,
    /// `None` when not judged (smoke scale, or the metric is missing).
    pub holds: Option<bool>,
}

/// Judges `value` against a target such as `<= 0.65`.
pub fn judge(target: &str, value: f64) -> Option<bool> {
    let t = target.trim();
    let (op, rest) = ["<=", ">=", "==", "<", ">"]
        .iter()
        .find_map(|op| t.strip_prefix(op).map(|r| (*op, r)))?;
    let bound: f64 = rest.trim().parse().ok()?;
    if !value.is_finite() {
        return Some(false);
    }
    Some(match op {
        "<=" => value <= bound,
        ">=" => value >= bound,
        "<" => value < bound,
        ">" => value > bound,
        _ => (value - bound).abs() < 1e-9,
    })
}

/// Where and how an experiment runs.
#[derive(Debug, Clone)]
pub struct ReproContext {
    pub scale: Scale,
    /// Where Markdown and plots go (`docs/results` for published results).
    pub out_dir: Option<PathBuf>,
    /// Scratch space for stores.
    pub work_dir: PathBuf,
    /// The shared real data (`../shared/data`).
    pub data_dir: PathBuf,
    /// The project's own real key sets (`data/keys`, made by
    /// `scripts/make-keys.sh`).
    pub keys_dir: PathBuf,
    /// Recorded block-map operation streams (`--ops`), for `rask`.
    pub map_ops: Vec<PathBuf>,
    /// Where `volume` records its RASK map's operations, per phase.
    pub record_map_ops: Option<PathBuf>,
    /// Table block compression of the LSM stores an experiment opens and
    /// of the peers that have it (the engine's default, lz4, unless
    /// `--compression` says otherwise).
    pub compression: crate::adapter::Compression,
    pub show_progress: bool,
}

impl ReproContext {
    /// Every real key set (SOSD `*.u64` file) in `data_dir/keys` and
    /// `keys_dir`, named by the file name's first `_`-separated word
    /// (`geolite2_ipv4_starts.u64` is `geolite2`), in name order. Missing
    /// folders give none.
    pub fn real_key_sets(&self) -> Vec<(String, PathBuf)> {
        let mut sets = std::collections::BTreeMap::new();
        for dir in [self.data_dir.join("keys"), self.keys_dir.clone()] {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for path in entries.flatten().map(|e| e.path()) {
                if path.extension().is_some_and(|e| e == "u64") {
                    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("keys");
                    let name = stem.split('_').next().unwrap_or(stem).to_string();
                    sets.entry(name).or_insert(path);
                }
            }
        }
        sets.into_iter().collect()
    }
}

/// What an experiment measured.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub params: serde_json::Value,
    pub metrics: BTreeMap<String, f64>,
    /// Every store's disk space, peak and at the end.
    pub space: Vec<driver::StoreSpace>,
}

/// A reproducible experiment.
pub trait Experiment: Sync {
    fn name(&self) -> &'static str;
    fn summary(&self) -> &'static str;
    fn claims(&self) -> Vec<ClaimSpec>;
    /// How big its runs are at each scale.
    fn sizes(&self) -> &'static [SizeRow];
    fn run(&self, ctx: &ReproContext) -> Result<Outcome>;
    /// Rebuilds the Markdown and plots in `ctx.out_dir` from the JSON a
    /// previous run saved there, without measuring again. Returns false if
    /// the experiment cannot.
    fn rerender(&self, _ctx: &ReproContext) -> Result<bool> {
        Ok(false)
    }
}

/// Every registered experiment.
pub fn registry() -> Vec<Box<dyn Experiment>> {
    vec![
        Box::new(driver::Driven(baselines::Baselines)),
        Box::new(driver::Driven(btree::BtreeRepro)),
        Box::new(driver::Driven(checkpoint::CheckpointRepro)),
        Box::new(driver::Driven(keyspaces::KeyspacesRepro)),
        Box::new(driver::Driven(rask::RaskRepro)),
        Box::new(driver::Driven(replication::ReplicationRepro)),
        Box::new(driver::Driven(serve::ServeRepro)),
        Box::new(driver::Driven(shortcut::ShortcutRepro)),
        Box::new(driver::Driven(swiftkv::SwiftRepro)),
        Box::new(driver::Driven(transactions::TransactionsRepro)),
        Box::new(driver::Driven(turboindex::TurboRepro)),
        Box::new(driver::Driven(volume::VolumeRepro)),
        Box::new(driver::Driven(zkv::ZkvRepro)),
    ]
}

/// Looks an experiment up by name.
pub fn find(name: &str) -> Result<Box<dyn Experiment>> {
    registry()
        .into_iter()
        .find(|e| e.name() == name)
        .ok_or_else(|| {
            let names: Vec<_> = registry().iter().map(|e| e.name()).collect();
            BenchError::Config(format!(
                "no experiment {name:?}; experiments: {}",
                names.join(", ")
            ))
        })
}

/// The JSON every reproduction writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReproReport {
    pub experiment: String,
    pub scale: Scale,
    pub commit: String,
    pub date: String,
    pub profile: String,
    pub command: String,
    pub machine: Machine,
    pub params: serde_json::Value,
    pub metrics: BTreeMap<String, f64>,
    pub claims: Vec<Claim>,
    /// Every store's disk space, peak and at the end (absent in reports
    /// from before it was measured).
    #[serde(default)]
    pub space: Vec<driver::StoreSpace>,
}

/// Runs an experiment and judges its claims.
pub fn run(exp: &dyn Experiment, ctx: &ReproContext) -> Result<ReproReport> {
    let outcome = exp.run(ctx)?;
    let claims = exp
        .claims()
        .into_iter()
        .map(|c| {
            let measured = outcome.metrics.get(c.metric).copied();
            let holds = match (ctx.scale, measured) {
                (Scale::Smoke, _) | (_, None) => None,
                (_, Some(v)) => judge(c.target, v),
            };
            Claim {
                name: c.metric.into(),
                paper: c.paper.into(),
                target: c.target.into(),
                measured,
                holds,
            }
        })
        .collect();
    let p = Provenance::capture();
    Ok(ReproReport {
        experiment: exp.name().into(),
        scale: ctx.scale,
        commit: p.commit,
        date: p.date,
        profile: p.profile,
        command: p.command,
        machine: p.machine,
        params: outcome.params,
        metrics: outcome.metrics,
        claims,
        space: outcome.space,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_judged() {
        assert_eq!(judge("<= 0.65", 0.6), Some(true));
        assert_eq!(judge("<= 0.65", 0.7), Some(false));
        assert_eq!(judge(">= 1.0", 1.0), Some(true));
        assert_eq!(judge("> 1", 1.0), Some(false));
        assert_eq!(judge(">= 1", f64::NAN), Some(false));
        assert_eq!(judge("about 3", 3.0), None);
    }

    #[test]
    fn registry_names_are_unique() {
        let names: Vec<_> = registry().iter().map(|e| e.name()).collect();
        let mut dedup = names.clone();
        dedup.dedup();
        assert_eq!(names, dedup);
        assert!(find("baselines").is_ok());
        assert!(find("nope").is_err());
    }

    #[test]
    fn a_sizes_table_gives_each_scale_its_column_and_lists_itself() {
        sizes! {
            struct Demo {
                /// Rows loaded.
                records: u64 = (10, 1 << 10, 1 << 20),
                pair: (u32, u32) = ((1, 2), (3, 4), (5, 6)),
            }
        }
        assert_eq!(Demo::at(Scale::Smoke).records, 10);
        assert_eq!(Demo::at(Scale::Default).records, 1024);
        assert_eq!(Demo::at(Scale::Full).pair, (5, 6));
        assert_eq!(Demo::ROWS.len(), 2);
        assert_eq!(Demo::ROWS[0].name, "records");
        assert_eq!(Demo::ROWS[0].at, ["10", "1 << 10", "1 << 20"]);
        for e in registry() {
            assert!(!e.sizes().is_empty(), "{} declares no sizes", e.name());
        }
    }

    #[test]
    fn every_claim_states_a_target_that_can_be_judged() {
        const PAPER: &str = "a paper's figure";
        claims! {
            struct Written {
                speedup >= 1.5, "1.5-2x";
                p99_ratio <= 0.60, PAPER;
                lost == 0, "(correctness)";
            }
        }
        let written = Written::SPECS;
        assert_eq!(written[0], ClaimSpec::new("speedup", ">= 1.5", "1.5-2x"));
        assert_eq!(written[1].target, "<= 0.60");
        assert_eq!(written[1].paper, PAPER);
        assert_eq!(judge(written[2].target, 0.0), Some(true));
        let mut figures = Written::default();
        figures.p99_ratio.set(0.5);
        let names: Vec<_> = figures.figures().iter().map(|f| f.name()).collect();
        assert_eq!(names, ["speedup", "p99_ratio", "lost"]);
        assert_eq!(figures.figures()[1].value(), Some(0.5));
        assert_eq!(figures.figures()[0].value(), None);
        for e in registry() {
            for c in e.claims() {
                assert!(judge(c.target, 0.0).is_some(), "{}: {}", e.name(), c.metric);
            }
        }
    }
}
