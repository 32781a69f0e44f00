//! The power-cut rig: a Linux guest under qemu (the kernel and initramfs
//! `scripts/install-qemu-guest.sh` builds) whose store lives on an ext4
//! disk served by nbdkit through its cache filter in writeback mode.
//! Killing nbdkit and qemu together loses what a power cut loses: the
//! guest's page cache, and every write the disk cached but was never told
//! to flush. Only what the guest flushed is in the store disk's file.
//!
//! Disks: `vda` the guest's root (busybox, this `ferrite` binary and the
//! libraries it links, and an init that mounts the store disk at `/data`
//! and runs the command given on the kernel command line), opened as a
//! qemu snapshot so no run changes it; `vdb` the store disk; `vdc` a raw
//! channel disk the worker writes its recovered state to, read here once
//! the guest is gone (the store disk itself only the guest reads).
//!
//! Each boot's console, nbdkit's and qemu's messages are kept in the
//! directory (`serial.log`, `nbdkit.log`, `qemu.log`, and the previous
//! boot's as `*.prev.log`); `FERRITE_GUEST_VERBOSE=1` has nbdkit log every
//! request.
//!
//! A server under test in the guest listens on a port qemu forwards from
//! the host's loopback (user-mode networking, restricted to that
//! forward), so the driver's clients stay on the host and every reply
//! they count as an acknowledgment crossed the machine's boundary.
//!
//! The guest is emulated (TCG), not run under KVM: a nested `/dev/kvm`
//! can be present and still hang the guest at boot (it does on this
//! project's CI machines), and a boot takes about three seconds emulated.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use ferrite_process::{Ready, Server};

/// The guest's init: mounts the store disk, says so (the command starts
/// next), runs the command from the kernel command line (`ferrite.cmd=`,
/// arguments joined by commas), and powers off when it ends.
const INIT: &str = r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
cmd=$(tr ' ' '\n' </proc/cmdline | sed -n 's/^ferrite\.cmd=//p' | tr , ' ')
if grep -q 'ferrite.net=1' /proc/cmdline; then
    ip link set lo up
    ip link set eth0 up
    ip addr add 10.0.2.15/24 dev eth0
fi
if mount -t ext4 /dev/vdb /data; then
    echo "ferrite-guest-start"
    /bin/$cmd
    echo "ferrite-guest: exit $?"
    umount /data
else
    echo "ferrite-guest: cannot mount /dev/vdb"
fi
poweroff -f
"#;

/// Size of the store disk (sparse on the host).
const STORE_DISK: &str = "2G";
/// Size of the channel disk: room for the largest recovered state.
const CHANNEL_BYTES: u64 = 256 << 20;

/// Where the installed guest kernel is (`scripts/install-qemu-guest.sh`).
pub fn kernel_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("FERRITE_GUEST_DIR") {
        return PathBuf::from(d);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    cache.join("ferrite/qemu-guest")
}

/// The guest's disks, in one directory.
pub struct Rig {
    dir: PathBuf,
    kernel: PathBuf,
    initrd: PathBuf,
    root: PathBuf,
    channel: PathBuf,
    store: PathBuf,
    socket: PathBuf,
}

impl Rig {
    /// Makes the disks afresh in `dir`: a root holding `binaries` (in
    /// its `/bin`, under their names: this binary for the worker,
    /// `ferrite` for a server), an empty ext4 store disk, a zeroed
    /// channel disk.
    pub fn create(dir: &Path, binaries: &[&Path]) -> Result<Rig> {
        let kdir = kernel_dir();
        let (kernel, initrd) = (kdir.join("vmlinuz"), kdir.join("initrd.img"));
        if !kernel.exists() || !initrd.exists() {
            bail!(
                "no guest kernel in {} (scripts/install-qemu-guest.sh installs it)",
                kdir.display()
            );
        }
        for tool in ["qemu-system-x86_64", "nbdkit", "mkfs.ext4"] {
            if Command::new(tool)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_err()
            {
                bail!(
                    "{tool} is not installed (scripts/install-qemu-guest.sh and \
                     scripts/install-nbd-tools.sh install what power cuts need)"
                );
            }
        }
        if dir.exists() {
            std::fs::remove_dir_all(dir).with_context(|| format!("clearing {}", dir.display()))?;
        }
        std::fs::create_dir_all(dir)?;
        let dir = dir.canonicalize()?;
        let rig = Rig {
            root: dir.join("root.img"),
            store: dir.join("store.img"),
            channel: dir.join("channel.img"),
            socket: dir.join("store.sock"),
            dir,
            kernel,
            initrd,
        };
        rig.make_root(binaries)?;
        run(Command::new("truncate")
            .args(["-s", STORE_DISK])
            .arg(&rig.store))?;
        run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&rig.store))?;
        std::fs::File::create(&rig.channel)?.set_len(CHANNEL_BYTES)?;
        Ok(rig)
    }

    /// The root file system: busybox, the binaries and what they link
    /// (from `ldd`), the init, all at their host paths.
    fn make_root(&self, binaries: &[&Path]) -> Result<()> {
        let tree = self.dir.join("root");
        for d in ["bin", "sbin", "dev", "proc", "sys", "data"] {
            std::fs::create_dir_all(tree.join(d))?;
        }
        let busybox = Path::new("/bin/busybox");
        if !busybox.exists() {
            bail!("no /bin/busybox (scripts/install-qemu-guest.sh installs busybox-static)");
        }
        std::fs::copy(busybox, tree.join("bin/busybox"))?;
        let mut bytes: u64 = 64 << 20;
        for bin in binaries {
            let name = bin.file_name().context("a binary without a name")?;
            std::fs::copy(bin, tree.join("bin").join(name))?;
            bytes += std::fs::metadata(bin)?.len();
            let ldd = Command::new("ldd")
                .arg(bin)
                .output()
                .context("running ldd")?;
            for lib in String::from_utf8_lossy(&ldd.stdout)
                .split_whitespace()
                .filter(|w| w.starts_with('/'))
            {
                let to = tree.join(lib.trim_start_matches('/'));
                if let Some(parent) = to.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::fs::copy(lib, &to).with_context(|| format!("copying {lib}"))?;
            }
        }
        let init = tree.join("sbin/init");
        std::fs::write(&init, INIT)?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&init, std::fs::Permissions::from_mode(0o755))?;
        run(Command::new("mkfs.ext4")
            .args(["-q", "-F", "-d"])
            .arg(&tree)
            .arg(&self.root)
            .arg(format!("{}k", bytes.div_ceil(1 << 20) * 1024)))?;
        std::fs::remove_dir_all(&tree)?;
        Ok(())
    }

    /// Starts the machine running `args` (the first names a binary of
    /// its `/bin`; no argument may hold
    /// a comma or a space); with `port`, that guest port is reached at
    /// the returned guest's `addr` on the host's loopback.
    pub fn boot(&self, args: &[String], port: Option<u16>) -> Result<Guest> {
        if let Some(bad) = args.iter().find(|a| a.contains([',', ' '])) {
            bail!("a guest argument cannot hold a comma or a space: {bad:?}");
        }
        let _ = std::fs::remove_file(&self.socket);
        // nbdkit's and qemu's own messages, this boot's and the last's,
        // kept beside the consoles for a failure.
        let logged = |name: &str| -> Result<std::fs::File> {
            let now = self.dir.join(format!("{name}.log"));
            let _ = std::fs::rename(&now, self.dir.join(format!("{name}.prev.log")));
            Ok(std::fs::File::create(now)?)
        };
        let mut nbdkit_args = vec!["-f", "--exit-with-parent"];
        // Every request nbdkit serves, for a disk that misbehaves.
        if std::env::var_os("FERRITE_GUEST_VERBOSE").is_some() {
            nbdkit_args.push("-v");
        }
        // The disk's volatile cache: nbdkit's cache filter keeps writes
        // (in a deleted file under TMPDIR, gone with the process) until
        // the guest flushes. 4 KiB blocks, the guest's own block size, so
        // a flush writes back no neighbour the guest did not write.
        let mut cmd = Command::new("nbdkit");
        cmd.env("TMPDIR", &self.dir)
            .args(&nbdkit_args)
            .arg("-U")
            .arg(&self.socket)
            .args(["--filter=cache", "file"])
            .arg(&self.store)
            .args(["cache=writeback", "cache-min-block-size=4096"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(logged("nbdkit")?);
        let mut nbdkit = Server::start(
            cmd,
            "nbdkit",
            Ready::Socket(self.socket.clone()),
            Duration::from_secs(30),
        )?;
        let mut append = format!(
            "console=ttyS0 panic=-1 quiet ferrite.cmd={}",
            args.join(",")
        );
        let mut net: Vec<String> = Vec::new();
        let mut addr = None;
        if let Some(port) = port {
            let host = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
            net.extend([
                "-netdev".into(),
                format!(
                    "user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:{}-:{port}",
                    host.port()
                ),
                "-device".into(),
                "virtio-net-pci,netdev=n0".into(),
            ]);
            append.push_str(" ferrite.net=1");
            addr = Some(host);
        }
        let spawned = Command::new("qemu-system-x86_64")
            .env("TMPDIR", &self.dir)
            .args(["-machine", "accel=tcg", "-m", "512", "-smp", "1"])
            .args(["-display", "none", "-monitor", "none", "-serial", "stdio"])
            .arg("-no-reboot")
            .arg("-kernel")
            .arg(&self.kernel)
            .arg("-initrd")
            .arg(&self.initrd)
            .args(["-append", &append])
            .arg("-drive")
            .arg(format!(
                "file={},format=raw,if=virtio,snapshot=on",
                self.root.display()
            ))
            .arg("-drive")
            .arg(format!(
                "file=nbd+unix:///?socket={},format=raw,if=virtio,cache=writeback",
                self.socket.display()
            ))
            .arg("-drive")
            .arg(format!(
                "file={},format=raw,if=virtio,cache=writeback",
                self.channel.display()
            ))
            .args(&net)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(logged("qemu")?)
            .spawn();
        let mut qemu = match spawned {
            Ok(q) => q,
            Err(e) => {
                nbdkit.kill();
                return Err(e).context("starting qemu-system-x86_64");
            }
        };
        let stdout = qemu.stdout.take().context("qemu's serial console")?;
        let (tx, rx) = mpsc::channel();
        let log = self.dir.join("serial.log");
        // The previous boot's console is kept for a failure that shows
        // only at this boot's recovery.
        let _ = std::fs::rename(&log, self.dir.join("serial.prev.log"));
        let mut file = std::fs::File::create(&log)?;
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).split(b'\n') {
                let Ok(line) = line else { break };
                let _ = std::io::Write::write_all(&mut file, &line);
                let _ = std::io::Write::write_all(&mut file, b"\n");
                let text = String::from_utf8_lossy(&line).trim().to_string();
                if tx.send(text).is_err() {
                    break;
                }
            }
        });
        Ok(Guest {
            nbdkit,
            qemu,
            lines: rx,
            log,
            started: Instant::now(),
            addr,
        })
    }

    /// What the worker last wrote to the channel disk (its length first),
    /// read once the guest is gone.
    pub fn read_dump(&self) -> Result<Vec<u8>> {
        let mut f = std::fs::File::open(&self.channel)?;
        let mut len = [0u8; 8];
        f.read_exact(&mut len)?;
        let len = u64::from_le_bytes(len);
        if len == 0 || len > CHANNEL_BYTES - 8 {
            bail!("the channel disk holds no dump (length {len})");
        }
        let mut b = vec![0; len as usize];
        f.read_exact(&mut b)?;
        Ok(b)
    }

    /// Zeroes the channel disk's length, so a stale dump is never read
    /// for a new one.
    pub fn clear_dump(&self) -> Result<()> {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&self.channel)?;
        std::os::unix::fs::FileExt::write_all_at(&f, &[0u8; 8], 0)?;
        Ok(())
    }
}

/// The console line the guest's init prints just before the command.
pub const COMMAND_STARTS: &str = "ferrite-guest-start";

/// A running machine: qemu and the nbdkit behind its store disk.
pub struct Guest {
    nbdkit: Server,
    qemu: Child,
    lines: mpsc::Receiver<String>,
    log: PathBuf,
    pub started: Instant,
    /// Where the forwarded guest port is reached, if one was asked for.
    pub addr: Option<std::net::SocketAddr>,
}

impl Guest {
    /// The console's next line, or `None` once `until` passes or the
    /// machine is gone.
    pub fn line(&self, until: Instant) -> Option<String> {
        let left = until.checked_duration_since(Instant::now())?;
        self.lines.recv_timeout(left).ok()
    }

    /// The last lines of the console, for an error.
    pub fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Waits for the machine to power itself off (its command ended and
    /// the store disk was unmounted) within `limit`.
    pub fn wait_off(&mut self, limit: Duration) -> Result<()> {
        let until = Instant::now() + limit;
        while Instant::now() < until {
            if self.qemu.try_wait()?.is_some() {
                self.nbdkit.kill();
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        bail!(
            "the guest did not power off within {limit:?} (console:\n{})",
            self.tail()
        )
    }

    /// The power cut: nbdkit first, so not one more write reaches its
    /// file, then qemu.
    pub fn cut(&mut self) {
        self.nbdkit.kill();
        let _ = self.qemu.kill();
        let _ = self.qemu.wait();
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        self.cut();
    }
}

fn run(cmd: &mut Command) -> Result<()> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}
