//! Side-by-side runs: every variant runs the same chunk of work in turn,
//! and the variant that goes first rotates from chunk to chunk, so slow
//! drift of a shared machine (and the cache a previous chunk left warm or
//! cold) falls on every variant alike.

use crate::error::Result;

/// Runs `chunks` rounds of `step(variant, chunk)` over `variants`
/// variants; in round `c` the order starts at variant `c mod variants`.
pub fn alternate(
    variants: usize,
    chunks: u64,
    mut step: impl FnMut(usize, u64) -> Result<()>,
) -> Result<()> {
    alternate_while(variants, chunks, |v, c| step(v, c).map(|()| true))
}

/// As [`alternate`], stopping after the first step that returns false
/// (a variant that could not do its whole chunk ends the comparison).
pub fn alternate_while(
    variants: usize,
    chunks: u64,
    mut step: impl FnMut(usize, u64) -> Result<bool>,
) -> Result<()> {
    for c in 0..chunks {
        for k in 0..variants {
            if !step((k + c as usize) % variants, c)? {
                return Ok(());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_runs_every_chunk_and_the_first_rotates() {
        let mut seen = Vec::new();
        alternate(3, 4, |v, c| {
            seen.push((c, v));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen.len(), 12);
        let firsts: Vec<usize> = seen.chunks(3).map(|r| r[0].1).collect();
        assert_eq!(firsts, vec![0, 1, 2, 0]);
        let mut steps = 0;
        alternate_while(2, 10, |_, c| {
            steps += 1;
            Ok(c < 3)
        })
        .unwrap();
        assert_eq!(steps, 7, "stops after the first step that says so");
        for round in seen.chunks(3) {
            let mut v: Vec<usize> = round.iter().map(|x| x.1).collect();
            v.sort_unstable();
            assert_eq!(v, vec![0, 1, 2]);
        }
    }
}
