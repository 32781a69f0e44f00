#!/usr/bin/env bash
# Records the block-map operations of a RASK volume driven by real NBD
# clients, for `ferrite repro rask --ops FILE` (RASK at steady state).
# Three streams, each on a fresh volume served with `--record-map-ops`:
#
#   bssplit      8 GiB volume: a sequential fill (128 KiB writes), 4 GiB of
#                random writes split as the CloudPhysics trace's write
#                sizes, 512 MiB of random reads of the same sizes
#   randwrite4k  the same with 4 KiB writes and reads (1 GiB of writes):
#                the paper's sparse-write case
#   trace        the CloudPhysics trace (every read and write, its sizes
#                and offsets, in order) replayed at QD 16 onto a sparse
#                volume as large as the trace's address space
#
# fio's nbd engine drives every stream, 2 jobs at QD 16 with an NBD flush
# every 16 writes per job (the trace: one job, its own order).
#
#   scripts/record-map-ops.sh OUT_DIR [FERRITE] [STREAM...]
set -euo pipefail
out=$1 ferrite=${2:-target/release/ferrite}
shift $(($# < 2 ? $# : 2))
streams=("$@")
[ ${#streams[@]} -gt 0 ] || streams=(bssplit randwrite4k trace)
data=${FERRITE_DATA:-../shared/data}
bssplit=4k/9:8k/27:16k/7:32k/5:64k/10:128k/42
mkdir -p "$out"
work=$(mktemp -d -p "${TMPDIR:-/tmp}" record-map-ops-XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
command -v fio >/dev/null && command -v nbdinfo >/dev/null ||
    { echo "needs fio and nbdinfo: scripts/install-nbd-tools.sh" >&2; exit 1; }

serve() { # stream, size, create options...
    local stream=$1 size=$2; shift 2
    rm -rf "$work/v" "$work/sock"
    "$ferrite" volume create --path "$work/v" --size "$size" "$@" >/dev/null
    "$ferrite" volume serve --path "$work/v" --unix "$work/sock" \
        --record-map-ops "$out/$stream.ops" >"$work/serve.log" 2>&1 &
    pid=$!
    uri="nbd+unix:///?socket=$work/sock"
    for _ in $(seq 100); do nbdinfo --size "$uri" >/dev/null 2>&1 && return; sleep 0.1; done
    cat "$work/serve.log" >&2; exit 1
}
stop() { # SIGINT: the server flushes and closes the recording
    kill -INT "$pid"; wait "$pid" || true
    echo "$1: $(stat -c %s "$out/$1.ops") bytes in $out/$1.ops"
}
job() {
    fio --ioengine=nbd --uri="$uri" --iodepth=16 --output="$work/fio.log" "$@" ||
        { cat "$work/fio.log" >&2; return 1; }
}

for stream in "${streams[@]}"; do
    case $stream in
        bssplit|randwrite4k)
            if [ "$stream" = bssplit ]; then bs=--bssplit=$bssplit; writes=4G
            else bs=--bs=4k; writes=1G; fi
            serve "$stream" 8G
            job --name=fill --rw=write --bs=128k --size=8G --fsync=16
            job --name=rw --rw=randwrite "$bs" --numjobs=2 --size=8G --fsync=16 \
                --randrepeat=0 --io_size=$writes
            job --name=rr --rw=randread "$bs" --numjobs=2 --size=8G --io_size=512M \
                --randrepeat=0
            stop "$stream" ;;
        trace)
            "$ferrite" trace --format cloudphysics "$data/traces/cloudphysics.csv" \
                --iolog "$work/trace.iolog" >/dev/null
            # The trace's address space, rounded up to the 64 MiB segment
            # (%.0f: mawk's %d stops at 2^31 - 1).
            end=$(awk 'NF == 4 { e = $3 + $4; if (e > m) m = e } END { printf "%.0f", m }' \
                "$work/trace.iolog")
            seg=$((64 << 20))
            serve trace $(((end + seg - 1) / seg * seg)) --sparse
            job --name=trace --filename=nbd --read_iolog="$work/trace.iolog" --replay_no_stall=1
            stop trace ;;
        *) echo "unknown stream $stream (bssplit, randwrite4k, trace)" >&2; exit 1 ;;
    esac
done
