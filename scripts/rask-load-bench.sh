#!/bin/bash
# `ferrite rask load` under each durability mode on the two shared block
# traces: five rounds, modes alternating within a round; each load goes to
# a fresh directory, which `ferrite inspect` then reopens (recovery time).
# Output: one line per run. Results: docs/results/rask-cli.md.
set -euo pipefail
cd "$(dirname "$0")/.."
F=target/release/ferrite
T=${TRACES:-../shared/data/traces}
D=$(mktemp -d -p "${TMPDIR:-/tmp}" rask-load-XXXXXX)
trap 'rm -rf "$D"' EXIT
for round in 1 2 3 4 5; do
  for mode in never batched:10 always; do
    for tr in cloudphysics:cloudphysics.csv tectonic:tectonic_chunks_1.csv; do
      fmt=${tr%%:*}; file=${tr#*:}
      rm -rf "$D/map"
      out=$($F rask load --path "$D/map" --format "$fmt" "$T/$file" --sync "$mode")
      secs=$(echo "$out" | awk '/^time/ {print $2}')
      puts=$(echo "$out" | sed -n 's/^time.*operations\/s, \([0-9]*\) puts.*/\1/p')
      rec=$($F inspect --path "$D/map" | sed -n 's/^recovery.* in \([0-9.]*\) s/\1/p')
      echo "round=$round mode=$mode trace=$fmt secs=$secs puts_per_s=$puts log_recovery_s=$rec"
    done
  done
done
