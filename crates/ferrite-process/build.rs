//! Gives the harness the commit it was built from (`FERRITE_COMMIT`), with
//! `-dirty` when tracked files differ from it, so a benchmark's JSON and a
//! crash-test campaign name the code that ran rather than whatever the
//! checkout they run in holds; `unknown` outside a git checkout.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let commit = match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(c) => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{c}-dirty")
            } else {
                c
            }
        }
        None => "unknown".into(),
    };
    println!("cargo:rustc-env=FERRITE_COMMIT={commit}");
    // A new commit, a staged change, or an edit to any crate's files runs
    // this again: the binary is rebuilt then anyway, and its label must
    // follow (an edit alone leaves git's index as it was).
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    println!("cargo:rerun-if-changed={}", crates.display());
    // Only paths that exist: Cargo runs a script again on every build while
    // a path it watches is missing, and a checkout whose refs were never
    // packed has no `packed-refs`, so every build would relink everything
    // above this crate. The branch's ref is watched through its folder
    // (`refs/heads`), which holds its file whether or not it exists yet.
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        let dir = Path::new(&dir);
        let mut watched: Vec<PathBuf> = ["HEAD", "index", "packed-refs"]
            .iter()
            .map(|f| dir.join(f))
            .collect();
        if let Some(head) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watched.extend(dir.join(head).parent().map(Path::to_path_buf));
        }
        for path in watched.iter().filter(|p| p.exists()) {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}
