#!/usr/bin/env bash
# A/B of random 4 KiB writes through NBD: two `ferrite` binaries (A, B)
# and `nbdkit file` (the baseline), alternated ROUNDS times, each on a
# fresh 1 GiB target filled to 80%, then fio randwrite 4k, 2 jobs at
# QD 16, an NBD flush every 16 writes per job (as `ferrite repro volume`).
# Prints one line per run; medians at the end.
#
#   scripts/volume-write-ab.sh OLD_FERRITE NEW_FERRITE [ROUNDS] [SECONDS]
set -euo pipefail
a=$1 b=$2 rounds=${3:-3} secs=${4:-10}
work=$(mktemp -d -p "${TMPDIR:-/tmp}" volume-ab-XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
port=10900
fill=$((1024 * 8 / 10))M
run() { # name, serve command...
    local name=$1; shift
    "$@" >"$work/serve.log" 2>&1 &
    local pid=$!
    for _ in $(seq 100); do nbdinfo --size "nbd://127.0.0.1:$port" >/dev/null 2>&1 && break; sleep 0.1; done
    fio --name=fill --ioengine=nbd --uri="nbd://127.0.0.1:$port" --rw=write --bs=1M --size=$fill \
        --iodepth=16 --end_fsync=1 >/dev/null
    local iops
    iops=$(fio --name=job --ioengine=nbd --uri="nbd://127.0.0.1:$port" --output-format=json \
        --group_reporting --rw=randwrite --bs=4k --size=$fill --iodepth=16 --numjobs=2 \
        --time_based --runtime="$secs" --ramp_time=1 --randrepeat=0 --fsync=16 |
        python3 -c 'import json,sys; t=sys.stdin.read(); print(round(json.loads(t[t.index("{"):])["jobs"][0]["write"]["iops"]))')
    kill "$pid"; wait "$pid" 2>/dev/null || true
    echo "$name $iops"
    echo "$name $iops" >>"$work/results"
}
for r in $(seq "$rounds"); do
    for side in A B nbdkit; do
        rm -rf "$work/t"; mkdir -p "$work/t"
        case $side in
            A|B)
                bin=$a; [ "$side" = B ] && bin=$b
                "$bin" volume create --path "$work/t/v" --size 1G >/dev/null
                run "$side" "$bin" volume serve --path "$work/t/v" --listen "127.0.0.1:$port" ;;
            nbdkit)
                fallocate -l 1G "$work/t/file"
                run nbdkit nbdkit -f -i 127.0.0.1 -p "$port" file "$work/t/file" ;;
        esac
        port=$((port + 1))
    done
done
echo "medians (IOPS):"
for side in A B nbdkit; do
    printf '%s ' "$side"; grep "^$side " "$work/results" | awk '{print $2}' | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'
done
