#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The PyTorch side of bench/pytorch_vs_gloo: N ranks (torch.multiprocessing, gloo on 127.0.0.1, one thread
each) train model.Mlp with local SGD and PeriodicModelAverager(period=I), a parameter all-reduce every I steps.

  gloo_job.py --workers N --interval I --epochs E --train-samples S --test-samples T --seed K --port P
              [--eval-every R] [--kill-rank R --kill-at-round K] --out metrics.jsonl

Each rank trains its 1/N shard of a seeded permutation, reshuffled per pass; steps per epoch and rounds follow
the prsgd averager's plan (ceil(S / (N * batch)) steps, ceil(steps / I) rounds per epoch). Rank 0 evaluates x̄
after every R-th round and the last, and writes {"round", "wall_s", "test_acc", "test_loss"} lines, then a done
line with the samples all ranks trained on (partial batches at a shard's end counted as they are).
wall_s counts from the launch of this script. --kill-rank makes rank R kill itself with SIGKILL at round K
(the elasticity check): the others' next all-reduce fails and the job ends with status 1.
"""
import time

T0 = time.monotonic()

import argparse  # noqa: E402
import datetime
import json
import math
import os
import signal
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as bench_model  # noqa: E402


def rank_main(rank, a, t0):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}", rank=rank, world_size=a.workers,
                            timeout=datetime.timedelta(seconds=60))
    torch.manual_seed(a.seed)
    net = bench_model.Mlp()
    for p in net.parameters():  # every rank starts from rank 0's parameters
        dist.broadcast(p.data, 0)
    opt = torch.optim.SGD(net.parameters(), lr=a.lr, momentum=a.momentum)
    train = bench_model.data("train", a.train_samples)
    test = bench_model.data("test", a.test_samples) if rank == 0 else None
    n = len(train)
    steps_per_epoch = max(1, math.ceil(n / (a.workers * a.batch)))
    rounds_per_epoch = math.ceil(steps_per_epoch / a.interval)
    rounds = a.epochs * rounds_per_epoch
    averager = PeriodicModelAverager(period=a.interval, warmup_steps=0)
    averager.step = 1  # average after steps I, 2I, ... (its counter would include the first step)
    out = open(a.out, "w") if rank == 0 else None
    order, pos, epoch = None, 0, 0
    trained = 0  # samples this rank trained on, partial batches counted as they are
    for r in range(rounds):
        if rank == a.kill_rank and r == a.kill_at_round:
            os.kill(os.getpid(), signal.SIGKILL)
        for _ in range(a.interval):
            if order is None or pos >= len(order):
                perm = np.random.default_rng([a.seed, epoch]).permutation(n)
                order, pos, epoch = perm[rank::a.workers], 0, epoch + 1
            idx = order[pos:pos + a.batch].tolist()
            pos += a.batch
            trained += len(idx)
            x, y = train[idx]
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(net(x), y).backward()
            opt.step()
            averager.average_parameters(net.parameters())
        closed = r + 1
        if rank == 0 and (closed % a.eval_every == 0 or closed == rounds or closed % rounds_per_epoch == 0):
            wall = time.monotonic() - t0
            acc, loss = bench_model.evaluate(net, test)
            out.write(json.dumps({"round": r, "wall_s": round(wall, 3), "test_acc": acc, "test_loss": loss}) + "\n")
            out.flush()
    total = torch.tensor([trained], dtype=torch.int64)
    dist.all_reduce(total)  # every rank's count, for comparing the samples each side trains
    if rank == 0:
        out.write(json.dumps({"event": "done", "rounds": rounds, "samples": int(total.item()),
                              "steps_per_rank": rounds * a.interval,
                              "wall_s": round(time.monotonic() - t0, 3)}) + "\n")
        out.close()
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--interval", type=int, default=8)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--train-samples", type=int, default=12000)
    p.add_argument("--test-samples", type=int, default=2000)
    p.add_argument("--eval-every", type=int, default=4)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--kill-rank", type=int, default=-1)
    p.add_argument("--kill-at-round", type=int, default=-1)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    try:
        mp.spawn(rank_main, args=(a, T0), nprocs=a.workers, join=True)
    except Exception as e:  # a rank died (ProcessExitedException) or raised: the job failed
        print(f"gloo_job: the job failed: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
