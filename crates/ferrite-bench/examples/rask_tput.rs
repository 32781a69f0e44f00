use ferrite_bench::range_index::{self, RangeOp};
use ferrite_bench::trace;
use std::time::Instant;
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let name = args.get(1).cloned().unwrap_or("rask".into());
    let tr = args.get(2).cloned().unwrap_or("tectonic".into());
    let reps: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(3000);
    let reqs = if tr == "cloudphysics" {
        trace::parse_cloudphysics(std::path::Path::new(
            "/work/shared/data/traces/cloudphysics.csv",
        ))
        .expect("t")
    } else {
        trace::parse_tectonic(std::path::Path::new(
            "/work/shared/data/traces/tectonic_chunks_1.csv",
        ))
        .expect("t")
    };
    let raw = range_index::ops_from_trace(&reqs);
    let ops = range_index::compact_writes(&raw, 128);
    let mut out = Vec::new();
    let mut times = Vec::new();
    for _ in 0..reps {
        let ix = range_index::make(&name).expect("ix");
        let t0 = Instant::now();
        for op in &ops {
            match *op {
                RangeOp::Put(r, v) => ix.put(r, v),
                RangeOp::Delete(r) => ix.delete(r),
                RangeOp::Get(r) => {
                    out.clear();
                    ix.get(r, &mut out);
                }
            }
        }
        times.push(t0.elapsed().as_secs_f64());
        drop(ix);
    }
    times.sort_by(|a, b| a.partial_cmp(b).expect("cmp"));
    println!(
        "{name} {tr}: median {:.3} Mops/s",
        ops.len() as f64 / times[times.len() / 2] / 1e6
    );
}
