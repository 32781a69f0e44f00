//! Gives the harness the commit it was built from (`FERRITE_COMMIT`), with
//! `-dirty` when tracked files differ from it, so a benchmark's JSON and a
//! crash-test campaign name the code that ran rather than whatever the
//! checkout they run in holds; `unknown` outside a git checkout.

use std::path::Path;
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
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        let dir = Path::new(&dir);
        for f in ["HEAD", "index", "packed-refs"] {
            println!("cargo:rerun-if-changed={}", dir.join(f).display());
        }
        if let Some(head) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={}", dir.join(head).display());
        }
    }
}
