#!/usr/bin/env bash
# Installs what the volume's guest test needs to boot a Linux guest whose
# root file system lives on a `ferrite volume serve` export (and the
# power-cut crash test, a guest on plain disks): qemu-system-x86
# and busybox-static from Debian, and, in FERRITE_GUEST_DIR (default
# ~/.cache/ferrite/qemu-guest), a kernel and an initramfs built from
# Debian's cloud kernel package. The initramfs only loads the modules a
# virtio disk and ext4 need (those the kernel does not build in), mounts
# /dev/vda and hands over to the /sbin/init found there, so everything the
# guest does happens on the volume.
set -euo pipefail
dir=${FERRITE_GUEST_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ferrite/qemu-guest}
pkgs=(qemu-system-x86 busybox-static kmod)
# The modules the initramfs loads: a virtio disk, ext4, and a virtio
# network card (the power-cut crash test reaches servers in the guest).
modules="virtio_pci virtio_blk ext4 crc32c_generic virtio_net"
# The guest runs /bin/busybox itself, so it must be the static build.
if [ -s "$dir/vmlinuz" ] && [ -s "$dir/initrd.img" ] && [ "$(cat "$dir/modules" 2>/dev/null)" = "$modules" ] &&
    dpkg -s "${pkgs[@]}" >/dev/null 2>&1; then
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "install-qemu-guest: no apt-get; install qemu-system-x86 and a static busybox by hand" >&2
    exit 1
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if ! dpkg -s "${pkgs[@]}" >/dev/null 2>&1; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
fi

# The kernel comes from its package, unpacked rather than installed, so
# the host's /boot and bootloader are left alone.
image=$(apt-cache depends linux-image-cloud-amd64 | awk '/Depends: linux-image-/ {print $2; exit}')
if [ -z "$image" ]; then
    echo "install-qemu-guest: apt knows no linux-image-cloud-amd64" >&2
    exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# apt's download sandbox user must be able to write where it downloads.
chmod 755 "$work"
mkdir "$work/dl"
if [ "$(id -u)" -eq 0 ] && id _apt >/dev/null 2>&1; then
    chown _apt "$work/dl"
fi
(cd "$work/dl" && apt-get download -qq "$image" >/dev/null)
dpkg-deb -x "$work"/dl/linux-image-*.deb "$work/pkg"
version=${image#linux-image-}
moddir="$work/pkg/lib/modules/$version"
[ -d "$moddir" ] || { echo "install-qemu-guest: $image has no modules for $version" >&2; exit 1; }
# The package leaves modules.dep to the installing host's depmod.
depmod -b "$work/pkg" "$version"

# The modules the guest needs, each after those it depends on
# (modules.dep lists a module's dependencies after its own path).
order=()
declare -A seen
add() {
    local path=$1 dep
    [ -n "${seen[$path]:-}" ] && return
    seen[$path]=1
    for dep in $(awk -v m="$path:" '$1 == m {for (i = 2; i <= NF; i++) print $i}' "$moddir/modules.dep"); do
        add "$dep"
    done
    order+=("$path")
}
for name in $modules; do
    path=$(awk -F: -v n="/$name.ko" 'index($1, n) && substr($1, length($1) - length(n) + 1) == n {print $1; exit}' \
        "$moddir/modules.dep")
    # A module the kernel has built in is not listed; nothing to load.
    [ -n "$path" ] && add "$path"
done

root="$work/initramfs"
mkdir -p "$root"/{bin,dev,proc,sys,newroot,modules}
cp /bin/busybox "$root/bin/busybox"
for m in "${order[@]}"; do
    case "$m" in
        *.ko) cp "$moddir/$m" "$root/modules/" ;;
        *.ko.xz) xz -dc "$moddir/$m" >"$root/modules/$(basename "${m%.xz}")" ;;
        *.ko.zst) zstd -qdc "$moddir/$m" >"$root/modules/$(basename "${m%.zst}")" ;;
        *) echo "install-qemu-guest: cannot unpack $m" >&2; exit 1 ;;
    esac
    basename "${m%.ko*}.ko" >>"$root/modules/order"
done
cat >"$root/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in $(cat /modules/order); do
    insmod /modules/$m 2>/dev/null
done
for i in $(seq 50); do
    [ -b /dev/vda ] && break
    sleep 0.1
done
if ! mount -t ext4 -o rw /dev/vda /newroot; then
    echo "ferrite-guest: cannot mount /dev/vda"
    poweroff -f
fi
umount /proc /sys /dev
exec switch_root /newroot /sbin/init
INIT
chmod +x "$root/init"
mkdir -p "$dir"
(cd "$root" && find . | /bin/busybox cpio -o -H newc 2>/dev/null | gzip -9) >"$dir/initrd.img.tmp"
cp "$work/pkg/boot/vmlinuz-$version" "$dir/vmlinuz.tmp"
mv "$dir/initrd.img.tmp" "$dir/initrd.img"
mv "$dir/vmlinuz.tmp" "$dir/vmlinuz"
echo "$version" >"$dir/version"
echo "$modules" >"$dir/modules"
echo "install-qemu-guest: kernel $version and its initramfs in $dir"
