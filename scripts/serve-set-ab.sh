#!/usr/bin/env bash
# A/B of SET through `ferrite serve`: two `ferrite` binaries (A, B)
# alternated ROUNDS times, each round on a fresh store, with
# `redis-benchmark -t set -c 50 -n N -r 1000000 -d 100 -P 16` (the
# serve experiment's write load) at `--sync batched:1000 --cache-mb 440`.
# Prints one line per run, then the medians and B/A.
#
#   scripts/serve-set-ab.sh A_FERRITE B_FERRITE [ENGINE] [ROUNDS] [N]
#
# ENGINE is btree or lsm (default lsm), ROUNDS 5, N 1000000. Needs
# redis-benchmark (scripts/install-redis-tools.sh).
set -euo pipefail
a=$1 b=$2 engine=${3:-lsm} rounds=${4:-5} n=${5:-1000000}
work=$(mktemp -d -p "${TMPDIR:-/tmp}" serve-ab-XXXXXX)
pid=""
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
port=${PORT:-6640}
for r in $(seq "$rounds"); do
    for side in A B; do
        bin=$a; [ "$side" = B ] && bin=$b
        rm -rf "$work/store"
        "$bin" serve --engine "$engine" --path "$work/store" --listen "127.0.0.1:$port" \
            --sync batched:1000 --cache-mb 440 >"$work/server.log" 2>&1 &
        pid=$!
        for _ in $(seq 300); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
        rps=$(redis-benchmark -p "$port" -c 50 -n "$n" -r 1000000 -d 100 -P 16 -t set --csv |
            awk -F, '/^"SET"/ {gsub(/"/, "", $2); print $2}')
        redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || kill "$pid"
        wait "$pid" 2>/dev/null || true
        pid=""
        echo "$r $side $rps"
        echo "$side $rps" >>"$work/results"
    done
done
median() { grep "^$1 " "$work/results" | awk '{print $2}' | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
ma=$(median A) mb=$(median B)
echo "medians (SET/s): A $ma  B $mb  B/A $(awk -v a="$ma" -v b="$mb" 'BEGIN {printf "%.3f", b / a}')"
