//! The crash test's operations: a deterministic stream from a seed, so
//! the driver knows what the worker did from the numbers it acknowledged
//! without the worker writing any of it down.
//!
//! A value names the operation that wrote it (its first 16 bytes: run and
//! operation number), so a wrong value found after a crash says which
//! write it came from.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Keys the stream draws from.
pub const KEYS: u32 = 4000;

/// Blocks of the virtual disk a RASK stream maps, and its longest range.
pub const BLOCKS: u64 = 20_000;
const MAX_RANGE: u64 = 64;

/// One operation of the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
    /// Puts (`Some`) and deletes, all or none.
    Batch(Vec<(Vec<u8>, Option<Vec<u8>>)>),
    /// Keys `start <= k < end`.
    DeleteRange(Vec<u8>, Vec<u8>),
    /// A read the worker checks against what it expects.
    Get(Vec<u8>),
}

pub fn key(i: u32) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

/// A block's key in the state a RASK run is checked against: one entry
/// per mapped block, its value the physical block it maps to (both
/// big-endian), so the key-value oracle checks a block map too.
pub fn block_key(lba: u64) -> Vec<u8> {
    lba.to_be_bytes().to_vec()
}

/// The stream of run `run` of a test seeded `seed`.
pub struct OpStream {
    rng: SmallRng,
    run: u64,
    next: u64,
    /// Block-map operations (range puts and deletes) for RASK.
    blocks: bool,
    /// Range deletes among the key-value operations (the Redis protocol
    /// has no command for one).
    range_deletes: bool,
    /// This stream's share of the keys: those whose number is `writer`
    /// modulo `writers`, so concurrent writers never touch one key and
    /// each one's writes are checked as a prefix of its own stream.
    writer: u32,
    writers: u32,
}

/// Which of `writers` concurrent streams writes `key` (the stream's keys
/// only; 0 for anything else).
pub fn writer_of(key: &[u8], writers: u32) -> u32 {
    std::str::from_utf8(key)
        .ok()
        .and_then(|k| k.strip_prefix("key"))
        .and_then(|n| n.parse::<u32>().ok())
        .map_or(0, |n| n % writers.max(1))
}

impl OpStream {
    pub fn new(seed: u64, run: u64) -> Self {
        Self {
            rng: SmallRng::seed_from_u64(seed ^ run.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            run,
            next: 0,
            blocks: false,
            range_deletes: true,
            writer: 0,
            writers: 1,
        }
    }

    /// Writer `writer`'s stream of `writers` a client sends `ferrite serve`
    /// at once: [`OpStream::for_server`] over its own share of the keys.
    pub fn for_server_writer(seed: u64, run: u64, writer: u32, writers: u32) -> Self {
        let seed = seed ^ u64::from(writer).wrapping_mul(0xD1B5_4A32_D192_ED03);
        Self {
            writer,
            writers: writers.max(1),
            ..Self::for_server(seed, run)
        }
    }

    /// The stream a client sends `ferrite serve`: no range deletes.
    pub fn for_server(seed: u64, run: u64) -> Self {
        Self {
            range_deletes: false,
            ..Self::new(seed, run)
        }
    }

    /// The stream for `engine`: block-map operations for RASK.
    pub fn for_engine(engine: ferrite::EngineKind, seed: u64, run: u64) -> Self {
        Self {
            blocks: engine == ferrite::EngineKind::Rask,
            ..Self::new(seed, run)
        }
    }

    /// A range put (as the batch of its blocks: one log record, all or
    /// nothing), a range delete, or a checked read of one block. A put's
    /// physical run is unique to its run and operation, so a block found
    /// mapped elsewhere names the write it came from.
    fn block_op(&mut self, n: u64) -> Op {
        let lba = self.rng.gen_range(0..BLOCKS);
        let len = self.rng.gen_range(1..=MAX_RANGE).min(BLOCKS - lba);
        match self.rng.gen_range(0..100) {
            0..=69 => {
                let phys = (self.run * 1_000_000 + n) * MAX_RANGE;
                Op::Batch(
                    (0..len)
                        .map(|i| (block_key(lba + i), Some((phys + i).to_be_bytes().to_vec())))
                        .collect(),
                )
            }
            70..=84 => Op::DeleteRange(block_key(lba), block_key(lba + len)),
            _ => Op::Get(block_key(lba)),
        }
    }

    /// A value of a size drawn from 8 B to 64 KiB, most small, some past
    /// every engine's overflow and value-log thresholds.
    fn value(&mut self, op: u64) -> Vec<u8> {
        let len = match self.rng.gen_range(0..100) {
            0..=59 => self.rng.gen_range(16..100),
            60..=84 => self.rng.gen_range(100..1000),
            85..=94 => self.rng.gen_range(1000..8192),
            _ => self.rng.gen_range(8192..65_536),
        };
        let mut v = Vec::with_capacity(len);
        v.extend_from_slice(&self.run.to_le_bytes());
        v.extend_from_slice(&op.to_le_bytes());
        let fill = (op as u8).wrapping_mul(31).wrapping_add(7);
        v.resize(len, fill);
        v
    }

    fn any_key(&mut self) -> Vec<u8> {
        let share = KEYS / self.writers;
        key(self.rng.gen_range(0..share) * self.writers + self.writer)
    }
}

impl Iterator for OpStream {
    type Item = Op;

    fn next(&mut self) -> Option<Op> {
        let n = self.next;
        self.next += 1;
        if self.blocks {
            return Some(self.block_op(n));
        }
        Some(match self.rng.gen_range(0..100) {
            0..=44 => {
                let k = self.any_key();
                Op::Put(k, self.value(n))
            }
            45..=59 => Op::Delete(self.any_key()),
            60..=74 => {
                let size = self.rng.gen_range(2..12);
                let items = (0..size)
                    .map(|_| {
                        let k = self.any_key();
                        let v = self.rng.gen_bool(0.8).then(|| self.value(n));
                        (k, v)
                    })
                    .collect();
                Op::Batch(items)
            }
            75..=77 if self.range_deletes => {
                let a = self.rng.gen_range(0..KEYS - 1);
                let b = (a + self.rng.gen_range(1..40)).min(KEYS);
                Op::DeleteRange(key(a), key(b))
            }
            _ => Op::Get(self.any_key()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_and_run_give_the_same_stream() {
        let a: Vec<Op> = OpStream::new(7, 3).take(500).collect();
        let b: Vec<Op> = OpStream::new(7, 3).take(500).collect();
        let c: Vec<Op> = OpStream::new(7, 4).take(500).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        let big = a
            .iter()
            .any(|o| matches!(o, Op::Put(_, v) if v.len() >= 8192));
        let range = a.iter().any(|o| matches!(o, Op::DeleteRange(..)));
        assert!(big && range);
    }

    #[test]
    fn concurrent_writers_share_out_the_keys() {
        for w in 0..8 {
            for op in OpStream::for_server_writer(7, 3, w, 8).take(300) {
                let keys: Vec<Vec<u8>> = match op {
                    Op::Put(k, _) | Op::Delete(k) | Op::Get(k) => vec![k],
                    Op::Batch(items) => items.into_iter().map(|(k, _)| k).collect(),
                    Op::DeleteRange(..) => panic!("the server's stream has no range deletes"),
                };
                for k in keys {
                    assert_eq!(writer_of(&k, 8), w, "{}", String::from_utf8_lossy(&k));
                }
            }
        }
        let a: Vec<Op> = OpStream::for_server_writer(7, 3, 0, 8).take(50).collect();
        let b: Vec<Op> = OpStream::for_server_writer(7, 3, 1, 8).take(50).collect();
        assert_ne!(a, b);
    }
}
