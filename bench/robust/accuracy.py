#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Accuracy cost of the robust aggregation rules on clean IID runs.

Runs `prsgd local` (fmnist-mlp, N workers, interval I) once per (rule, seed), reads the final test
accuracy from each run's metrics file (its "done" line) and writes a Markdown table: every seed, the
median per rule and the median's difference from `mean`. The outlier screen stays at its default, so
the table also shows how many honest updates it left out (it should be none).

    bench/robust/accuracy.py --prsgd build/release/cli/prsgd --out bench/robust/accuracy.md
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def run_one(args, rule, seed, workdir):
    tag = f"{rule}-seed{seed}"
    log_dir = os.path.join(workdir, tag)
    metrics = os.path.join(workdir, tag + ".jsonl")
    cmd = [args.prsgd, "local", "--workers", str(args.workers), "--model", args.model, "--interval",
           str(args.interval), "--epochs", str(args.epochs), "--seed", str(seed), "--aggregate", rule,
           "--log-dir", log_dir, "--metrics-jsonl", metrics, "--progress", "off"]
    start = time.monotonic()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - start
    if done.returncode != 0:
        sys.exit(f"accuracy.py: {' '.join(cmd)} exited with {done.returncode}: {done.stderr.strip()}")
    acc, screened, refused = None, 0, 0
    with open(metrics) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("event") == "done":
                acc = rec.get("test_acc")
            elif "round" in rec and "event" not in rec:
                screened += len(rec.get("screened", {}))
                refused += 1 if rec.get("refused") else 0
    if acc is None:
        sys.exit(f"accuracy.py: {metrics} has no final test accuracy")
    return {"rule": rule, "seed": seed, "acc": 100.0 * acc, "screened": screened, "refused": refused,
            "wall_s": wall, "cmd": " ".join(cmd)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prsgd", default="build/release/cli/prsgd")
    p.add_argument("--model", default="fmnist-mlp")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--interval", type=int, default=8)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--rules", default="mean,trimmed-mean,median")
    p.add_argument("--out", default="bench/robust/accuracy.md")
    args = p.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    rules = args.rules.split(",")
    results = []
    with tempfile.TemporaryDirectory(prefix="prsgd-robust-") as workdir:
        for seed in seeds:
            for rule in rules:
                r = run_one(args, rule, seed, workdir)
                print(f"{rule} seed {seed}: {r['acc']:.2f} % ({r['wall_s']:.0f} s)", flush=True)
                results.append(r)
    medians = {rule: statistics.median(r["acc"] for r in results if r["rule"] == rule) for rule in rules}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    lines = [
        f"# Robust aggregation on clean IID runs: {args.model}, N = {args.workers}, I = {args.interval}, "
        f"{args.epochs} epochs",
        "",
        f"Final test accuracy (%) per seed and rule; commit {commit}, `{os.uname().nodename}`, "
        f"{os.cpu_count()} CPUs. Written by `bench/robust/accuracy.py`.",
        "",
        "| rule | " + " | ".join(f"seed {s}" for s in seeds) + " | median | median − mean | screened updates |",
        "|---|" + "---|" * (len(seeds) + 3),
    ]
    for rule in rules:
        row = [r for r in results if r["rule"] == rule]
        lines.append(f"| `{rule}` | " + " | ".join(f"{r['acc']:.2f}" for r in row) +
                     f" | {medians[rule]:.2f} | {medians[rule] - medians.get('mean', medians[rule]):+.2f} | "
                     f"{sum(r['screened'] for r in row)} |")
    lines += ["", "Commands:", ""] + [f"    {r['cmd']}" for r in results] + [""]
    with open(args.out, "w") as f:
        f.write("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
