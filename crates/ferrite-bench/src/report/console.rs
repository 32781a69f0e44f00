//! Console tables.

use super::BenchReport;
use crate::workload::OpKind;

/// Prints throughput and main-operation latency per workload and store.
pub fn print_console(r: &BenchReport) {
    let s = &r.setup;
    println!(
        "{} records, keys {}, values {}, cache {} B per store, {} thread(s), sync {}",
        s.records, s.keys, s.values, s.cache_bytes, s.threads, s.sync
    );
    println!(
        "{:<10} {:<10} {:>12} {:>10} {:>10} {:>10} {:>12} {:>12}",
        "workload", "store", "kops/s", "p50 µs", "p99 µs", "p99.9 µs", "dev rd B/op", "dev wr B/op"
    );
    for w in r.workloads() {
        for row in r.results.iter().filter(|x| x.workload == w) {
            let main = [
                OpKind::Read,
                OpKind::Scan,
                OpKind::ReverseScan,
                OpKind::DeleteRange,
                OpKind::Update,
                OpKind::Insert,
                OpKind::ReadModifyWrite,
            ]
            .into_iter()
            .find_map(|k| row.latency_of(k));
            let (p50, p99, p999) = main.map_or((f64::NAN, f64::NAN, f64::NAN), |l| {
                (l.summary.p50_us, l.summary.p99_us, l.summary.p999_us)
            });
            println!(
                "{:<10} {:<10} {:>12.1} {:>10.1} {:>10.1} {:>10.1} {:>12.0} {:>12.0}",
                w,
                row.store,
                row.ops_per_sec / 1000.0,
                p50,
                p99,
                p999,
                row.device_read_bytes_per_op,
                row.device_write_bytes_per_op
            );
        }
    }
}
