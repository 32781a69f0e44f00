//! Appending a byte stream to a zone in whole blocks.
//!
//! The WAL and the value log both pack records into an in-memory tail and
//! write it at the zone's write pointer in whole blocks: a block, once
//! written, cannot be rewritten, so a partial block either waits in memory
//! or, when it must be durable, leaves padded with zeros.

use ferrite_io::{AlignedBuf, DeviceError, ZonedDevice};

/// Writes the whole blocks of `tail` at device address `at` (with `pad`,
/// the partial last block too, zero-padded) and removes them from `tail`.
/// Returns the bytes written, padding included.
pub fn write_blocks(
    dev: &dyn ZonedDevice,
    tail: &mut Vec<u8>,
    at: u64,
    pad: bool,
) -> Result<u64, DeviceError> {
    let bs = dev.geometry().block_size as usize;
    let whole = if pad {
        tail.len().div_ceil(bs) * bs
    } else {
        tail.len() / bs * bs
    };
    if whole == 0 {
        return Ok(0);
    }
    let mut out = AlignedBuf::zeroed(whole);
    let n = whole.min(tail.len());
    out[..n].copy_from_slice(&tail[..n]);
    dev.write_at(&out, at)?;
    tail.drain(..n);
    Ok(whole as u64)
}
