//! Where a measurement came from: commit, date, machine, build profile and
//! command line. Every result file ferrite writes carries this, so a number
//! can be traced and rerun.

use serde::{Deserialize, Serialize};

/// The machine a result was measured on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    pub cores: usize,
    pub memory_gib: f64,
    pub kernel: String,
    pub cpu: String,
}

/// Commit, date, build, machine and command of a result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    pub commit: String,
    pub date: String,
    /// `release` or `debug`.
    pub profile: String,
    pub command: String,
    pub machine: Machine,
}

impl Provenance {
    /// The provenance of this process, taken on the first call and reused,
    /// so a long run reports the date it started on.
    pub fn capture() -> Self {
        static ONCE: std::sync::OnceLock<Provenance> = std::sync::OnceLock::new();
        ONCE.get_or_init(|| Self {
            commit: commit(),
            date: date(),
            profile: profile().into(),
            command: command_line(),
            machine: machine(),
        })
        .clone()
    }
}

/// The build profile of this binary.
pub fn profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

/// The commit this binary was built from (with `-dirty` if tracked files
/// differed from it), or `unknown` when built outside a checkout; a
/// binary run from another checkout still names its own code.
pub fn commit() -> String {
    ferrite_process::BUILD_COMMIT.to_string()
}

/// Today's date (UTC) as YYYY-MM-DD.
pub fn date() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    // Civil-from-days (proleptic Gregorian), valid for all dates after 1970.
    let z = secs.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

fn first_line_with(path: &str, prefix: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .find(|l| l.starts_with(prefix))
        .map(|l| l.to_string())
}

/// Cores, memory, kernel and CPU model of this machine.
pub fn machine() -> Machine {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let mem_kib = first_line_with("/proc/meminfo", "MemTotal:")
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let cpu = first_line_with("/proc/cpuinfo", "model name")
        .and_then(|l| l.split(':').nth(1).map(|s| s.trim().to_string()))
        .unwrap_or_default();
    Machine {
        cores,
        memory_gib: (mem_kib as f64 / (1024.0 * 1024.0) * 10.0).round() / 10.0,
        kernel,
        cpu,
    }
}

/// The command line as typed.
pub fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn date_has_the_iso_shape() {
        let d = date();
        assert_eq!(d.len(), 10);
        assert!(d.starts_with("20"));
        assert_eq!(&d[4..5], "-");
    }
}
