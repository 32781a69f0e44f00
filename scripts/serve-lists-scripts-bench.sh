#!/usr/bin/env bash
# Lists, BRPOP wake-ups and Lua scripts: `ferrite serve` (each engine
# named) against redis-server with AOF everysec, side by side, in rounds
# that alternate the servers (medians go in docs/results/serve-scripting.md).
#
#   scripts/serve-lists-scripts-bench.sh [--rounds N] [ENGINE...]   (default: lsm btree, 3 rounds)
#
# Per server and round: `redis-benchmark -t lpush,rpush,lpop,rpop,lrange_100
# -P 16 -c 50`, `EVALSHA` of a 10-command script from 50 clients, and
# scripts/brpop-latency.py (50 consumers blocked in BRPOP, one producer).
# Needs redis-server, redis-benchmark (scripts/install-redis-tools.sh),
# python3 and a release build (cargo build --release).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=3
engines=()
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) rounds=$2; shift 2 ;;
        -*) echo "unknown option $1" >&2; exit 2 ;;
        *) engines+=("$1"); shift ;;
    esac
done
[ ${#engines[@]} -gt 0 ] || engines=(lsm btree)
bin=target/release/ferrite
[ -x "$bin" ] || { echo "build first (cargo build --release)" >&2; exit 2; }

scratch=$(mktemp -d -p "${TMPDIR:-/tmp}" ferrite-lists-XXXXXX)
pid=""
cleanup() {
    [ -z "$pid" ] || kill "$pid" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$scratch"
}
trap cleanup EXIT

# Ten commands: five INCRs and five GETs of the key.
script='for i = 1, 5 do redis.call("incr", KEYS[1]) redis.call("get", KEYS[1]) end return 1'
n=${N:-200000}

start() {
    port=$((20000 + RANDOM % 20000))
    "${@//PORT/$port}" >"$scratch/server.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do
        [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ] && return 0
        sleep 0.1
    done
    cat "$scratch/server.log" >&2
    return 1
}

stop() {
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    pid=""
}

measure() {
    local name=$1 round=$2
    redis-benchmark -p "$port" -c 50 -P 16 -n "$n" -r 100000 --csv \
        -t lpush,rpush,lpop,rpop,lrange_100 | sed "s/^/$name,$round,/"
    sha=$(redis-cli -p "$port" script load "$script")
    redis-benchmark -p "$port" -c 50 -n $((n / 4)) -r 100000 --csv \
        evalsha "$sha" 1 'key:__rand_int__' | sed "s/^\"evalsha[^\"]*\"/\"EVALSHA 10 commands\"/; s/^/$name,$round,/"
    python3 scripts/brpop-latency.py "$port" 3000 50 | sed "s/^/$name,$round,brpop /"
}

for round in $(seq "$rounds"); do
    start redis-server --port PORT --bind 127.0.0.1 --save "" --appendonly yes \
        --appendfsync everysec --dir "$scratch"
    measure redis "$round"
    stop
    rm -rf "$scratch"/appendonly*
    for engine in "${engines[@]}"; do
        rm -rf "$scratch/$engine"
        start "$bin" serve --engine "$engine" --path "$scratch/$engine" \
            --listen 127.0.0.1:PORT --sync batched:1000
        measure "ferrite-$engine" "$round"
        stop
    done
done
