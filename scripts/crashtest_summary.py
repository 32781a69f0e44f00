#!/usr/bin/env python3
"""Folds the summaries `ferrite crashtest --json` wrote into one: the
issue's metrics over all runs, and a Markdown row per run.

    scripts/crashtest_summary.py docs/results/crashtest/*.json

Metrics: kills_total, acked_lost, verify_failures, min_kills_per_engine
(over engines, the kills of all its runs), power_cuts_per_subject (the
fewest power cuts of any subject run with --power-cut, which count as
`power-cut:SUBJECT`), negative_controls_caught (runs with
--skip-wal-sync or --damage must fail on a lost write; they are kept out
of every other metric), min_background_hits (over
engines, for each kind of background work the engine does, the kills of
all its runs that landed inside that kind; the smallest). Runs of the
volume count as the subject `volume`; runs of the server as
`server:ENGINE`, which are left out of min_background_hits (the server
opens stores with the engines' default budgets, under which background
work seldom runs in a short run).
"""
import json
import sys
from collections import defaultdict


def main(paths):
    runs = []
    for p in paths:
        if p.endswith("summary.json"):
            continue
        with open(p) as f:
            d = json.load(f)
        if "kills" not in d:
            continue
        d["file"] = p.rsplit("/", 1)[-1]
        runs.append(d)
    controls = [d for d in runs if d.get("skip_wal_sync") or d.get("damage")]
    runs = [d for d in runs if d not in controls]
    kills = defaultdict(int)
    cuts = defaultdict(int)
    hits = defaultdict(lambda: defaultdict(int))
    expected = defaultdict(set)
    for d in runs:
        engine = d["engine"] + ("/4" if d.get("partitions", 1) > 1 else "")
        if d.get("volume"):
            engine = "volume"
        elif d.get("server"):
            engine = "server:" + engine
        if d.get("power_cut"):
            cuts[engine] += d["kills"]
            continue
        kills[engine] += d["kills"]
        for kind in d.get("background_expected", []):
            expected[engine].add(kind)
            hits[engine][kind] += d["background_hits"][kind]
    per_kind = {e: {k: hits[e][k] for k in sorted(expected[e])} for e in sorted(expected)}
    summary = {
        "runs": len(runs),
        "kills_total": sum(d["kills"] for d in runs if not d.get("power_cut")),
        "acked_lost": sum(d["acked_lost"] for d in runs),
        "verify_failures": sum(d["verify_failures"] for d in runs),
        "min_kills_per_engine": min(kills.values()) if kills else 0,
        "min_background_hits": min(
            (
                v
                for e, kinds in per_kind.items()
                if not e.startswith("server:")
                for v in kinds.values()
            ),
            default=0,
        ),
        "power_cuts_total": sum(cuts.values()),
        "power_cuts_per_subject": min(cuts.values()) if cuts else 0,
        # A skipped sync under SIGKILL is the demonstration that a kill
        # cannot see it, not a control of that mode.
        "negative_controls": len(real := [d for d in controls if d.get("power_cut") or d.get("damage")]),
        "negative_controls_caught": sum(1 for d in real if d["acked_lost"] > 0),
        "sigkill_runs_blind_to_a_skipped_sync": sum(
            1 for d in controls if d not in real and d["acked_lost"] == 0
        ),
        "commits": sorted({d.get("commit", "before commits were recorded") for d in runs}),
        "kills_per_engine": dict(sorted(kills.items())),
        "power_cuts_per_subject_each": dict(sorted(cuts.items())),
        "background_hits_per_engine": per_kind,
    }
    print(json.dumps(summary, indent=2))
    print()
    print(
        "| run | commit | kills | whitebox kills | killed in recovery | acked ops | acked lost "
        "| verify failures | recovery P50 / P99 ms | kills inside background work |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for d in runs:
        inside = ", ".join(
            f"{k} {d['background_hits'][k]}" for k in d.get("background_expected", [])
        )
        print(
            f"| {d['file'][:-5]} | {d.get('commit', '-')} | {d['kills']} "
            f"| {d.get('whitebox_kills', 0)} "
            f"| {d['killed_in_recovery']} | {d['acked_ops']:,} | {d['acked_lost']} "
            f"| {d['verify_failures']} | {d['recovery_ms_p50']:.1f} / {d['recovery_ms_p99']:.1f} "
            f"| {inside or '-'} |"
        )


    if controls:
        print()
        print("| negative control | commit | kills until caught | caught |")
        print("|---|---|---|---|")
        for d in controls:
            print(
                f"| {d['file'][:-5]} | {d.get('commit', '-')} | {d['kills'] + 1} "
                f"| {'yes' if d['acked_lost'] else 'no'} |"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
