//! Valkey's own Tcl test suite against a listening server: the runner
//! beside the repository (`../shared/redis-compat/run`, or
//! `$REDIS_COMPAT_RUN`) in its external-server mode, and its per-file
//! passed and failed counts.
//!
//! The runner prints a table (`file passed failed`, one line per test
//! file) and a total; a file it could not run is a line of zeros, so a
//! server that aborts a file early scores what it passed before. Its
//! passed column counts distinct lines, timings included, so a file
//! that runs its tests in several variants (encodings) counts more or
//! fewer as timings happen to differ; the passes here are counted by
//! test name from its logs instead, as `scripts/redis-compat.sh` does.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error::{BenchError, Result};

/// The suite's core files: strings, the collection types, keys, expiry,
/// transactions, scans, the protocol, pub/sub and bits.
pub const CORE_FILES: [&str; 16] = [
    "unit/type/string",
    "unit/type/incr",
    "unit/type/hash",
    "unit/type/list",
    "unit/type/set",
    "unit/type/zset",
    "unit/keyspace",
    "unit/expire",
    "unit/multi",
    "unit/scan",
    "unit/protocol",
    "unit/quit",
    "unit/auth",
    "unit/info-command",
    "unit/pubsub",
    "unit/bitops",
];

/// Passed and failed tests of one file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileCount {
    pub passed: u64,
    pub failed: u64,
}

/// The runner, if it and `tclsh` are here: `$REDIS_COMPAT_RUN`, else
/// `redis-compat/run` beside the shared data directory.
pub fn runner(data_dir: &Path) -> Option<PathBuf> {
    let path = std::env::var_os("REDIS_COMPAT_RUN")
        .map(PathBuf::from)
        .or_else(|| Some(data_dir.parent()?.join("redis-compat").join("run")))?;
    (path.is_file() && on_path("tclsh")).then_some(path)
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
}

/// Runs `files` against the server on `port`; the counts by file (the
/// file's name without `unit/`).
pub fn run(runner: &Path, port: u16, files: &[&str]) -> Result<BTreeMap<String, FileCount>> {
    let logs =
        tempfile::tempdir().map_err(|e| BenchError::Config(format!("a log directory: {e}")))?;
    let out = Command::new("bash")
        .arg(runner)
        .arg(port.to_string())
        .args(files)
        .env("REDIS_COMPAT_LOGS", logs.path())
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| BenchError::Config(format!("{}: {e}", runner.display())))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut counts = parse(&text);
    if counts.len() != files.len() {
        return Err(BenchError::Config(format!(
            "{} reported {} of {} files: {text}",
            runner.display(),
            counts.len(),
            files.len()
        )));
    }
    for f in files {
        let log = logs.path().join(format!("{}.log", f.replace('/', "_")));
        let (Some(count), Ok(log)) = (
            counts.get_mut(f.strip_prefix("unit/").unwrap_or(f)),
            std::fs::read(&log),
        ) else {
            continue;
        };
        count.passed = passed_by_name(&String::from_utf8_lossy(&log));
    }
    Ok(counts)
}

/// The tests a runner's log shows passing, counted by name: colours
/// and the `(N ms)` timing of each `[ok]` line left out.
fn passed_by_name(log: &str) -> u64 {
    let mut names = BTreeSet::new();
    for line in log.lines() {
        let line = without_colours(line);
        let Some(name) = line.strip_prefix("[ok]:") else {
            continue;
        };
        let name = match name.rfind(" (") {
            Some(at) if name.ends_with(" ms)") => &name[..at],
            _ => name,
        };
        names.insert(name.to_string());
    }
    names.len() as u64
}

/// `line` without its ANSI colour sequences (`ESC [ ... m`).
fn without_colours(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.find("\x1b[") {
        out.push_str(&rest[..at]);
        rest = &rest[at + 2..];
        match rest.find('m') {
            Some(end) => rest = &rest[end + 1..],
            None => rest = "",
        }
    }
    out.push_str(rest);
    out
}

/// The per-file lines of the runner's table.
fn parse(text: &str) -> BTreeMap<String, FileCount> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let (file, passed, failed) = (words.next()?, words.next()?, words.next()?);
            if words.next().is_some() {
                return None;
            }
            let count = FileCount {
                passed: passed.parse().ok()?,
                failed: failed.parse().ok()?,
            };
            Some((file.to_string(), count))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_are_counted_by_name_whatever_their_timing() {
        let log = "[\x1b[0;32;49mok\x1b[0m]: ZADD basics - listpack (0 ms)\n\
                   [\x1b[0;32;49mok\x1b[0m]: ZADD basics - listpack (1 ms)\n\
                   [\x1b[0;32;49mok\x1b[0m]: ZADD basics - skiplist (0 ms)\n\
                   [ok]: A name (with brackets) (12 ms)\n\
                   [\x1b[0;31;49merr\x1b[0m]: ZSCORE - listpack in tests/unit/type/zset.tcl\n\
                   *** [\x1b[0;31;49merr\x1b[0m]: ZSCORE - listpack\n\
                   [ok]: without a timing\n";
        assert_eq!(passed_by_name(log), 4);
    }

    #[test]
    fn the_table_is_read_and_nothing_else() {
        let out = "file                    passed  failed\n\
                   type/string                 75       4\n\
                   quit                         3       0\n\
                   logs: /tmp/redis-compat-1\n\
                   redis-compat: 78 passed, 4 failed\n";
        let c = parse(out);
        assert_eq!(c.len(), 2);
        assert_eq!(
            c["type/string"],
            FileCount {
                passed: 75,
                failed: 4
            }
        );
        assert_eq!(
            c["quit"],
            FileCount {
                passed: 3,
                failed: 0
            }
        );
    }
}
