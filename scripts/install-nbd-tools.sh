#!/usr/bin/env bash
# Installs the real NBD clients and the baseline server that the volume's
# tests and `ferrite repro volume` run against: nbdinfo, nbdcopy and
# nbdfuse (libnbd-bin), qemu-img (qemu-utils), fio (with its nbd engine),
# e2fsprogs (mkfs.ext4, e2fsck, debugfs) and nbdkit (the `nbdkit file`
# baseline), plus fuse3 for nbdfuse's mount.
set -euo pipefail
pkgs=(libnbd-bin qemu-utils fio e2fsprogs nbdkit fuse3)
if dpkg -s "${pkgs[@]}" >/dev/null 2>&1; then
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "install-nbd-tools: no apt-get; install ${pkgs[*]} by hand" >&2
    exit 1
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
