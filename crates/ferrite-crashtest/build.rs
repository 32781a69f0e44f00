//! Gives the binary the commit it was built from (`FERRITE_COMMIT`), so a
//! crash-test campaign names the code it ran rather than whatever the
//! checkout holds when it ends; `unknown` outside a git checkout.

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
    // A new commit, or a change to the tree, builds the binary again.
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
