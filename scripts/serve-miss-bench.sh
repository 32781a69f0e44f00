#!/usr/bin/env bash
# Reads that miss the cache: `ferrite serve` over a store ten times its
# cache, with key reads on the reader pool (the default), on the event
# loops only (`--readers 0`), and on eight loops (`--io-threads 8
# --readers 0`), in rounds that alternate the three (medians go in
# docs/results/serve.md); then the same store with every key in cache,
# readers on and off, to show what the pool costs when reads hit.
#
#   scripts/serve-miss-bench.sh [--rounds N] [--engines LIST] [BINARY]
#
# Per engine: a store filled through the server with `redis-benchmark -t
# set -c 50 -n 1000000 -r 1000000 -d 100 -P 16` and saved (out of the
# LSM's memtable), then per round and configuration `redis-benchmark -t
# get -c 50 -n 200000 -r 1000000 -d 100 -P {16,1} --csv` with an 11 MiB
# cache; in cache: a 440 MiB cache warmed by one pass of GETs, then GET
# at -P 16. Stores are uncompressed (`--compression none`): the
# benchmark's values are one byte repeated, which lz4 would shrink to a
# store no larger than the cache. Needs redis-benchmark
# (scripts/install-redis-tools.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=3
engines=btree,lsm
bin=target/release/ferrite
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) rounds=$2; shift 2 ;;
        --engines) engines=$2; shift 2 ;;
        -*) echo "usage: $0 [--rounds N] [--engines LIST] [BINARY]" >&2; exit 2 ;;
        *) bin=$1; shift ;;
    esac
done
port=${PORT:-6606}
scratch=$(mktemp -d -p "${TMPDIR:-/tmp}" ferrite-miss-XXXXXX)
pid=""
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$scratch"
}
trap cleanup EXIT

start() {
    "$bin" serve --engine "$engine" --path "$scratch/$engine" --listen "127.0.0.1:$port" \
        --sync batched:1000 --compression none "$@" >>"$scratch/server.log" 2>&1 &
    pid=$!
    for _ in $(seq 300); do redis-cli -p "$port" ping >/dev/null 2>&1 && return; sleep 0.1; done
    echo "the server did not start; its log:" >&2
    cat "$scratch/server.log" >&2
    exit 1
}

stop() {
    redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
    wait "$pid" 2>/dev/null || true
    pid=""
}

# kops/s of one redis-benchmark test.
rate() {
    local r
    r=$(redis-benchmark -p "$port" "$@" --csv 2>/dev/null | grep -E '^"[A-Z]' | cut -d, -f2 | tr -d '"')
    awk -v r="$r" 'BEGIN { printf "%.1f", r / 1000 }'
}

offloaded() {
    redis-cli -p "$port" info stats | tr -d '\r' | awk -F: '$1 == "reads_offloaded" { print $2 }'
}

config() {
    case "$1" in
        readers) echo "" ;;
        loops) echo "--readers 0" ;;
        loops8) echo "--io-threads 8 --readers 0" ;;
    esac
}

IFS=, read -r -a engine_list <<<"$engines"
for engine in "${engine_list[@]}"; do
    start --cache-mb 440
    redis-benchmark -p "$port" -t set -c 50 -n 1000000 -r 1000000 -d 100 -P 16 -q >/dev/null 2>&1
    redis-cli -p "$port" save >/dev/null
    echo "$engine store: $(redis-cli -p "$port" dbsize) keys, $(du -sm "$scratch/$engine" | cut -f1) MiB"
    stop
    for round in $(seq "$rounds"); do
        for c in readers loops loops8; do
            # shellcheck disable=SC2046
            start --cache-mb 11 $(config "$c")
            p16=$(rate -t get -c 50 -n 200000 -r 1000000 -d 100 -P 16)
            p1=$(rate -t get -c 50 -n 200000 -r 1000000 -d 100 -P 1)
            echo "miss $engine round $round $c GET-P16 $p16 GET-P1 $p1 offloaded $(offloaded)"
            stop
        done
    done
    for round in $(seq "$rounds"); do
        for c in readers loops; do
            # shellcheck disable=SC2046
            start --cache-mb 440 $(config "$c")
            redis-benchmark -p "$port" -t get -c 50 -n 1000000 -r 1000000 -d 100 -P 16 -q >/dev/null 2>&1
            p16=$(rate -t get -c 50 -n 500000 -r 1000000 -d 100 -P 16)
            echo "cached $engine round $round $c GET-P16 $p16 offloaded $(offloaded)"
            stop
        done
    done
    rm -rf "${scratch:?}/$engine"
done
