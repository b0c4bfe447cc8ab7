#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The prsgd side of bench/pytorch_vs_gloo: one worker (or, with --evaluator, the evaluator) of a
`prsgd averager --model external` job, training model.Mlp with the same optimiser and data as gloo_job.py.

  prsgd_worker.py --averager ENDPOINT --seed K --train-samples S [--lr 0.05 --momentum 0.9]
  prsgd_worker.py --averager ENDPOINT --evaluator --test-samples T
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as bench_model  # noqa: E402
import prsgd.torch  # noqa: E402  (model.py put python/ on the path)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--averager", required=True)
    p.add_argument("--evaluator", action="store_true")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--train-samples", type=int, default=12000)
    p.add_argument("--test-samples", type=int, default=2000)
    a = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    net = bench_model.Mlp()
    if a.evaluator:
        test = bench_model.data("test", a.test_samples)
        ev = prsgd.torch.Evaluator(net, [], a.averager, heartbeat_ms=200)
        ev.score = lambda params: (prsgd.torch.load_flat(net, params), bench_model.evaluate(net, test))[1]
        return ev.run_to_exit_status("prsgd_worker.py")
    train = bench_model.data("train", a.train_samples)
    w = prsgd.torch.TorchWorker(net, torch.optim.SGD(net.parameters(), lr=a.lr, momentum=a.momentum),
                                F.cross_entropy, prsgd.torch.shard_loader(train), a.averager, external=True,
                                heartbeat_ms=200, heartbeat_timeout_ms=4000)
    return w.run_to_exit_status("prsgd_worker.py")


if __name__ == "__main__":
    sys.exit(main())
