#!/usr/bin/env bash
# A million keys expiring with no one reading them: `ferrite serve` on each
# engine given, loaded with `SET ttl:... value PX t` (t uniform in
# 1,000-10,000 ms, scripts/big-data-resp.py ttl, seed 1), then polled once
# a second (t: seconds since the load ended): DBSIZE, INFO stats expired_keys and the store directory's size
# (du -sm). Prints one line per poll (docs/results/serve-expiry.md).
#
#   scripts/serve-expiry-space.sh [--seconds N] [--binary PATH] ENGINE...
#
# Needs redis-cli (scripts/install-redis-tools.sh) and python3.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=30
binary=target/release/ferrite
engines=()
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) seconds=$2; shift 2 ;;
        --binary) binary=$2; shift 2 ;;
        btree|lsm|zkv) engines+=("$1"); shift ;;
        *) echo "usage: $0 [--seconds N] [--binary PATH] ENGINE..." >&2; exit 2 ;;
    esac
done
[ ${#engines[@]} -gt 0 ] || engines=(btree lsm zkv)
port=${PORT:-6606}
scratch=$(mktemp -d -p "${TMPDIR:-/tmp}" ferrite-expiry-XXXXXX)
pid=""
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$scratch"
}
trap cleanup EXIT

python3 scripts/big-data-resp.py ttl 1000000 >"$scratch/ttl.resp"
for engine in "${engines[@]}"; do
    rm -rf "$scratch/store" && mkdir -p "$scratch/store"
    "$binary" serve --engine "$engine" --path "$scratch/store" --listen "127.0.0.1:$port" \
        --sync batched:1000 >"$scratch/serve.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
    start=$(date +%s.%N)
    redis-cli -p "$port" --pipe <"$scratch/ttl.resp" >/dev/null
    loaded=$(date +%s.%N)
    printf '%s load %.1f s\n' "$engine" "$(echo "$loaded - $start" | bc)"
    while :; do
        s=$(printf '%.1f' "$(echo "$(date +%s.%N) - $loaded" | bc)")
        [ "$(echo "$s > $seconds" | bc)" = 1 ] && break
        keys=$(redis-cli -p "$port" dbsize)
        expired=$(redis-cli -p "$port" info stats | tr -d '\r' | sed -n 's/^expired_keys://p')
        mib=$(du -sm "$scratch/store" | cut -f1)
        echo "$engine t=${s}s dbsize=$keys expired_keys=$expired store_mib=$mib"
        sleep 1
    done
    redis-cli -p "$port" shutdown >/dev/null 2>&1 || true
    wait "$pid" 2>/dev/null || true
    pid=""
    echo "$engine closed store_mib=$(du -sm "$scratch/store" | cut -f1)"
done
