#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Measures how much time-balanced intervals cut the fast workers' idle time at the barrier.

Runs `prsgd local` with three workers, one slowed by 30 ms per step, once with `--interval-policy fixed`
and once with `time-balanced`, alternating, REPS times. For rounds 5 and later (the first rounds measure
the speeds) it sums, over the two fast workers, the time from each one's accepted submission to the
round's close (`round_s - arrival_s[w]` in the metrics lines). Prints each pair, the median ratio
fixed / time-balanced and the table for bench/actors/HISTORY.md.

  bench/actors/time_balanced_idle.py --prsgd build/release/cli/prsgd [--reps 3] [--rounds 40]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def idle_of_fast_workers(prsgd, policy, rounds, workdir):
    metrics = os.path.join(workdir, f"metrics-{policy}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [prsgd, "local", "--workers", "3", "--slowdown-ms", "0,0,30", "--model", "fmnist-mlp",
           "--interval", "8", "--batch", "32", "--rounds", str(rounds), "--interval-policy", policy,
           "--averaging", "step-normalised", "--metrics-jsonl", metrics,
           "--log-dir", os.path.join(workdir, f"logs-{policy}"), "--progress", "off"]
    run = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if run.returncode != 0:
        sys.exit(f"time_balanced_idle: prsgd local failed with status {run.returncode}:\n{run.stderr}")
    idle = 0.0
    with open(metrics) as f:
        for text in f:
            line = json.loads(text)
            if "round" not in line or line["round"] < 5:
                continue
            arrival = line.get("arrival_s") or {}
            for w in ("0", "1"):
                if w in arrival:
                    idle += line["round_s"] - arrival[w]
    return idle


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prsgd", required=True, help="path of the prsgd binary")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--rounds", type=int, default=40)
    a = p.parse_args()
    ratios = []
    rows = []
    with tempfile.TemporaryDirectory(prefix="prsgd-balanced-") as workdir:
        for rep in range(a.reps):
            fixed = idle_of_fast_workers(a.prsgd, "fixed", a.rounds, workdir)
            balanced = idle_of_fast_workers(a.prsgd, "time-balanced", a.rounds, workdir)
            ratio = fixed / balanced if balanced > 0 else float("inf")
            ratios.append(ratio)
            rows.append(f"| {rep} | {fixed:.2f} | {balanced:.2f} | {ratio:.2f} |")
            print(f"rep {rep}: idle of the fast workers, rounds 5-{a.rounds - 1}: fixed {fixed:.3f} s, "
                  f"time-balanced {balanced:.3f} s, ratio {ratio:.2f}", flush=True)
    print(f"median ratio fixed / time-balanced over {a.reps} reps: {statistics.median(ratios):.2f}")
    print("\nFor HISTORY.md:\n\n| rep | fixed (s) | time-balanced (s) | fixed / balanced |\n|---:|---:|---:|---:|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
