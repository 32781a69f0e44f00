#!/usr/bin/env bash
# The SIGKILL crash campaign of docs/results/crashtest.md: every engine in
# each durability mode, the LSM with four partitions, whitebox kills inside
# each engine's background work, the server on three engines (eight
# writers and two readers under `--sync always`) and the volume over NBD,
# each run with KILLS kills (WHITEBOX_KILLS for the whitebox runs), one
# after another. Each run's summary lands in OUT/NAME.json, the one
# `scripts/crashtest_summary.py` folds; a run that fails stops the campaign
# and leaves its store and log in OUT for a look.
#
#   scripts/crash-campaign.sh OUT [FERRITE]
#
# FERRITE is the binary to run (default target/release/ferrite, which runs
# ferrite-crashtest from beside it); copy both
# out of target/ first when builds go on beside the campaign, so every
# run uses the one commit its summaries name. KILLS (1000), WHITEBOX_KILLS
# (300), SEED (12) and ONLY (a space-separated list of run names) are
# read from the environment.
set -euo pipefail
out=${1:?usage: crash-campaign.sh OUT [FERRITE]}
ferrite=${2:-target/release/ferrite}
kills=${KILLS:-1000}
whitebox_kills=${WHITEBOX_KILLS:-300}
seed=${SEED:-12}
mkdir -p "$out"

# name | arguments
runs=(
    "btree-always|--engine btree --mode always --max-run-ms 300"
    "btree-batched-20|--engine btree --mode batched:20 --max-run-ms 300"
    "shortcut-always|--engine shortcut --mode always --max-run-ms 300"
    "turboindex-always|--engine turboindex --mode always --max-run-ms 300"
    "lsm-always|--engine lsm --mode always --max-run-ms 300"
    "lsm-batched-20|--engine lsm --mode batched:20 --max-run-ms 300"
    "lsmp4-always|--engine lsm --partitions 4 --mode always --max-run-ms 300"
    "zkv-always|--engine zkv --mode always --max-run-ms 300"
    "zkv-batched-20|--engine zkv --mode batched:20 --max-run-ms 300"
    "rask-always|--engine rask --mode always --max-run-ms 300"
    "rask-batched-20|--engine rask --mode batched:20 --max-run-ms 300"
    "server-btree-always|--engine btree --server --max-run-ms 300"
    "server-lsm-always|--engine lsm --server --max-run-ms 300"
    "server-zkv-always|--engine zkv --server --max-run-ms 300"
    "volume-always|--engine rask --volume --mode always --max-run-ms 300"
    "volume-batched-20|--engine rask --volume --mode batched:20 --max-run-ms 300"
    "whitebox-btree-always|--engine btree --whitebox --max-run-ms 1000"
    "whitebox-shortcut-always|--engine shortcut --whitebox --max-run-ms 1000"
    "whitebox-turboindex-always|--engine turboindex --whitebox --max-run-ms 1000"
    "whitebox-lsm-always|--engine lsm --whitebox --max-run-ms 1000"
    "whitebox-lsmp4-always|--engine lsm --partitions 4 --whitebox --max-run-ms 1000"
    "whitebox-zkv-always|--engine zkv --whitebox --max-run-ms 1000"
    "whitebox-rask-always|--engine rask --whitebox --max-run-ms 1000"
)

for run in "${runs[@]}"; do
    name=${run%%|*}
    args=${run#*|}
    if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then
        continue
    fi
    n=$kills
    [[ $name == whitebox-* ]] && n=$whitebox_kills
    echo "== $(date -u +%H:%M:%S) $name: $n kills"
    # shellcheck disable=SC2086 # the arguments are words
    if ! "$ferrite" crashtest $args --kills "$n" --seed "$seed" --path "$out/$name.store" \
        --json "$out/$name.json" >"$out/$name.log" 2>&1; then
        tail -20 "$out/$name.log"
        echo "== $name FAILED; its store and log are in $out"
        exit 1
    fi
    rm -rf "$out/$name.store" "$out/$name.store".* "$out/$name.log"
done
echo "== $(date -u +%H:%M:%S) campaign done"
