#!/usr/bin/env bash
# Sorted-set writes and pops: `ferrite serve` builds (each on btree and
# lsm) against redis-server with AOF everysec, one server at a time on a
# fresh store, in rounds that alternate the servers (medians go in
# docs/results/serve-types.md).
#
#   scripts/serve-pops-bench.sh [--rounds N] [--tests LIST] NAME=BINARY...
#
# e.g. `scripts/serve-pops-bench.sh new=target/release/ferrite old=/tmp/ferrite-before`.
# Per server and round: `redis-benchmark -t zadd,zpopmin -P 16 -c 50 -n
# 1000000 -r 1000000 --csv` (ZADD fills one sorted set with up to a
# million random members; ZPOPMIN pops from it; `--tests` names other
# redis-benchmark tests, e.g. hset,sadd,spop). Needs redis-server and
# redis-benchmark (scripts/install-redis-tools.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=3
tests=zadd,zpopmin
builds=()
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) rounds=$2; shift 2 ;;
        --tests) tests=$2; shift 2 ;;
        *=*) builds+=("$1"); shift ;;
        *) echo "usage: $0 [--rounds N] [--tests LIST] NAME=BINARY..." >&2; exit 2 ;;
    esac
done
[ ${#builds[@]} -gt 0 ] || builds=(ferrite=target/release/ferrite)
port=${PORT:-6605}
scratch=$(mktemp -d -p "${TMPDIR:-/tmp}" ferrite-pops-XXXXXX)
pid=""
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$scratch"
}
trap cleanup EXIT

run() {
    local name=$1
    shift
    rm -rf "$scratch/store" && mkdir -p "$scratch/store"
    "$@" >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
    local out
    out=$(redis-benchmark -p "$port" -t "$tests" -P 16 -c 50 -n 1000000 -r 1000000 --csv 2>/dev/null |
        grep -E '^"[A-Z]' | cut -d, -f1,2 | tr -d '"' | tr '\n' ' ')
    echo "round $round $name $out"
    redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
    wait "$pid" 2>/dev/null || true
    pid=""
}

for round in $(seq "$rounds"); do
    run redis redis-server --port "$port" --appendonly yes --appendfsync everysec --save "" \
        --dir "$scratch/store"
    for b in "${builds[@]}"; do
        for engine in btree lsm; do
            run "${b%%=*}:$engine" "${b#*=}" serve --engine "$engine" --path "$scratch/store" \
                --listen "127.0.0.1:$port" --sync batched:1000
        done
    done
done
