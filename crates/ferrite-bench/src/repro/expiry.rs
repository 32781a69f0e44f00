//! The expiry pass of `repro serve`: keys given TTLs that no client reads
//! again must all go, and their space come back, by the server's own
//! active expiry.
//!
//! `SET ttl:<i> <20 bytes> PX <t>` with `t` uniform from a tenth of
//! [`Pass::max_ttl`] to all of it (1,000–10,000 ms at default scale; a
//! fixed seed), pipelined a thousand at a time; then, once a second until
//! [`Pass::window`] after the last key's deadline, `DBSIZE` and the store
//! directory's allocated bytes. Nothing else talks to the server.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::resp::Resp;
use crate::error::{BenchError, Result};

/// What one pass writes and how long it watches.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pass {
    pub keys: u64,
    /// The longest TTL; the shortest is a tenth of it.
    pub max_ttl: Duration,
    /// How long after the last deadline the pass watches.
    pub window: Duration,
}

/// The longest TTL of reports written before it was a size (ms).
pub(super) fn default_max_ttl_ms() -> u64 {
    10_000
}

/// The window of reports written before it was a size (s).
pub(super) fn default_window_s() -> u64 {
    20
}

/// `1,000-10,000` for a longest TTL of 10,000 ms: the pass's TTL range.
pub(super) fn ttl_range_text(max_ttl_ms: u64) -> String {
    format!("{}-{}", grouped(max_ttl_ms / 10), grouped(max_ttl_ms))
}

fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Keys per pipelined write.
const PIPELINE: u64 = 1000;

/// One poll: seconds since the load ended, keys left, store bytes.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(super) struct Sample {
    pub t: f64,
    pub keys: u64,
    pub store_bytes: u64,
}

/// One engine's pass.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct ExpiryRun {
    pub keys: u64,
    pub load_seconds: f64,
    /// The last key's deadline, seconds after the load ended.
    pub last_deadline: f64,
    pub samples: Vec<Sample>,
}

impl ExpiryRun {
    /// Seconds after the last deadline until `DBSIZE` answered 0.
    pub fn empty_after(&self) -> Option<f64> {
        self.samples
            .iter()
            .find(|s| s.keys == 0)
            .map(|s| (s.t - self.last_deadline).max(0.0))
    }

    /// The store's largest size during the pass.
    pub fn peak_bytes(&self) -> u64 {
        self.samples
            .iter()
            .map(|s| s.store_bytes)
            .max()
            .unwrap_or(0)
    }

    /// The store's size at the end of the window, over its peak.
    pub fn left_vs_peak(&self) -> Option<f64> {
        let last = self.samples.last()?;
        let peak = self.peak_bytes();
        (peak > 0).then(|| last.store_bytes as f64 / peak as f64)
    }
}

/// Runs the pass against the server on `port`, whose store is `store`.
pub(super) fn run(port: u16, store: &Path, pass: Pass) -> Result<ExpiryRun> {
    let keys = pass.keys;
    let max_ms = pass.max_ttl.as_millis().max(10) as u64;
    let min_ms = max_ms / 10;
    let mut c = Resp::connect(port)?;
    let start = Instant::now();
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut last_deadline = start;
    let mut batch = Vec::new();
    let mut i = 0;
    while i < keys {
        batch.clear();
        let n = PIPELINE.min(keys - i);
        let sent = Instant::now();
        for j in i..i + n {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let ms = min_ms + rng % (max_ms - min_ms + 1);
            last_deadline = last_deadline.max(sent + Duration::from_millis(ms));
            let key = format!("ttl:{j:08}");
            let value = format!("{:020}", j);
            Resp::encode(
                &mut batch,
                &[
                    b"SET",
                    key.as_bytes(),
                    value.as_bytes(),
                    b"PX",
                    ms.to_string().as_bytes(),
                ],
            );
        }
        std::io::Write::write_all(&mut c.w, &batch)
            .map_err(|e| BenchError::Config(format!("expiry pass: {e}")))?;
        for _ in 0..n {
            c.reply()?;
        }
        i += n;
    }
    let loaded = Instant::now();
    let mut run = ExpiryRun {
        keys,
        load_seconds: (loaded - start).as_secs_f64(),
        last_deadline: last_deadline
            .saturating_duration_since(loaded)
            .as_secs_f64(),
        samples: Vec::new(),
    };
    let end = last_deadline.max(loaded) + pass.window;
    loop {
        let now = Instant::now();
        let left = c
            .call(&[b"DBSIZE"])?
            .and_then(|b| String::from_utf8_lossy(&b).parse().ok())
            .unwrap_or(u64::MAX);
        run.samples.push(Sample {
            t: (now - loaded).as_secs_f64(),
            keys: left,
            store_bytes: crate::process::disk_bytes(store),
        });
        if now >= end {
            return Ok(run);
        }
        std::thread::sleep(Duration::from_secs(1).min(end - now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ttl_range_is_written_with_thousands_grouped() {
        assert_eq!(ttl_range_text(10_000), "1,000-10,000");
        assert_eq!(ttl_range_text(1_000), "100-1,000");
        assert_eq!(grouped(1_234_567), "1,234,567");
        assert_eq!(grouped(0), "0");
    }
}
