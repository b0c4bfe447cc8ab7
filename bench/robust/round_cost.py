#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs prsgd_aggregation_bench (the combine step of one barrier at fmnist-cnn's, fmnist-mlp's, a 2M-float and a
10M-float model's size, N = 4, 8, 16) and writes the medians of its CPU times, with each robust rule's ratio to the mean
of the same inputs, to a Markdown file.

usage: bench/robust/round_cost.py [--bench PATH] [--reps 5] [--min-time 0.2] [--out bench/robust/round_cost.md]
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import provenance  # noqa: E402  (bench/provenance.py)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TARGET = 1.5  # the robust rules' goal: at most this many times the mean's cost


def run(bench, reps, min_time):
    # Random interleaving runs the repetitions of all benchmarks in a shuffled order, so that a change in the
    # machine's load during the run spreads over every cell instead of landing on the few measured then.
    cmd = [bench, f"--benchmark_repetitions={reps}", "--benchmark_report_aggregates_only=true",
           "--benchmark_enable_random_interleaving=true", f"--benchmark_min_time={min_time}",
           "--benchmark_format=json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"round_cost.py: {bench} failed ({r.returncode}): {r.stderr.strip()[-2000:]}")
    medians = {}
    for b in json.loads(r.stdout)["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        # run_name: BM_Robust/median_unequal/8/535818
        parts = b["run_name"].split("/")
        kind = parts[1] if len(parts) == 4 else "screen"
        medians[(kind, int(parts[-2]), int(parts[-1]))] = b["cpu_time"]  # milliseconds (the benchmark's unit)
    return cmd, medians


MODELS = {28938: "fmnist-cnn", 535818: "fmnist-mlp", 2000000: "2M-float model", 10000000: "10M-float model"}


def table(m, floats):
    m = {k[:2]: t for k, t in m.items() if k[2] == floats}
    ns = sorted({k[1] for k in m})
    rows = [("mean", "equal", "equal"), ("trimmed-mean (β = 0.25)", "trimmed_mean_equal", "equal"),
            ("median", "median_equal", "equal"), ("norm-clip (C = median norm)", "norm_clip", "equal"),
            ("outlier screen (norms + verdict)", "screen", "equal"),
            ("mean", "unequal", "unequal"), ("trimmed-mean (β = 0.25)", "trimmed_mean_unequal", "unequal"),
            ("median", "median_unequal", "unequal")]
    out = ["| weights | step | " + " | ".join(f"N = {n}" for n in ns) + " |",
           "|---|---|" + "---:|" * len(ns)]
    for label, kind, weights in rows:
        base = "equal" if weights == "equal" else "unequal"
        cells = []
        for n in ns:
            t = m.get((kind, n))
            if t is None:
                cells.append("—")
            elif kind in ("equal", "unequal"):
                cells.append(f"{t:.3f} ms")
            else:
                ratio = t / m[(base, n)]
                mark = "" if ratio <= TARGET else " ✗"
                cells.append(f"{t:.3f} ms ({ratio:.2f}×{mark})")
        out.append(f"| {weights} | {label} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", default=os.path.join(ROOT, "build/release/bench/algorithms/prsgd_aggregation_bench"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.2)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/robust/round_cost.md"))
    args = ap.parse_args()
    if args.reps < 1 or args.min_time <= 0:
        ap.error("--reps must be >= 1 and --min-time > 0")
    if not os.access(args.bench, os.X_OK):
        ap.error(f"no benchmark at {args.bench} (build the prsgd_aggregation_bench target of the release preset)")
    machine, commit, date = provenance.machine(), provenance.commit(ROOT), provenance.now_utc()
    cmd, m = run(args.bench, args.reps, args.min_time)
    shown = " ".join(["bench/robust/round_cost.py", "--reps", str(args.reps), "--min-time", str(args.min_time)])
    text = f"""# Robust aggregation: round cost

Written by `{shown}`, which runs
`{os.path.basename(cmd[0])} {' '.join(cmd[1:])}`: the combine step of one barrier
as the averager runs it (mean: `average()`; the robust rules: `averaging_weights()` + `aggregate()` over
x_i − x̄), for N inputs of each size below. Medians of {args.reps} repetitions, CPU time; in brackets each
rule's cost over the mean of the same inputs (equal weights: 512 samples each; unequal: 512 + i). ✗ marks a
ratio above the {TARGET}× goal.

- commit: {commit}
- machine: {machine}
- date: {date}
"""
    for floats in sorted({k[2] for k in m}):
        text += f"\n## {floats:,} floats ({MODELS.get(floats, 'model')})\n\n{table(m, floats)}\n"
    with open(args.out, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
