//! # ferrite-bench: the benchmark harness
//!
//! Every performance number ferrite claims comes out of this crate.
//!
//! - [`workload`], [`distribution`], [`keyset`]: YCSB A–F and custom mixes,
//!   uniform / zipfian / latest / hotspot requests, generated and real keys.
//! - [`adapter`]: ferrite engines and the baselines (RocksDB, LMDB, redb,
//!   fjall, BTreeMap) behind the same `KvStore` API.
//! - [`runner`]: load and run phases with latency histograms.
//! - [`plan`]: a side-by-side comparison of several stores, alternating
//!   between them so machine drift cancels out.
//! - [`report`]: JSON (stable schema), Markdown, console tables, SVG plots.
//! - [`repro`]: the registry of paper experiments behind `ferrite repro`.
//! - [`provenance`]: commit, date, machine and command of every result.
//! - [`disk_peak`], [`user_data`]: a store directory's peak bytes while a
//!   phase runs, and the user data its loader put in it, for bytes per
//!   user byte.

pub mod adapter;
pub mod counting_alloc;
pub mod disk_peak;
pub mod distribution;
pub mod error;
pub mod keyset;
pub mod memory_cgroup;
pub mod plan;
pub mod process;
pub mod provenance;
pub mod range_index;
pub mod report;
pub mod repro;
pub mod runner;
pub mod user_data;
pub mod workload;

pub use error::{BenchError, Result};
