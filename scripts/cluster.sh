#!/usr/bin/env bash
# A sharded ferrite on one machine: N `ferrite serve` nodes behind
# twemproxy (nutcracker) with ketama consistent hashing, all on loopback.
# docs/deploy.md says how the same setup spans machines.
#
#   scripts/cluster.sh start N DIR [PROXY_PORT]   start N nodes and the proxy
#   scripts/cluster.sh stop DIR                   stop the proxy and every node
#   scripts/cluster.sh stop-node DIR I            stop node I (1-based)
#   scripts/cluster.sh start-node DIR I           start node I again on its store
#   scripts/cluster.sh status DIR                 the proxy's and nodes' ports
#
# Node I listens on PROXY_PORT + I and keeps its store in DIR/node-I.
# Environment: FERRITE (the binary; default target/release/ferrite),
# ENGINE (default lsm), SYNC (default batched:10), CACHE_MB (default 256).
set -euo pipefail

FERRITE=${FERRITE:-target/release/ferrite}
ENGINE=${ENGINE:-lsm}
SYNC=${SYNC:-batched:10}
CACHE_MB=${CACHE_MB:-256}

die() { echo "cluster: $*" >&2; exit 1; }

wait_port() {
    for _ in $(seq 1 200); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
        sleep 0.05
    done
    die "nothing listens on port $1"
}

start_node() {
    local dir=$1 i=$2
    local base; base=$(cat "$dir/proxy-port")
    local port=$((base + i))
    mkdir -p "$dir/node-$i"
    nohup "$FERRITE" serve --engine "$ENGINE" --path "$dir/node-$i/store" \
        --listen "127.0.0.1:$port" --sync "$SYNC" --cache-mb "$CACHE_MB" \
        >"$dir/node-$i/log" 2>&1 &
    echo $! >"$dir/node-$i/pid"
    wait_port "$port"
}

stop_pid() {
    local f=$1
    [ -f "$f" ] || return 0
    local pid; pid=$(cat "$f")
    if kill -TERM "$pid" 2>/dev/null; then
        # A clean stop closes the store; wait for it.
        for _ in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    fi
    rm -f "$f"
}

cmd=${1:-}
case "$cmd" in
start)
    n=${2:?N}; dir=${3:?DIR}; base=${4:-22121}
    command -v nutcracker >/dev/null || die "nutcracker is not installed (scripts/install-redis-tools.sh)"
    [ -x "$FERRITE" ] || die "no ferrite binary at $FERRITE (cargo build --release, or set FERRITE)"
    mkdir -p "$dir"
    echo "$base" >"$dir/proxy-port"
    echo "$n" >"$dir/nodes"
    {
        echo "ferrite:"
        echo "  listen: 127.0.0.1:$base"
        echo "  hash: fnv1a_64"
        echo "  distribution: ketama"
        echo "  redis: true"
        # A node that is down fails its own keys; the others keep serving.
        echo "  auto_eject_hosts: false"
        echo "  timeout: 5000"
        echo "  servers:"
        for i in $(seq 1 "$n"); do echo "   - 127.0.0.1:$((base + i)):1 node$i"; done
    } >"$dir/nutcracker.yml"
    for i in $(seq 1 "$n"); do start_node "$dir" "$i"; done
    nohup nutcracker -c "$dir/nutcracker.yml" -o "$dir/nutcracker.log" -s $((base + 1000)) \
        >/dev/null 2>&1 &
    echo $! >"$dir/proxy-pid"
    wait_port "$base"
    echo "proxy 127.0.0.1:$base, nodes 127.0.0.1:$((base + 1))..$((base + n))"
    ;;
stop)
    dir=${2:?DIR}
    stop_pid "$dir/proxy-pid"
    for f in "$dir"/node-*/pid; do [ -e "$f" ] && stop_pid "$f"; done
    ;;
stop-node)
    stop_pid "${2:?DIR}/node-${3:?I}/pid"
    ;;
start-node)
    start_node "${2:?DIR}" "${3:?I}"
    ;;
status)
    dir=${2:?DIR}; base=$(cat "$dir/proxy-port"); n=$(cat "$dir/nodes")
    echo "proxy 127.0.0.1:$base"
    for i in $(seq 1 "$n"); do
        state=down; [ -f "$dir/node-$i/pid" ] && kill -0 "$(cat "$dir/node-$i/pid")" 2>/dev/null && state=up
        echo "node $i 127.0.0.1:$((base + i)) $state"
    done
    ;;
*)
    sed -n '2,16p' "$0" >&2
    exit 2
    ;;
esac
