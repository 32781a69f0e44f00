#!/usr/bin/env bash
# Installs the real Redis clients and servers the server's tests and
# `ferrite repro serve` run against: redis-cli and redis-benchmark
# (redis-tools), redis-server (the side-by-side reference), tcl (Valkey's
# Tcl test suite, scripts/redis-compat.sh, runs in it), nutcracker
# (twemproxy, for scripts/cluster.sh) and python3-venv (the tests put the
# Python client from PyPI in a venv of their own).
set -euo pipefail
pkgs=(redis-tools redis-server nutcracker python3-venv tcl)
if dpkg -s "${pkgs[@]}" >/dev/null 2>&1; then
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "install-redis-tools: no apt-get; install ${pkgs[*]} by hand" >&2
    exit 1
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
# The package starts no server here (no init system), and none is wanted.
