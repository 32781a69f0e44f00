#!/usr/bin/env bash
# Runs Valkey's own Tcl test suite (../shared/redis-compat/run: its 16 core
# files and unit/scripting) against `ferrite serve` on each engine named,
# and fails if fewer distinct tests pass than the floor: the count
# docs/results/redis-compat.md records, less a margin for the suite's few
# timing-dependent tests.
#
#   scripts/redis-compat.sh [--floor N] [--reference] [ENGINE...]   (default: lsm)
#
# The runner is ../shared/redis-compat/run (or $REDIS_COMPAT_RUN).
# --reference also runs the suite against redis-server (the count a fully
# compatible server reaches here). Needs tclsh (scripts/install-redis-tools.sh)
# and a release build of ferrite (cargo build --release).
set -euo pipefail
cd "$(dirname "$0")/.."

floor=1010
reference=0
engines=()
while [ $# -gt 0 ]; do
    case "$1" in
        --floor) floor=$2; shift 2 ;;
        --reference) reference=1; shift ;;
        -*) echo "redis-compat: unknown option $1" >&2; exit 2 ;;
        *) engines+=("$1"); shift ;;
    esac
done
[ ${#engines[@]} -gt 0 ] || engines=(lsm)
files=(unit/type/string unit/type/incr unit/type/hash unit/type/list unit/type/set
    unit/type/zset unit/keyspace unit/expire unit/multi unit/scan unit/protocol unit/quit unit/auth
    unit/info-command unit/pubsub unit/bitops unit/scripting)

# The suite sits beside the repository (../shared); a checkout cloned from
# a local repository also finds it beside that one.
suite=${REDIS_COMPAT_RUN:-../shared/redis-compat/run}
if [ ! -x "$suite" ]; then
    origin=$(git config --get remote.origin.url 2>/dev/null || true)
    if [ -n "$origin" ] && [ -x "$origin/../shared/redis-compat/run" ]; then
        suite="$origin/../shared/redis-compat/run"
    fi
fi
[ -x "$suite" ] || { echo "redis-compat: the suite's runner ($suite) was not found; set REDIS_COMPAT_RUN" >&2; exit 2; }
bin=target/release/ferrite
[ -x "$bin" ] || { echo "redis-compat: build first (cargo build --release)" >&2; exit 2; }

scratch=$(mktemp -d -p "${TMPDIR:-/tmp}" ferrite-compat-XXXXXX)
pid=""
cleanup() {
    [ -z "$pid" ] || kill "$pid" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$scratch"
}
trap cleanup EXIT

# Starts "$@" with a free loopback port in place of PORT; sets pid and port.
start() {
    for _ in 1 2 3 4 5 6 7 8; do
        port=$((20000 + RANDOM % 20000))
        "${@//PORT/$port}" >"$scratch/server.log" 2>&1 &
        pid=$!
        for _ in $(seq 100); do
            if redis-cli -p "$port" ping >/dev/null 2>&1; then return 0; fi
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        pid=""
    done
    echo "redis-compat: the server did not start:" >&2
    cat "$scratch/server.log" >&2
    return 1
}

# Runs the suite against the server on $port; prints its table and sets
# passed.
suite_run() {
    REDIS_COMPAT_LOGS="$scratch/logs-$1" "$suite" "$port" "${files[@]}" | tee "$scratch/out-$1"
    # The floor counts tests by name: the runner's count keeps each
    # passing line with its timing, so a file that runs every test in
    # several variants (unit/scripting runs four) counts more or fewer
    # lines as the timings happen to differ.
    passed=0
    for log in "$scratch/logs-$1"/*.log; do
        n=$(sed 's/\x1b\[[0-9;]*m//g' "$log" | { grep '^\[ok\]' || true; } | sed 's/ ([0-9]* ms)$//' | sort -u | wc -l)
        passed=$((passed + n))
    done
    echo "distinct tests passed: $passed"
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    pid=""
}

if [ "$reference" = 1 ]; then
    echo "-- redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p')"
    start redis-server --port PORT --bind 127.0.0.1 --save "" --appendonly yes \
        --appendfsync everysec --dir "$scratch"
    suite_run redis
fi

status=0
for engine in "${engines[@]}"; do
    echo "-- ferrite serve --engine $engine"
    start "$bin" serve --engine "$engine" --path "$scratch/$engine" --listen 127.0.0.1:PORT
    suite_run "$engine"
    if [ "${passed:-0}" -lt "$floor" ]; then
        echo "redis-compat: $engine passed ${passed:-0}, below the floor of $floor" >&2
        status=1
    fi
done
exit $status
