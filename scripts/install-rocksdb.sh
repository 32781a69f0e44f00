#!/usr/bin/env bash
# Installs what the optional RocksDB baseline needs: Debian's librocksdb-dev
# (RocksDB 7.8) and clang/libclang for the crate's bindings. Building RocksDB
# from source instead takes over 15 minutes on a 2-core machine.
set -euo pipefail
if dpkg -s librocksdb-dev libclang-dev clang >/dev/null 2>&1; then
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "install-rocksdb: no apt-get; install RocksDB 7.x headers and libraries and libclang by hand" >&2
    exit 1
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq librocksdb-dev libclang-dev clang >/dev/null
