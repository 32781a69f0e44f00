//! Markdown reports for `docs/results/`.

use std::fmt::Write;

use super::BenchReport;

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

/// Where each store's bytes are (`rows`: store and its footprint parts),
/// one column per kind any store has.
fn footprint_table<'a>(
    md: &mut String,
    when: &str,
    rows: impl Iterator<Item = (&'a str, &'a Vec<(String, u64)>)>,
) {
    let rows: Vec<_> = rows.filter(|(_, f)| !f.is_empty()).collect();
    let kinds: Vec<&str> = ferrite::SpaceKind::ALL
        .iter()
        .map(|k| k.name())
        .filter(|k| rows.iter().any(|(_, f)| f.iter().any(|(n, _)| n == k)))
        .collect();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "\n**Where the bytes are** ({when}; ferrite engines by their own account, baselines by file name):\n\n\
         | store | {} |\n|---|{}",
        kinds.join(" | "),
        "---|".repeat(kinds.len())
    );
    for (store, f) in rows {
        let cells: Vec<String> = kinds
            .iter()
            .map(|k| {
                f.iter()
                    .find(|(n, _)| n == k)
                    .map_or("–".into(), |(_, b)| mib(*b))
            })
            .collect();
        let _ = writeln!(md, "| {store} | {} |", cells.join(" | "));
    }
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
    let data = r.setup.data_bytes.max(1) as f64;
    let per_user = |b: u64| format!("{:.2}", b as f64 / data);
    let _ = writeln!(
        md,
        "\n**Load** (batches of 1000; space per user byte over the loaded data, {}; write \
         amplification: device bytes written per user byte written):\n\n\
         | store | seconds | kops/s | on disk | peak | peak / user | at rest | at rest / user | write amp |\n\
         |---|---|---|---|---|---|---|---|---|",
        mib(r.setup.data_bytes)
    );
    for l in &r.loads {
        let _ = writeln!(
            md,
            "| {} | {:.2} | {:.1} | {} | {} | {} | {} | {} | {} |",
            l.store,
            l.seconds,
            l.ops_per_sec / 1000.0,
            mib(l.disk_bytes),
            mib(l.peak_disk_bytes),
            per_user(l.peak_disk_bytes),
            l.rest_disk_bytes.map_or("–".into(), mib),
            l.rest_disk_bytes.map_or("–".into(), per_user),
            l.write_amplification()
                .map_or("–".into(), |w| format!("{w:.2}"))
        );
    }
    footprint_table(
        &mut md,
        "after the load, open",
        r.loads.iter().map(|l| (l.store.as_str(), &l.footprint)),
    );
    for w in r.workloads() {
        footprint_table(
            &mut md,
            &format!("after workload {w}, open"),
            r.results
                .iter()
                .filter(|x| x.workload == w)
                .map(|x| (x.store.as_str(), &x.footprint)),
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
        "\n**Latency** (µs, all repeats):\n\n| workload | store | op | p50 | p95 | p99 | p99.9 | max |\n|---|---|---|---|---|---|---|---|"
    );
    for w in r.workloads() {
        for row in r.results.iter().filter(|x| x.workload == w) {
            for l in &row.latency {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0} |",
                    w,
                    row.store,
                    l.op.name(),
                    l.summary.p50_us,
                    l.summary.p95_us,
                    l.summary.p99_us,
                    l.summary.p999_us,
                    l.max_us
                );
            }
        }
    }
    let _ = writeln!(
        md,
        "\n**Device I/O per operation, memory and space** (device bytes: {}; memory: as the store reports it, 0 where it cannot):\n\n\
         | workload | store | device read B/op | device write B/op | write amp | store memory | on disk after | peak | at rest after |\n|---|---|---|---|---|---|---|---|---|",
        if r.results.iter().all(|x| x.io_source == "process") {
            "the process's storage I/O from /proc/self/io, so page-cache hits count zero"
        } else {
            "the engine's own device counters for ferrite engines, /proc/self/io for the others"
        }
    );
    for w in r.workloads() {
        for row in r.results.iter().filter(|x| x.workload == w) {
            let _ = writeln!(
                md,
                "| {} | {} | {:.0} | {:.0} | {} | {} | {} | {} | {} |",
                w,
                row.store,
                row.device_read_bytes_per_op,
                row.device_write_bytes_per_op,
                row.write_amplification
                    .map_or("–".into(), |w| format!("{w:.2}")),
                mib(row.engine_memory_bytes),
                mib(row.disk_bytes),
                mib(row.peak_disk_bytes),
                row.rest_disk_bytes.map_or("–".into(), mib)
            );
        }
    }
    let peak = r
        .results
        .iter()
        .map(|x| x.peak_rss_bytes)
        .max()
        .unwrap_or(0);
    let _ = writeln!(
        md,
        "\nPeak resident memory of the whole process (every store open at once, plus the harness): {}.",
        mib(peak)
    );
    md
}
