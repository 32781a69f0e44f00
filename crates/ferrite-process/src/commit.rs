//! The commit the harness was built from: what a benchmark's JSON and a
//! crash-test campaign's summary name as the code that ran. Taken at build
//! time (`build.rs`), so a binary built from one checkout and run in
//! another still names its own; `-dirty` when tracked files differed from
//! the commit, `unknown` when built outside a git checkout.

/// The commit this binary was built from, as `git rev-parse --short=12`.
pub const BUILD_COMMIT: &str = env!("FERRITE_COMMIT");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_commit_is_a_short_hash_or_unknown() {
        let hash = BUILD_COMMIT.trim_end_matches("-dirty");
        assert!(
            hash == "unknown" || (hash.len() == 12 && hash.bytes().all(|b| b.is_ascii_hexdigit())),
            "{BUILD_COMMIT}"
        );
    }
}
