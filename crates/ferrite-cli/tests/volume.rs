//! `ferrite volume serve` against real NBD clients: nbdinfo, qemu-img,
//! nbdcopy, fio's nbd engine, ext4 (mkfs, e2fsck, debugfs, and nbdfuse
//! where FUSE works), a Linux guest under qemu whose root file system is
//! the volume, a kill -9 in the middle of a write stream, and a raw
//! client sending what the protocol forbids. The clients come from
//! `scripts/install-nbd-tools.sh` and the guest from
//! `scripts/install-qemu-guest.sh`; a test whose client is missing says
//! so and passes without running.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::{RngCore, SeedableRng};

mod common;

fn ferrite() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ferrite"))
}

const NBD_TOOLS: &str = "scripts/install-nbd-tools.sh";

fn have(tool: &str) -> bool {
    common::have(tool, NBD_TOOLS)
}

fn missing(tool: &str) {
    common::missing(tool, NBD_TOOLS)
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn create(dir: &Path, size: &str, segment: &str) {
    run(ferrite().args([
        "volume",
        "create",
        "--path",
        dir.to_str().unwrap(),
        "--size",
        size,
        "--segment-size",
        segment,
    ]));
}

/// A running `ferrite volume serve`; killed if dropped running.
struct Server {
    proc: ferrite_process::Server,
    uri: String,
    port: u16,
}

impl Server {
    fn start(dir: &Path) -> Self {
        let mut cmd = ferrite();
        cmd.args(["volume", "serve", "--path", dir.to_str().unwrap()])
            .args(["--listen", "127.0.0.1:0"])
            .stderr(Stdio::inherit());
        let proc = ferrite_process::Server::start(
            cmd,
            "ferrite volume serve",
            ferrite_process::Ready::FirstLine,
            Duration::from_secs(120),
        )
        .unwrap();
        // "ferrite volume serving "ferrite" on nbd://127.0.0.1:PORT/ferrite (...)"
        let line = proc.first_line();
        let uri = line
            .split_whitespace()
            .find(|w| w.starts_with("nbd://"))
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .to_string();
        let port = proc.announced_addr().unwrap().port();
        Self { proc, uri, port }
    }

    /// SIGTERM and wait: the server flushes and closes the volume.
    fn stop(self) {
        self.proc.stop(Duration::from_secs(120)).unwrap();
    }

    /// SIGKILL: no flush, no close.
    fn kill(mut self) {
        self.proc.kill();
    }
}

fn check(dir: &Path) {
    let out = run(ferrite().args(["volume", "check", "--path", dir.to_str().unwrap()]));
    assert!(out.contains("ok"), "{out}");
}

fn random_file(path: &Path, bytes: usize, seed: u64) {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut chunk = vec![0u8; 1 << 20];
    for _ in 0..bytes / chunk.len() {
        rng.fill_bytes(&mut chunk);
        f.write_all(&chunk).unwrap();
    }
    f.flush().unwrap();
}

#[test]
fn nbdinfo_sees_the_export_and_its_flags() {
    if !have("nbdinfo") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    create(dir.path(), "256M", "16M");
    let s = Server::start(dir.path());
    let out = run(Command::new("nbdinfo").arg(&s.uri));
    for want in [
        "export-size: 268435456",
        "can_flush: true",
        "can_fua: true",
        "can_trim: true",
        "can_zero: true",
        "can_multi_conn: true",
        "is_read_only: false",
        "block_size_preferred: 4096",
    ] {
        assert!(out.contains(want), "{want:?} not in\n{out}");
    }
    let list = run(Command::new("nbdinfo").args(["--list", &s.uri]));
    assert!(list.contains("export=\"ferrite\""), "{list}");
    s.stop();
}

#[test]
fn qemu_img_convert_and_compare_survive_a_restart() {
    if !have("qemu-img") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let vol = dir.path().join("vol");
    create(&vol, "1G", "64M");
    let img = dir.path().join("src.img");
    random_file(&img, 1 << 30, 1);
    let s = Server::start(&vol);
    let img_s = img.to_str().unwrap();
    run(Command::new("qemu-img").args(["convert", "-n", "-f", "raw", "-O", "raw", img_s, &s.uri]));
    let out =
        run(Command::new("qemu-img").args(["compare", "-f", "raw", "-F", "raw", img_s, &s.uri]));
    assert!(out.contains("Images are identical"), "{out}");
    s.stop();
    check(&vol);
    let s = Server::start(&vol);
    let out =
        run(Command::new("qemu-img").args(["compare", "-f", "raw", "-F", "raw", img_s, &s.uri]));
    assert!(
        out.contains("Images are identical"),
        "after a restart: {out}"
    );
    s.stop();
}

#[test]
fn nbdcopy_both_ways_and_trim_reads_back_zeroes() {
    if !have("nbdcopy") || !have("fio") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let vol = dir.path().join("vol");
    create(&vol, "64M", "4M");
    let src = dir.path().join("src.img");
    random_file(&src, 64 << 20, 2);
    let s = Server::start(&vol);
    run(Command::new("nbdcopy").args([src.to_str().unwrap(), &s.uri]));
    let back = dir.path().join("back.img");
    run(Command::new("nbdcopy").args([&s.uri, back.to_str().unwrap()]));
    assert!(std::fs::read(&src).unwrap() == std::fs::read(&back).unwrap());
    // Discard the first 16 MiB with fio's trim; it reads back as zeroes.
    run(Command::new("fio").args([
        "--name=trim",
        "--ioengine=nbd",
        &format!("--uri={}", s.uri),
        "--rw=trim",
        "--bs=1M",
        "--size=16M",
    ]));
    run(Command::new("nbdcopy").args([&s.uri, back.to_str().unwrap()]));
    let got = std::fs::read(&back).unwrap();
    let want = std::fs::read(&src).unwrap();
    assert!(
        got[..16 << 20].iter().all(|&b| b == 0),
        "trimmed range not zero"
    );
    assert!(
        got[16 << 20..] == want[16 << 20..],
        "untrimmed range changed"
    );
    s.stop();
    check(&vol);
}

fn fio(uri: &str, args: &[&str]) -> Command {
    let mut c = Command::new("fio");
    // No verify state file: a killed job would leave one in the cwd.
    c.args(["--name=job", "--ioengine=nbd", &format!("--uri={uri}")])
        .arg("--verify_state_save=0")
        .args(args);
    c
}

#[test]
fn fio_random_writes_verify_with_crc32c() {
    if !have("fio") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    create(dir.path(), "256M", "8M");
    let s = Server::start(dir.path());
    let out = run(&mut fio(
        &s.uri,
        &[
            "--rw=randwrite",
            "--bsrange=4k-64k",
            "--size=128M",
            "--iodepth=16",
            "--verify=crc32c",
            "--verify_fatal=1",
            "--do_verify=1",
            "--fsync=16",
        ],
    ));
    assert!(out.contains("err= 0"), "{out}");
    s.stop();
    check(dir.path());
}

/// Writes and flushes region A, then kill -9s the server in the middle
/// of a stream of random writes to region B; after a restart region A
/// verifies exactly and the map checks.
#[test]
fn kill_9_mid_write_keeps_every_flushed_write() {
    if !have("fio") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    create(dir.path(), "256M", "4M");
    let s = Server::start(dir.path());
    let region_a = [
        "--rw=write",
        "--bs=64k",
        "--size=64M",
        "--verify=crc32c",
        "--do_verify=0",
        "--end_fsync=1",
        "--iodepth=8",
    ];
    run(&mut fio(&s.uri, &region_a));
    // Then 4 MiB chunks one after another, each a job of random writes
    // whose exit acknowledges its final flush, until the kill: every
    // chunk acknowledged before it must read back, not just region A.
    let chunk = |i: u64| -> Vec<String> {
        [
            "--rw=randwrite".to_string(),
            "--bs=4k".into(),
            format!("--offset={}M", 128 + 4 * i),
            "--size=4M".into(),
            "--verify=crc32c".into(),
            "--do_verify=0".into(),
            "--end_fsync=1".into(),
            "--iodepth=16".into(),
        ]
        .to_vec()
    };
    let acked = Arc::new(Mutex::new(Vec::new()));
    let writer = {
        let (acked, uri) = (acked.clone(), s.uri.clone());
        std::thread::spawn(move || {
            for i in 0..32 {
                let args = chunk(i);
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let ok = fio(&uri, &args)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|st| st.success());
                if !ok {
                    break;
                }
                acked.lock().unwrap().push(i);
            }
        })
    };
    std::thread::sleep(Duration::from_millis(1500));
    s.kill();
    writer.join().unwrap();
    let acked = acked.lock().unwrap().clone();
    assert!(
        !acked.is_empty() && acked.len() < 32,
        "the kill should land after some chunks and before the last: {acked:?}"
    );
    check(dir.path());
    let s = Server::start(dir.path());
    let mut verify: Vec<&str> = region_a.to_vec();
    verify.push("--verify_only");
    let out = run(&mut fio(&s.uri, &verify));
    assert!(out.contains("err= 0"), "{out}");
    for i in acked {
        let mut args = chunk(i);
        args.push("--verify_only".into());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run(&mut fio(&s.uri, &args));
        assert!(
            out.contains("err= 0"),
            "chunk {i}, flushed before the kill: {out}"
        );
    }
    s.stop();
}

#[test]
fn an_ext4_image_copied_in_checks_clean_and_reads_back() {
    for tool in ["mkfs.ext4", "e2fsck", "debugfs", "nbdcopy"] {
        if !have_any(tool) {
            return;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().join("files");
    std::fs::create_dir(&files).unwrap();
    for i in 0..20u64 {
        random_file(
            &files.join(format!("f{i}")),
            (1 + i as usize % 3) << 20,
            10 + i,
        );
    }
    let vol = dir.path().join("vol");
    let s = volume_holding_ext4(&files, &vol, "128M", "4M");
    s.stop();
    let s = Server::start(&vol);
    let out_img = dir.path().join("out.img");
    run(Command::new("nbdcopy").args([&s.uri, out_img.to_str().unwrap()]));
    s.stop();
    run(Command::new("e2fsck").args(["-fn", out_img.to_str().unwrap()]));
    for i in [0u64, 7, 19] {
        let dumped = dir.path().join(format!("d{i}"));
        run(Command::new("debugfs").args([
            "-R",
            &format!("dump f{i} {}", dumped.display()),
            out_img.to_str().unwrap(),
        ]));
        assert!(
            std::fs::read(&dumped).unwrap() == std::fs::read(files.join(format!("f{i}"))).unwrap(),
            "f{i} differs"
        );
    }
}

/// A new volume at `vol` holding an ext4 file system of `size` made from
/// the directory `files` (`mkfs.ext4 -d`, then nbdcopy); returns its
/// server, still running.
fn volume_holding_ext4(files: &Path, vol: &Path, size: &str, segment: &str) -> Server {
    let img = vol.with_extension("img");
    run(Command::new("mkfs.ext4").args([
        "-q",
        "-F",
        "-d",
        files.to_str().unwrap(),
        img.to_str().unwrap(),
        size,
    ]));
    create(vol, size, segment);
    let s = Server::start(vol);
    run(Command::new("nbdcopy").args([img.to_str().unwrap(), &s.uri]));
    std::fs::remove_file(&img).unwrap();
    s
}

/// `tool` exists on PATH (for tools without `--version`).
fn have_any(tool: &str) -> bool {
    let found = std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p)
            .chain([PathBuf::from("/sbin"), PathBuf::from("/usr/sbin")])
            .any(|d| d.join(tool).exists())
    });
    if !found {
        missing(tool);
    }
    found
}

/// mkfs.ext4 on the live volume through nbdfuse, files written with
/// debugfs, then after a server restart e2fsck is clean and they read
/// back. Needs FUSE (`/dev/fuse`).
#[test]
fn mkfs_ext4_through_nbdfuse() {
    if !Path::new("/dev/fuse").exists() {
        common::missing("/dev/fuse", "the kernel's fuse module");
        return;
    }
    for tool in ["nbdfuse", "mkfs.ext4", "e2fsck", "debugfs", "fusermount3"] {
        if !have_any(tool) {
            return;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let vol = dir.path().join("vol");
    create(&vol, "256M", "8M");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let src = dir.path().join("payload");
    random_file(&src, 3 << 20, 5);
    let mount = |uri: &str| {
        let child = Command::new("nbdfuse")
            .args([mnt.to_str().unwrap(), uri])
            .spawn()
            .unwrap();
        let dev = mnt.join("nbd");
        for _ in 0..100 {
            if dev.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        (child, dev)
    };
    let unmount = |mut child: Child| {
        run(Command::new("fusermount3").args(["-u", mnt.to_str().unwrap()]));
        let _ = child.wait();
    };
    let s = Server::start(&vol);
    let (child, dev) = mount(&s.uri);
    let d = dev.to_str().unwrap().to_string();
    run(Command::new("mkfs.ext4").args(["-q", "-F", &d]));
    run(Command::new("debugfs").args([
        "-w",
        "-R",
        &format!("write {} payload", src.display()),
        &d,
    ]));
    unmount(child);
    s.stop();
    let s = Server::start(&vol);
    let (child, dev) = mount(&s.uri);
    let d = dev.to_str().unwrap().to_string();
    run(Command::new("e2fsck").args(["-fn", &d]));
    let out = dir.path().join("out");
    run(Command::new("debugfs").args(["-R", &format!("dump payload {}", out.display()), &d]));
    unmount(child);
    s.stop();
    assert!(std::fs::read(&out).unwrap() == std::fs::read(&src).unwrap());
}

/// A raw client: the handshake up to NBD_OPT_GO.
fn raw_client(port: u16) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut hello = [0u8; 18];
    s.read_exact(&mut hello).unwrap();
    assert_eq!(&hello[..8], b"NBDMAGIC");
    s.write_all(&3u32.to_be_bytes()).unwrap();
    let mut opt = Vec::new();
    opt.extend_from_slice(b"IHAVEOPT");
    opt.extend_from_slice(&7u32.to_be_bytes());
    opt.extend_from_slice(&6u32.to_be_bytes()); // 4 + 0 name + 2
    opt.extend_from_slice(&0u32.to_be_bytes());
    opt.extend_from_slice(&0u16.to_be_bytes());
    s.write_all(&opt).unwrap();
    loop {
        let mut h = [0u8; 20];
        s.read_exact(&mut h).unwrap();
        let kind = u32::from_be_bytes(h[12..16].try_into().unwrap());
        let len = u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize;
        let mut body = vec![0u8; len];
        s.read_exact(&mut body).unwrap();
        assert!(kind < 1 << 31, "GO failed with {kind:#x}");
        if kind == 1 {
            return s;
        }
    }
}

fn request(s: &mut TcpStream, cmd: u16, cookie: u64, offset: u64, len: u32, payload: &[u8]) {
    let mut b = Vec::new();
    b.extend_from_slice(&0x2560_9513u32.to_be_bytes());
    b.extend_from_slice(&0u16.to_be_bytes());
    b.extend_from_slice(&cmd.to_be_bytes());
    b.extend_from_slice(&cookie.to_be_bytes());
    b.extend_from_slice(&offset.to_be_bytes());
    b.extend_from_slice(&len.to_be_bytes());
    b.extend_from_slice(payload);
    s.write_all(&b).unwrap();
}

/// (error, cookie) of the next simple reply, and `data` bytes after it.
fn reply(s: &mut TcpStream, data: usize) -> (u32, u64) {
    let mut h = [0u8; 16];
    s.read_exact(&mut h).unwrap();
    assert_eq!(u32::from_be_bytes(h[..4].try_into().unwrap()), 0x6744_6698);
    let err = u32::from_be_bytes(h[4..8].try_into().unwrap());
    if err == 0 && data > 0 {
        let mut d = vec![0u8; data];
        s.read_exact(&mut d).unwrap();
    }
    (err, u64::from_be_bytes(h[8..16].try_into().unwrap()))
}

fn closed(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 1];
    matches!(s.read(&mut b), Ok(0) | Err(_))
}

#[test]
fn protocol_violations_get_errors_or_close_only_that_client() {
    let dir = tempfile::tempdir().unwrap();
    create(dir.path(), "16M", "1M");
    let s = Server::start(dir.path());
    let size = 16u64 << 20;
    // Garbage instead of the client flags: that connection closes.
    let mut g = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    g.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut hello = [0u8; 18];
    g.read_exact(&mut hello).unwrap();
    g.write_all(&[0xff; 64]).unwrap();
    assert!(closed(&mut g));
    // Bad requests get their error numbers on a connection that lives on.
    let mut c = raw_client(s.port);
    request(&mut c, 0, 1, size - 512, 4096, &[]); // read past the end
    assert_eq!(reply(&mut c, 4096), (22, 1));
    request(&mut c, 1, 2, size, 512, &[7u8; 512]); // write past the end
    assert_eq!(reply(&mut c, 0), (28, 2));
    request(&mut c, 77, 3, 0, 0, &[]); // unknown command
    assert_eq!(reply(&mut c, 0), (22, 3));
    request(&mut c, 0, 4, 0, 64 << 20, &[]); // read over the maximum
    assert_eq!(reply(&mut c, 0), (22, 4));
    request(&mut c, 4, 5, u64::MAX - 100, 4096, &[]); // trim wrapping around
    assert_eq!(reply(&mut c, 0), (22, 5));
    request(&mut c, 1, 6, 1000, 3000, &[9u8; 3000]); // unaligned: fine
    assert_eq!(reply(&mut c, 0), (0, 6));
    request(&mut c, 0, 7, 1000, 3000, &[]);
    let mut h = [0u8; 16];
    c.read_exact(&mut h).unwrap();
    let mut d = vec![0u8; 3000];
    c.read_exact(&mut d).unwrap();
    assert!(d.iter().all(|&b| b == 9));
    // A bad magic closes the connection.
    c.write_all(&[0u8; 28]).unwrap();
    assert!(closed(&mut c));
    // A client that vanishes halfway through a write's payload.
    let mut v = raw_client(s.port);
    request(&mut v, 1, 8, 0, 4096, &[1u8; 100]);
    drop(v);
    // The server still serves everyone else, and the half write left no trace.
    let mut c = raw_client(s.port);
    request(&mut c, 0, 9, 0, 4096, &[]);
    let mut h = [0u8; 16];
    c.read_exact(&mut h).unwrap();
    assert_eq!(u32::from_be_bytes(h[4..8].try_into().unwrap()), 0);
    let mut d = vec![0u8; 4096];
    c.read_exact(&mut d).unwrap();
    assert!(d[..1000].iter().all(|&b| b == 0));
    request(&mut c, 3, 10, 0, 0, &[]); // flush
    assert_eq!(reply(&mut c, 0), (0, 10));
    request(&mut c, 2, 11, 0, 0, &[]); // disconnect
    assert!(closed(&mut c));
    s.stop();
    check(dir.path());
}

/// Where `scripts/install-qemu-guest.sh` put the guest's kernel and
/// initramfs.
fn guest_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("FERRITE_GUEST_DIR") {
        return PathBuf::from(d);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache"),
        PathBuf::from,
    );
    cache.join("ferrite").join("qemu-guest")
}

/// The guest's /sbin/init: it runs one step, named on the kernel command
/// line, on the root file system it booted from (the volume), then
/// remounts it read-only and powers off. Its verdicts are lines starting
/// with "ferrite-guest:" on the serial console.
const GUEST_INIT: &str = r#"#!/bin/busybox sh
/bin/busybox --install -s /bin 2>/dev/null
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
step=$(sed -n 's/.*ferrite\.step=\([a-z]*\).*/\1/p' /proc/cmdline)
case "$step" in
write)
    # Files of many sizes, every third removed again, so ext4 allocates,
    # frees and reuses blocks; then one large file.
    i=0
    while [ $i -lt 200 ]; do
        dd if=/dev/urandom of=/data/f$i bs=4k count=$((1 + i % 37)) 2>/dev/null
        i=$((i + 1))
    done
    i=0
    while [ $i -lt 200 ]; do
        rm /data/f$i
        i=$((i + 3))
    done
    dd if=/dev/urandom of=/data/blob bs=1M count=48 2>/dev/null
    (cd /data && sha256sum * >/sums) && mv /sums /data/SHA256SUMS
    sync
    echo "ferrite-guest: wrote $(ls /data | wc -l) files"
    echo "ferrite-guest: blob $(sha256sum /data/blob | cut -d' ' -f1)"
    ;;
verify)
    if (cd /data && sha256sum -c -s SHA256SUMS); then
        echo "ferrite-guest: verified $(wc -l </data/SHA256SUMS) files"
    else
        echo "ferrite-guest: MISMATCH"
        (cd /data && sha256sum -c SHA256SUMS 2>&1 | grep -v OK)
    fi
    dd if=/dev/urandom of=/data/after-restart bs=1M count=8 2>/dev/null
    sync
    echo "ferrite-guest: after-restart $(sha256sum /data/after-restart | cut -d' ' -f1)"
    ;;
*)
    echo "ferrite-guest: no step named"
    ;;
esac
mount -o remount,ro /
echo "ferrite-guest: done"
poweroff -f
"#;

/// Boots the guest with its root on `uri` and returns what it printed on
/// the serial console; fails on a timeout or without "ferrite-guest: done".
fn boot_guest(kernel_dir: &Path, uri: &str, step: &str, log: &Path) -> String {
    // Emulation, not KVM: a nested /dev/kvm can be present and still hang
    // the guest (it does on the firecracker VMs CI runs on), and the boot
    // takes seconds emulated.
    let mut qemu = Command::new("qemu-system-x86_64")
        .args(["-machine", "accel=tcg", "-m", "256", "-smp", "1"])
        .args(["-display", "none", "-monitor", "none", "-serial", "stdio"])
        .args(["-no-reboot"])
        .arg("-kernel")
        .arg(kernel_dir.join("vmlinuz"))
        .arg("-initrd")
        .arg(kernel_dir.join("initrd.img"))
        .args([
            "-append",
            &format!("console=ttyS0 panic=-1 quiet ferrite.step={step}"),
        ])
        .args([
            "-drive",
            &format!("file={uri},format=raw,if=virtio,cache=writeback"),
        ])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(log).unwrap())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    // Far above the ~10 s a boot takes here, for a loaded host.
    let deadline = std::time::Instant::now() + Duration::from_secs(600);
    let status = loop {
        if let Some(st) = qemu.try_wait().unwrap() {
            break st;
        }
        if std::time::Instant::now() > deadline {
            let _ = qemu.kill();
            let _ = qemu.wait();
            panic!(
                "the guest did not power off in time:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let out = String::from_utf8_lossy(&std::fs::read(log).unwrap()).into_owned();
    assert!(
        status.success() && out.contains("ferrite-guest: done"),
        "qemu exited with {status}:\n{out}"
    );
    out
}

/// The word after `prefix` on the console line that starts with it.
fn guest_says<'a>(out: &'a str, prefix: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.trim().strip_prefix(prefix))
        .unwrap_or_else(|| panic!("the guest never said {prefix:?}:\n{out}"))
        .trim()
}

/// A Linux guest under qemu boots with its root file system on the
/// volume: it writes files, the server is killed with SIGKILL, and a
/// second boot finds every file intact and writes more; after a clean
/// stop the volume checks clean, e2fsck finds the file system clean, and
/// what the guest wrote reads back on the host with the same checksums.
/// Needs `scripts/install-qemu-guest.sh`.
#[test]
fn a_qemu_guest_boots_from_the_volume_and_its_files_survive_kill_9() {
    let kernel_dir = guest_dir();
    if !kernel_dir.join("vmlinuz").exists() || !kernel_dir.join("initrd.img").exists() {
        common::missing(
            &format!("a guest kernel in {}", kernel_dir.display()),
            "scripts/install-qemu-guest.sh",
        );
        return;
    }
    for tool in [
        "qemu-system-x86_64",
        "mkfs.ext4",
        "e2fsck",
        "debugfs",
        "nbdcopy",
        "sha256sum",
    ] {
        if !have_any(tool) {
            return;
        }
    }
    if !Path::new("/bin/busybox").exists() {
        common::missing("/bin/busybox", "scripts/install-qemu-guest.sh");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    for d in ["bin", "sbin", "dev", "proc", "sys", "data"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::copy("/bin/busybox", root.join("bin/busybox")).unwrap();
    std::fs::write(root.join("sbin/init"), GUEST_INIT).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        root.join("sbin/init"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let vol = dir.path().join("vol");
    let s = volume_holding_ext4(&root, &vol, "256M", "8M");

    let log = dir.path().join("console.log");
    let out = boot_guest(&kernel_dir, &s.uri, "write", &log);
    let blob = guest_says(&out, "ferrite-guest: blob").to_string();
    assert!(out.contains("ferrite-guest: wrote 135 files"), "{out}");
    s.kill();

    let s = Server::start(&vol);
    let out = boot_guest(&kernel_dir, &s.uri, "verify", &log);
    assert!(!out.contains("MISMATCH"), "{out}");
    assert_eq!(guest_says(&out, "ferrite-guest: verified"), "134 files");
    let after = guest_says(&out, "ferrite-guest: after-restart").to_string();
    s.stop();
    check(&vol);

    let s = Server::start(&vol);
    let copy = dir.path().join("out.img");
    run(Command::new("nbdcopy").args([&s.uri, copy.to_str().unwrap()]));
    s.stop();
    run(Command::new("e2fsck").args(["-fn", copy.to_str().unwrap()]));
    for (name, sum) in [("blob", &blob), ("after-restart", &after)] {
        let dumped = dir.path().join(name);
        run(Command::new("debugfs").args([
            "-R",
            &format!("dump /data/{name} {}", dumped.display()),
            copy.to_str().unwrap(),
        ]));
        let host = run(Command::new("sha256sum").arg(&dumped));
        assert_eq!(host.split_whitespace().next(), Some(sum.as_str()), "{name}");
    }
}
