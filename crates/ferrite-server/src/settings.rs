//! The settings `CONFIG GET` reports and `CONFIG SET` changes, under
//! Redis's names.
//!
//! Three kinds: settings that act here and change at run time
//! (`notify-keyspace-events`, `timeout`, `maxclients`,
//! `proto-max-bulk-len`, `requirepass`, `busy-reply-threshold`); settings fixed when the server
//! starts, which `CONFIG SET` refuses with Redis's error unless given the
//! value they already have (`appendfsync`, `maxmemory`, the port, ...);
//! and the size thresholds of Redis's compact encodings. The hash and
//! list ones (`hash-max-listpack-entries`, `hash-max-listpack-value`,
//! `list-max-listpack-size`) act: they bound the hashes held packed in
//! their metadata record and the lists held in one record. The others
//! are accepted and reported as set, so configuration scripts written
//! for Redis run, but change nothing: ferrite stores sets and sorted
//! sets as element records (`OBJECT ENCODING` answers so).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::config::ServerConfig;
use crate::model::{Keyspace, ListLimits, PackLimits, DATABASES};

/// Redis's compact-encoding thresholds and their defaults.
const ENCODING_KNOBS: &[(&str, &str)] = &[
    ("hash-max-listpack-entries", "128"),
    ("hash-max-listpack-value", "64"),
    ("set-max-intset-entries", "512"),
    ("set-max-listpack-entries", "128"),
    ("set-max-listpack-value", "64"),
    ("zset-max-listpack-entries", "128"),
    ("zset-max-listpack-value", "64"),
    ("list-max-listpack-size", "-2"),
    ("list-compress-depth", "0"),
    ("stream-node-max-bytes", "4096"),
    ("stream-node-max-entries", "100"),
];

/// Older names of the same thresholds.
const ALIASES: &[(&str, &str)] = &[
    ("hash-max-ziplist-entries", "hash-max-listpack-entries"),
    ("hash-max-ziplist-value", "hash-max-listpack-value"),
    ("zset-max-ziplist-entries", "zset-max-listpack-entries"),
    ("zset-max-ziplist-value", "zset-max-listpack-value"),
    ("list-max-ziplist-size", "list-max-listpack-size"),
];

/// Keyspace-event class letters `A` stands for.
const ALL_EVENTS: &str = "g$lshzxetd";

/// A validated change, applied once every change of a `CONFIG SET` is.
type Action<'a> = Box<dyn FnOnce(&Settings) + 'a>;

/// The settings of a running server.
pub struct Settings {
    fixed: ServerConfig,
    /// Canonical `notify-keyspace-events` letters.
    events: Mutex<String>,
    timeout_secs: AtomicU64,
    max_clients: AtomicUsize,
    max_bulk: AtomicUsize,
    /// A client whose unprocessed input grows past this is closed.
    query_limit: AtomicU64,
    requirepass: Mutex<Option<String>>,
    /// `busy-reply-threshold` (`lua-time-limit`): ms a script runs before
    /// other clients are answered `BUSY`.
    busy_ms: AtomicU64,
    encodings: Mutex<BTreeMap<&'static str, String>>,
    /// `hash-max-listpack-entries` and `-value`, as the hash layer reads
    /// them on every write.
    hash_entries: AtomicU64,
    hash_value: AtomicU64,
    /// `list-max-listpack-size`.
    list_fill: AtomicI64,
}

impl Settings {
    pub fn new(config: &ServerConfig) -> Self {
        Self {
            fixed: config.clone(),
            events: Mutex::new(String::new()),
            timeout_secs: AtomicU64::new(0),
            max_clients: AtomicUsize::new(config.max_clients),
            max_bulk: AtomicUsize::new(config.limits.max_bulk),
            query_limit: AtomicU64::new(1 << 30),
            requirepass: Mutex::new(config.requirepass.clone()),
            busy_ms: AtomicU64::new(5000),
            encodings: Mutex::new(
                ENCODING_KNOBS
                    .iter()
                    .map(|(k, v)| (*k, v.to_string()))
                    .collect(),
            ),
            hash_entries: AtomicU64::new(PackLimits::DEFAULT.entries),
            hash_value: AtomicU64::new(PackLimits::DEFAULT.value),
            list_fill: AtomicI64::new(ListLimits::DEFAULT.fill),
        }
    }

    /// Seconds an idle client may stay (0: forever).
    pub fn timeout_secs(&self) -> u64 {
        self.timeout_secs.load(Ordering::Relaxed)
    }

    pub fn max_clients(&self) -> usize {
        self.max_clients.load(Ordering::Relaxed)
    }

    pub fn max_bulk(&self) -> usize {
        self.max_bulk.load(Ordering::Relaxed)
    }

    /// `client-query-buffer-limit`.
    pub fn query_limit(&self) -> u64 {
        self.query_limit.load(Ordering::Relaxed)
    }

    pub fn busy_ms(&self) -> u64 {
        self.busy_ms.load(Ordering::Relaxed)
    }

    /// When a hash stays packed.
    pub fn hash_pack(&self) -> PackLimits {
        PackLimits {
            entries: self.hash_entries.load(Ordering::Relaxed),
            value: self.hash_value.load(Ordering::Relaxed),
        }
    }

    /// When a list stays packed.
    pub fn list_pack(&self) -> ListLimits {
        ListLimits {
            fill: self.list_fill.load(Ordering::Relaxed),
        }
    }

    pub fn requirepass(&self) -> Option<String> {
        self.requirepass.lock().clone()
    }

    /// Every setting's name and value now.
    fn all(&self) -> Vec<(String, String)> {
        let c = &self.fixed;
        let mut out = vec![
            ("appendonly".into(), "yes".into()),
            ("appendfsync".into(), c.sync.to_string()),
            ("save".into(), String::new()),
            ("databases".into(), DATABASES.to_string()),
            ("maxclients".into(), self.max_clients().to_string()),
            ("maxmemory".into(), c.cache_bytes.to_string()),
            ("maxmemory-policy".into(), "noeviction".into()),
            ("proto-max-bulk-len".into(), self.max_bulk().to_string()),
            (
                "client-query-buffer-limit".into(),
                self.query_limit().to_string(),
            ),
            ("timeout".into(), self.timeout_secs().to_string()),
            ("port".into(), c.listen.port().to_string()),
            ("bind".into(), c.listen.ip().to_string()),
            ("hz".into(), "10".into()),
            ("notify-keyspace-events".into(), self.events.lock().clone()),
            ("requirepass".into(), self.requirepass().unwrap_or_default()),
            ("busy-reply-threshold".into(), self.busy_ms().to_string()),
            ("lua-time-limit".into(), self.busy_ms().to_string()),
        ];
        for (k, v) in self.encodings.lock().iter() {
            out.push((k.to_string(), v.clone()));
        }
        out
    }

    /// `CONFIG GET pattern ...`: matching settings and their values.
    pub fn get(&self, patterns: &[&[u8]]) -> Vec<(String, String)> {
        let all = self.all();
        let mut out: BTreeMap<String, String> = BTreeMap::new();
        for p in patterns {
            let p = p.to_ascii_lowercase();
            let alias = ALIASES.iter().find(|(a, _)| a.as_bytes() == p.as_slice());
            for (name, value) in &all {
                if crate::glob::matches(&p, name.as_bytes()) {
                    out.insert(name.clone(), value.clone());
                }
                if let Some((a, real)) = alias {
                    if real == name {
                        out.insert(a.to_string(), value.clone());
                    }
                }
            }
        }
        out.into_iter().collect()
    }

    /// `CONFIG SET name value ...`: all or nothing. The error is Redis's
    /// text.
    pub fn set(&self, ks: &Keyspace, pairs: &[(Vec<u8>, Vec<u8>)]) -> Result<(), String> {
        let mut actions: Vec<Action<'_>> = Vec::new();
        for (name, value) in pairs {
            let name_s = String::from_utf8_lossy(name).to_lowercase();
            let value_s = String::from_utf8_lossy(value).to_string();
            let failed = |why: &str| {
                format!("CONFIG SET failed (possibly related to argument '{name_s}') - {why}")
            };
            let canonical = ALIASES
                .iter()
                .find(|(a, _)| *a == name_s)
                .map_or(name_s.as_str(), |(_, real)| real);
            if let Some((knob, _)) = ENCODING_KNOBS.iter().find(|(k, _)| *k == canonical) {
                let Ok(n) = value_s.parse::<i64>() else {
                    return Err(failed("argument couldn't be parsed into an integer"));
                };
                // Which of the acting thresholds it is: entries or value.
                let acting = match *knob {
                    "hash-max-listpack-entries" => Some(true),
                    "hash-max-listpack-value" => Some(false),
                    _ => None,
                };
                if acting.is_some() && n < 0 {
                    return Err(failed(&format!(
                        "argument must be between 0 and {} inclusive",
                        i64::MAX
                    )));
                }
                let list_fill = *knob == "list-max-listpack-size";
                if list_fill && i32::try_from(n).is_err() {
                    return Err(failed(&format!(
                        "argument must be between {} and {} inclusive",
                        i32::MIN,
                        i32::MAX
                    )));
                }
                actions.push(Box::new(move |s: &Self| {
                    if list_fill {
                        s.list_fill.store(n, Ordering::Relaxed);
                    }
                    if let Some(entries) = acting {
                        let cell = if entries {
                            &s.hash_entries
                        } else {
                            &s.hash_value
                        };
                        cell.store(n as u64, Ordering::Relaxed);
                    }
                    s.encodings.lock().insert(knob, value_s);
                }));
                continue;
            }
            match canonical {
                "notify-keyspace-events" => {
                    let letters = event_letters(&value_s).ok_or_else(|| {
                        failed("Invalid event class character. Use 'Ag$lshzxeKEtmdn'.")
                    })?;
                    actions.push(Box::new(move |s: &Self| {
                        ks.set_event_classes(&letters);
                        *s.events.lock() = canonical_events(&letters);
                    }));
                }
                "timeout" => {
                    let n = value_s
                        .parse::<u64>()
                        .map_err(|_| failed("argument couldn't be parsed into an integer"))?;
                    actions.push(Box::new(move |s: &Self| {
                        s.timeout_secs.store(n, Ordering::Relaxed)
                    }));
                }
                "maxclients" => {
                    let n = value_s
                        .parse::<usize>()
                        .ok()
                        .filter(|&n| n >= 1)
                        .ok_or_else(|| {
                            failed("argument must be between 1 and 4294967295 inclusive")
                        })?;
                    actions.push(Box::new(move |s: &Self| {
                        s.max_clients.store(n, Ordering::Relaxed)
                    }));
                }
                "proto-max-bulk-len" => {
                    let n = parse_memory(&value_s)
                        .filter(|&n| n >= 1 << 20)
                        .ok_or_else(|| failed("argument must be a memory value of at least 1mb"))?;
                    actions.push(Box::new(move |s: &Self| {
                        s.max_bulk.store(n as usize, Ordering::Relaxed)
                    }));
                }
                "client-query-buffer-limit" => {
                    let n = parse_memory(&value_s)
                        .filter(|&n| n >= 1 << 20)
                        .ok_or_else(|| failed("argument must be a memory value of at least 1mb"))?;
                    actions.push(Box::new(move |s: &Self| {
                        s.query_limit.store(n, Ordering::Relaxed)
                    }));
                }
                "busy-reply-threshold" | "lua-time-limit" => {
                    let n = value_s
                        .parse::<u64>()
                        .map_err(|_| failed("argument couldn't be parsed into an integer"))?;
                    actions.push(Box::new(move |s: &Self| {
                        s.busy_ms.store(n, Ordering::Relaxed)
                    }));
                }
                "requirepass" => {
                    actions.push(Box::new(move |s: &Self| {
                        *s.requirepass.lock() = (!value_s.is_empty()).then_some(value_s);
                    }));
                }
                _ => {
                    let current = self.all().into_iter().find(|(n, _)| n == canonical);
                    match current {
                        // A fixed setting given the value it has: accepted.
                        Some((_, v)) if same_value(canonical, &v, &value_s) => {}
                        Some(_) => {
                            return Err(failed(
                                "this setting is fixed when ferrite serve starts (see ferrite serve --help)",
                            ))
                        }
                        None => {
                            return Err(format!(
                                "Unknown option or number of arguments for CONFIG SET - '{name_s}'"
                            ))
                        }
                    }
                }
            }
        }
        for a in actions {
            a(self);
        }
        Ok(())
    }
}

fn same_value(name: &str, have: &str, want: &str) -> bool {
    if have.eq_ignore_ascii_case(want) {
        return true;
    }
    matches!(name, "maxmemory") && parse_memory(want) == have.parse().ok()
}

/// Redis's memory values: `1048576`, `1mb`, `1gb`, `100k`.
fn parse_memory(s: &str) -> Option<u64> {
    let s = s.to_ascii_lowercase();
    let (digits, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s.as_str(), ""),
    };
    let n: u64 = digits.parse().ok()?;
    let mul = match unit {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1 << 20,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mul)
}

/// The class letters a `notify-keyspace-events` value turns on (`A`
/// expanded); `None` for a letter Redis does not know.
fn event_letters(v: &str) -> Option<String> {
    let mut out = String::new();
    for c in v.chars() {
        match c {
            'A' => out.push_str(ALL_EVENTS),
            c if "g$lshzxeKEtmdn".contains(c) => out.push(c),
            _ => return None,
        }
    }
    Some(out)
}

/// The letters as Redis prints them back.
fn canonical_events(letters: &str) -> String {
    let has = |c: char| letters.contains(c);
    let mut out = String::new();
    if ALL_EVENTS.chars().all(has) {
        out.push('A');
    } else {
        for c in "g$lshzxetdn".chars() {
            if has(c) {
                out.push(c);
            }
        }
    }
    for c in "KEm".chars() {
        if has(c) {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_classes_print_back_as_redis_prints_them() {
        assert_eq!(canonical_events(&event_letters("KEA").unwrap()), "AKE");
        assert_eq!(canonical_events(&event_letters("Elz").unwrap()), "lzE");
        assert!(event_letters("Kq").is_none());
    }

    #[test]
    fn memory_values() {
        assert_eq!(parse_memory("1mb"), Some(1 << 20));
        assert_eq!(parse_memory("512"), Some(512));
        assert_eq!(parse_memory("1xb"), None);
    }
}
