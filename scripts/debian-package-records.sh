#!/usr/bin/env bash
# Writes Debian's package index (bookworm, main, amd64: one record per
# binary package, the text `apt show` prints) to OUT, as the values of the
# compression benchmark (`ferrite bench --values records:OUT`). These are
# the records a package mirror, a dependency resolver or an inventory
# service keeps in a key-value store: short text fields, repeated field
# names, versions, hashes and free-text descriptions, about 1.2 KiB each.
# The index is apt's own copy (refreshed with apt-get update if missing).
set -euo pipefail
OUT=${1:?usage: debian-package-records.sh OUT}
lists=/var/lib/apt/lists
src=$(ls "$lists"/*debian_dists_bookworm_main_binary-amd64_Packages* 2>/dev/null | head -n1 || true)
if [ -z "$src" ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    src=$(ls "$lists"/*_main_binary-amd64_Packages* | head -n1)
fi
case "$src" in
    *.lz4) lz4cat "$src" >"$OUT" ;;
    *.xz) xzcat "$src" >"$OUT" ;;
    *.gz) zcat "$src" >"$OUT" ;;
    *) cp "$src" "$OUT" ;;
esac
echo "$(grep -c '^Package:' "$OUT") records, $(wc -c <"$OUT") bytes from $src ($(sha256sum "$OUT" | cut -c1-16))"
