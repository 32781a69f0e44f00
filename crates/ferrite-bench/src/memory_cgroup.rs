//! A memory cgroup that caps what the processes put in it may hold,
//! page cache included: how a baseline that reads through the kernel's
//! page cache is given the same memory budget as an engine that reads
//! O_DIRECT, so its reads reach the device once the working set outgrows
//! the budget.
//!
//! Works with cgroup v2 (`memory.max`) and v1 (`memory.limit_in_bytes`)
//! where the memory controller is mounted writable (root, or a delegated
//! subtree); elsewhere [`MemoryCgroup::create`] says why not, and callers
//! skip what needs it. The group is removed on drop, which succeeds once
//! its processes have exited: callers stop them first.

use std::path::{Path, PathBuf};

/// A created memory cgroup.
#[derive(Debug)]
pub struct MemoryCgroup {
    dir: PathBuf,
}

const V2_ROOT: &str = "/sys/fs/cgroup";
const V1_ROOT: &str = "/sys/fs/cgroup/memory";

impl MemoryCgroup {
    /// Creates group `name` limited to `limit_bytes`; the reason it could
    /// not if the memory controller is absent or not writable here.
    pub fn create(name: &str, limit_bytes: u64) -> Result<Self, String> {
        let v2 = std::fs::read_to_string(Path::new(V2_ROOT).join("cgroup.controllers"))
            .is_ok_and(|c| c.split_whitespace().any(|x| x == "memory"));
        let (root, limit_file) = if v2 {
            (V2_ROOT, "memory.max")
        } else if Path::new(V1_ROOT).join("memory.limit_in_bytes").exists() {
            (V1_ROOT, "memory.limit_in_bytes")
        } else {
            return Err("no memory cgroup controller mounted".into());
        };
        let dir = Path::new(root).join(name);
        std::fs::create_dir(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let group = Self { dir };
        std::fs::write(group.dir.join(limit_file), limit_bytes.to_string())
            .map_err(|e| format!("setting {limit_file}: {e}"))?;
        Ok(group)
    }

    /// Moves process `pid` into the group; pages it faults in from then
    /// on are charged to the group and reclaimed beyond its limit.
    pub fn add(&self, pid: u32) -> Result<(), String> {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string())
            .map_err(|e| format!("moving process {pid} into {}: {e}", self.dir.display()))
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        // A group's files cannot be removed, only the emptied directory.
        let _ = std::fs::remove_dir(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_holds_a_process_and_is_removed_after_it() {
        let name = format!("ferrite-test-{}", std::process::id());
        let group = match MemoryCgroup::create(&name, 64 << 20) {
            Ok(g) => g,
            Err(why) => {
                eprintln!("skipped: {why}");
                return;
            }
        };
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        group.add(child.id()).unwrap();
        let procs = std::fs::read_to_string(group.dir.join("cgroup.procs")).unwrap();
        assert!(procs.lines().any(|l| l.trim() == child.id().to_string()));
        child.kill().unwrap();
        child.wait().unwrap();
        let dir = group.dir.clone();
        drop(group);
        assert!(!dir.exists());
    }
}
