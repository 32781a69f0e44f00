//! Comparisons of whole stores through the side-by-side runner
//! (`crate::plan`): the sizes every such experiment sets, and the plan
//! they make with them.

use ferrite::SyncMode;
use serde::{Deserialize, Serialize};

use crate::adapter::Target;
use crate::keyset::{KeySpec, ValueSpec};
use crate::plan::{BenchPlan, CacheBudget};
use crate::repro::ReproContext;
use crate::workload::Workload;

/// How long a comparison's runs are.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct RunSizes {
    pub records: u64,
    pub ops: u64,
    pub warmup: u64,
    pub repeats: usize,
}

/// A side-by-side plan: `targets` on the same records, one client
/// thread, durability `never`, O_DIRECT where a store has it, a cache of
/// `cache_of_data` × the data's bytes; loaded in key order through the
/// stores' bulk loaders when `bulk`, else in random order.
#[allow(clippy::too_many_arguments)]
pub fn side_by_side(
    ctx: &ReproContext,
    s: &RunSizes,
    targets: Vec<Target>,
    keys: KeySpec,
    values: ValueSpec,
    workloads: Vec<Workload>,
    cache_of_data: f64,
    bulk: bool,
    seed: u64,
) -> BenchPlan {
    BenchPlan {
        settle: false,
        warm_scan: false,
        at_rest: false,
        targets,
        keys,
        values,
        records: s.records,
        workloads,
        ops: s.ops,
        duration: None,
        warmup_ops: s.warmup,
        threads: 1,
        repeats: s.repeats,
        cache: CacheBudget::RatioOfData(cache_of_data),
        sync: SyncMode::Never,
        direct_io: true,
        compression: ctx.compression,
        dir: ctx.work_dir.clone(),
        seed,
        show_progress: ctx.show_progress,
        bulk_load: bulk,
    }
}
