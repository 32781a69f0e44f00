//! Markdown reports for `docs/results/`.

use std::fmt::Write;

use super::BenchReport;
use crate::workload::OpKind;

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

/// Renders a report: provenance, setup, stores and their configurations,
/// load times, throughput, latency percentiles and device I/O per operation.
pub fn to_markdown(r: &BenchReport, title: &str) -> String {
    let mut md = String::new();
    let p = &r.provenance;
    let s = &r.setup;
    let _ = writeln!(md, "## {title}\n");
    let _ = writeln!(
        md,
        "- command: `{}`\n- commit `{}`, {}, {} build\n- machine: {} cores ({}), {} GiB RAM, kernel {}, stores on {}",
        p.command, p.commit, p.date, p.profile, p.machine.cores, p.machine.cpu, p.machine.memory_gib, p.machine.kernel, s.device
    );
    let _ = writeln!(
        md,
        "- data: {} records, keys {}, values {} ({}); cache budget {} per store; {} client thread(s); \
         {} measured ops per run after {} warm-up ops; median of {} alternating repeats; durability `{}` for every store\n",
        s.records,
        s.keys,
        s.values,
        mib(s.data_bytes),
        mib(s.cache_bytes),
        s.threads,
        s.ops,
        s.warmup_ops,
        s.repeats,
        s.sync
    );
    let _ = writeln!(
        md,
        "| store | cache budget | O_DIRECT | durability | notes |\n|---|---|---|---|---|"
    );
    for t in &r.stores {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} |",
            t.name,
            mib(t.cache_bytes),
            if t.o_direct { "yes" } else { "no" },
            t.durability,
            t.notes
        );
    }
    let _ = writeln!(md, "\n**Load** (batches of 1000):\n\n| store | seconds | kops/s | on disk |\n|---|---|---|---|");
    for l in &r.loads {
        let _ = writeln!(
            md,
            "| {} | {:.2} | {:.1} | {} |",
            l.store,
            l.seconds,
            l.ops_per_sec / 1000.0,
            mib(l.disk_bytes)
        );
    }
    let stores: Vec<&str> = r.stores.iter().map(|t| t.name.as_str()).collect();
    let _ = writeln!(md, "\n**Throughput** (kops/s, median of repeats):\n");
    let _ = writeln!(md, "| workload | {} |", stores.join(" | "));
    let _ = writeln!(md, "|---|{}", "---|".repeat(stores.len()));
    for w in r.workloads() {
        let cells: Vec<String> = stores
            .iter()
            .map(|st| {
                r.row(st, &w)
                    .map_or("–".into(), |x| format!("{:.1}", x.ops_per_sec / 1000.0))
            })
            .collect();
        let _ = writeln!(md, "| {w} | {} |", cells.join(" | "));
    }
    let _ = writeln!(
        md,
        "\n**Latency** (µs) and device I/O per operation:\n\n| workload | store | op | p50 | p95 | p99 | p99.9 | max | dev read B/op | dev write B/op | peak RSS |\n|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for w in r.workloads() {
        for row in r.results.iter().filter(|x| x.workload == w) {
            for l in &row.latency {
                if l.op == OpKind::Insert && row.latency.len() > 1 && l.count < 10 {
                    continue;
                }
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0} | {:.0} | {:.0} | {} |",
                    w,
                    row.store,
                    l.op.name(),
                    l.p50_us,
                    l.p95_us,
                    l.p99_us,
                    l.p999_us,
                    l.max_us,
                    row.device_read_bytes_per_op,
                    row.device_write_bytes_per_op,
                    mib(row.peak_rss_bytes)
                );
            }
        }
    }
    md
}
