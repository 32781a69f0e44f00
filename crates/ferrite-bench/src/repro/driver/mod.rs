//! The experiment driver: what every paper experiment shares, in one
//! place, so an experiment's own file holds only its variants, its
//! workloads, its measurements and its claims.
//!
//! | file | owns |
//! |---|---|
//! | `study.rs` | [`Study`]: measure → metrics → report, results saved beside the report and re-rendered from them (`--rerender`) |
//! | `device.rs` | emulated devices: a closed store's copied into memory, reads taking a fixed time |
//! | `comparison.rs` | whole stores compared through the side-by-side runner (`crate::plan`) |
//! | `alternate.rs` | variants run side by side in chunks, the first one rotating, so machine drift falls on all alike |
//! | `latency.rs` | HDR latency histograms and their percentiles |
//! | `binary.rs` | the programs an experiment runs: the `ferrite` binary, and the outside tools it needs installed |
//! | `port.rs` | loopback ports for the servers an experiment starts |
//! | `metrics.rs` | [`Metrics`]: every figure a run reports, by name; [`Figure`]: one claim's, set through its field |
//! | `report.rs` | [`Report`]: the Markdown document, its tables and its figures |
//! | `space.rs` | every store's disk space while the experiment ran and at its end |
//! | `store.rs` | fresh store directories, store errors named by variant, LSM options sized to the data |
//!
//! An experiment declares its sizes in a `sizes!` table (a row per size,
//! a column per [`super::Scale`]; the driver picks the run's column, hands
//! it to `measure` and writes it to the JSON) and its claims in a
//! `claims!` struct of typed [`Figure`]s, both macros in `repro/mod.rs`;
//! operations come from `crate::workload` and `crate::distribution`.

mod alternate;
mod binary;
mod comparison;
mod device;
mod latency;
mod metrics;
mod port;
mod report;
mod space;
mod store;
mod study;

pub use alternate::{alternate, alternate_while};
pub use binary::{ferrite_binary, have, need};
pub use comparison::{side_by_side, RunSizes};
pub use device::{fixed_reads, memory_copy};
pub use latency::{Latencies, LatencySummary, CURVE};
pub use metrics::{Figure, Metrics};
pub use port::{free_port, wait_for_port};
pub use report::{Report, Table};
pub use space::{SpaceWatch, StoreSpace};
pub use store::{fresh_dir, made_dir, open_engine, sized_lsm_options, store_err};
pub use study::{Driven, Study};
