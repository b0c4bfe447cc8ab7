#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch 1.13 local SGD, the twin of `prsgd local` for bench/vs_pytorch.

  torch_local_sgd.py --model fmnist-mlp --workers N --interval I --epochs E [--batch 64] [--lr 0.05]
                     [--momentum 0.9] [--eval-every K] [--seed 1] [--port P] [--shards fixed|prsgd]
                     [--init FILE] [--order-cache DIR] --out metrics.jsonl

N processes (torch.multiprocessing spawn), gloo on 127.0.0.1, torch.set_num_threads(1) in each; or, with
--rank R --init-method tcp://HOST:PORT, this process is rank R alone (one process per host, bench/vs_gloo).
I = 1: DistributedDataParallel (gradient all-reduce every step, i.e. synchronous mini-batch SGD).
I > 1: plain local SGD steps + PeriodicModelAverager(period=I, warmup_steps=0) (parameter all-reduce
every I steps). Its step counter starts at 1 instead of 0 (it averages when step % I == 0, which would
include the first step), so the averages fall after steps I, 2I, ... as prsgd's rounds do.

Epochs and rounds follow prsgd's plan (cli/src/job_data.cpp): steps_per_epoch = ceil(60000 / (N * batch))
per worker, rounds_per_epoch = ceil(steps_per_epoch / I), E * rounds_per_epoch rounds of I steps.
Data order (--shards): `fixed` = each rank trains on its 1/N IID shard (a seeded permutation split in N),
reshuffled on every pass, the last partial batch dropped; `prsgd` = exactly prsgd's batches (prsgd_sampler.py:
the whole training set re-partitioned on every pass, as DistributedSampler.set_epoch does, short last batch
kept), all computed before training starts (from --order-cache, which bench/vs_pytorch/run fills before it
starts the clock; without it the pure-Python shuffles count as start-up). Initial parameters: torch.manual_seed(--seed), or --init FILE
(prsgd's x̄_0 for the same seed, written by `prsgd_nn_bench init MODEL SEED FILE`). With --shards prsgd and
--init the two implementations run the same computation on the same data; bench/vs_pytorch/run does that by
default (--twin matched), so accuracy differences measure the implementations, not the random streams.
Rank 0 evaluates x̄ on the full test set after round r (closed = r + 1) when closed % rounds_per_epoch == 0,
closed % K == 0 (K > 0) or at the last round, as prsgd's averager does.

Clock: wall_s counts from the launcher's start (before it imports torch and spawns, like prsgd's averager clock, which
includes worker start-up and data loading), minus the time rank 0 spent evaluating (the other ranks
wait for it at the next all-reduce; prsgd evaluates on another thread without stopping training, so
excluding it is the generous reading for PyTorch).
Output: {"event":"start","wall_s":...} when training starts (every rank set up), one JSON line per
evaluation {round, epoch, wall_s, test_acc}, then
{"event":"done","test_acc":...,"wall_s":...,"rounds":...,"train_wall_s":...}.
"""
import time

T0 = time.monotonic()  # before importing torch; CLOCK_MONOTONIC is system-wide, the spawned ranks share it

import argparse  # noqa: E402
import gzip
import json
import math
import os
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import prsgd_sampler

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import prsgd_twins  # noqa: E402

MEAN, STD = 0.2860, 0.3530


def make(name):
    # The shared PyTorch twins (python/prsgd_twins.py): named like prsgd's exported weights; construction draws
    # the same random numbers as the nn.Sequential models this file used to build, so seeds give the same start.
    try:
        return prsgd_twins.make(name)
    except ValueError as e:
        raise SystemExit(str(e))


def load(split):
    d = os.environ.get("PRSGD_FMNIST_DIR") or "/usr/share/datasets/fashion-mnist"
    with gzip.open(f"{d}/{split}-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).astype(np.float32).reshape(-1, 1, 28, 28)
    with gzip.open(f"{d}/{split}-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
    return torch.from_numpy((x / 255.0 - MEAN) / STD), torch.from_numpy(y)


def load_flat(model, values):
    """Copies a flat buffer in prsgd's layout (parameters() order: per layer the weight, row-major [out][in] or
    [cout][cin][kh][kw], then the bias) into the model, converted to the model's dtype."""
    total = sum(p.numel() for p in model.parameters())
    if total != values.size:
        raise SystemExit(f"{values.size} values in prsgd's layout, the torch model has {total} parameters")
    at = 0
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.from_numpy(values[at:at + p.numel()].reshape(p.shape).copy()).to(p.dtype))
            at += p.numel()


def evaluate(model, xte, yte):
    model.eval()
    correct = 0
    with torch.no_grad():
        for s in range(0, len(yte), 1000):
            correct += (model(xte[s:s + 1000]).argmax(1) == yte[s:s + 1000]).sum().item()
    model.train()
    return correct / len(yte)


def worker(rank, a, t0):
    torch.set_num_threads(1)
    if a.init_method:
        dist.init_process_group("gloo", init_method=a.init_method, rank=rank, world_size=a.workers)
    else:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(a.port)
        dist.init_process_group("gloo", rank=rank, world_size=a.workers)
    xtr, ytr = load("train")
    xte, yte = (load("t10k") if rank == 0 else (None, None))
    torch.manual_seed(a.seed)  # identical initial parameters on every rank
    model = make(a.model)
    if a.init:
        load_flat(model, np.fromfile(a.init, dtype="<f4"))
    averager = None
    if a.interval == 1:
        net = nn.parallel.DistributedDataParallel(model)
    else:
        from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager
        net = model
        averager = PeriodicModelAverager(period=a.interval, warmup_steps=0)
        averager.step = 1  # skip its step 0 (an average after the first step): averages after steps I, 2I, ...
    opt = torch.optim.SGD(net.parameters(), lr=a.lr, momentum=a.momentum)
    steps_per_epoch = max(1, math.ceil(len(ytr) / (a.workers * a.batch)))
    rounds_per_epoch = math.ceil(steps_per_epoch / a.interval)
    rounds = a.epochs * rounds_per_epoch
    if a.shards == "prsgd":
        # Every batch of the run up front (from --order-cache when warm), before the clock's start barrier.
        plan = [torch.tensor(b) for b in prsgd_sampler.batches(len(ytr), a.workers, rank, a.seed, a.batch,
                                                                rounds * a.interval, a.order_cache)]
    else:
        shard = torch.randperm(len(ytr), generator=torch.Generator().manual_seed(a.seed)).chunk(a.workers)[rank]
        shuffle = torch.Generator().manual_seed(a.seed * 1000 + rank)
        order, pos = shard[torch.randperm(len(shard), generator=shuffle)], 0
    out = open(a.out, "w") if rank == 0 else None
    eval_s, acc, step = 0.0, None, 0
    dist.barrier()
    train_start = time.monotonic()
    if rank == 0:
        out.write(json.dumps({"event": "start", "wall_s": round(train_start - t0, 3)}) + "\n")
    for r in range(rounds):
        for _ in range(a.interval):
            if a.shards == "prsgd":
                idx = plan[step]
            else:
                if pos + a.batch > len(order):
                    order, pos = shard[torch.randperm(len(shard), generator=shuffle)], 0
                idx = order[pos:pos + a.batch]
                pos += a.batch
            step += 1
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(net(xtr[idx]), ytr[idx]).backward()
            opt.step()
            if averager is not None:
                averager.average_parameters(model.parameters())
        closed = r + 1
        if rank == 0 and (closed % rounds_per_epoch == 0 or (a.eval_every > 0 and closed % a.eval_every == 0)
                          or closed == rounds):
            wall = time.monotonic() - t0 - eval_s
            e0 = time.monotonic()
            acc = evaluate(model, xte, yte)
            eval_s += time.monotonic() - e0
            out.write(json.dumps({"round": r, "epoch": round(closed / rounds_per_epoch, 4), "wall_s": round(wall, 3),
                                  "test_acc": acc}) + "\n")
            out.flush()
    dist.barrier()
    if rank == 0:
        end = time.monotonic()
        out.write(json.dumps({"event": "done", "test_acc": acc, "rounds": rounds,
                              "wall_s": round(end - t0 - eval_s, 3),
                              "train_wall_s": round(end - train_start - eval_s, 3),
                              "eval_s": round(eval_s, 3)}) + "\n")
        out.close()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="fmnist-mlp")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--interval", type=int, default=8)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--eval-every", type=int, default=0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--shards", choices=("fixed", "prsgd"), default="fixed",
                   help="fixed: one seeded IID shard per rank for the whole run, reshuffled each pass (last partial "
                        "batch dropped); prsgd: prsgd's sampler bit for bit (prsgd_sampler.py: all samples "
                        "re-partitioned every pass, short last batch kept)")
    p.add_argument("--order-cache", help="directory for --shards prsgd's precomputed batch orders (read if there)")
    p.add_argument("--init", help="initial parameters: raw little-endian float32 in prsgd's flat layout (written by "
                                   "`prsgd_nn_bench init MODEL SEED FILE`), instead of torch.manual_seed(--seed)")
    p.add_argument("--port", type=int, default=29500 + os.getpid() % 20000)
    p.add_argument("--rank", type=int,
                   help="run only this rank in this process (one process per host) instead of spawning --workers")
    p.add_argument("--init-method", help="with --rank: the process group's rendezvous, e.g. tcp://10.77.0.1:29500")
    p.add_argument("--t0", type=float, help="the clock's zero as a CLOCK_MONOTONIC reading (default: this process's start)")
    p.add_argument("--out", required=True, help="metrics file (written by rank 0 only)")
    a = p.parse_args()
    if (a.rank is None) != (a.init_method is None):
        p.error("--rank and --init-method go together")
    if a.rank is not None and not 0 <= a.rank < a.workers:
        p.error(f"--rank must be in 0..{a.workers - 1}")
    t0 = T0 if a.t0 is None else a.t0
    if a.rank is not None:
        worker(a.rank, a, t0)
    else:
        torch.multiprocessing.spawn(worker, args=(a, t0), nprocs=a.workers, join=True)


if __name__ == "__main__":
    sys.exit(main())
