# SPDX-License-Identifier: Apache-2.0
"""prsgd-torch-worker: a PyTorch twin of one of prsgd's built-in Fashion-MNIST models as a worker of a prsgd
averager, interchangeable with `prsgd worker --model NAME` in the same job.

usage: python3 -m prsgd.twin_worker --averager ENDPOINT [--model fmnist-mlp] [--data-dir DIR] [--lr X]
       [--momentum M] [--momentum-on-restart keep|reset] [--heartbeat-ms MS] [--heartbeat-timeout-ms MS]
       [--join-timeout-ms MS]
       [--curve-public-key F --curve-secret-key F --curve-server-key F] [--threads N] [--slowdown-ms MS]

Exit status: 0 when the job ended (STOP) or the worker left (SIGTERM/SIGINT), 1 when the averager refused it
or no averager welcomed it within --join-timeout-ms (one line saying why) or it failed, 2 for bad usage.
"""
import argparse
import sys
import time

import torch

import prsgd_twins

from . import fingerprints, fmnist
from .torch import TorchWorker, flat_size, shard_loader

PROG = "prsgd-torch-worker"
MODELS = ("fmnist-mlp", "fmnist-cnn", "fmnist-resnet", "fmnist-resnet8")


class _Usage(argparse.ArgumentParser):
    def error(self, message):
        print(f"{PROG}: {message}", file=sys.stderr)
        sys.exit(2)


class SlowTwinWorker(TorchWorker):
    """A TorchWorker that sleeps after every step (heterogeneity experiments, like --slowdown-ms)."""

    def __init__(self, *args, slowdown=0.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.slowdown = slowdown

    def _step_on(self, batch):
        out = super()._step_on(batch)
        if self.slowdown > 0:
            time.sleep(self.slowdown)
        return out


def main(argv=None):
    p = _Usage(prog=PROG, description="A PyTorch worker of a prsgd averager for prsgd's Fashion-MNIST models.")
    p.add_argument("--averager", required=True, help="the averager's endpoint, e.g. tcp://127.0.0.1:7500")
    p.add_argument("--model", default="fmnist-mlp", choices=MODELS)
    p.add_argument("--data-dir", default=fmnist.DEFAULT_DIR)
    p.add_argument("--lr", type=float, default=0.05, help="initial step size (each round's comes from the averager)")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--momentum-on-restart", choices=("keep", "reset"), default="keep")
    p.add_argument("--heartbeat-ms", type=int, default=500)
    p.add_argument("--heartbeat-timeout-ms", type=int, default=5000)
    p.add_argument("--join-timeout-ms", type=int, default=600000,
                   help="give up (status 1) when no averager welcomes this worker within this many ms; 0: never")
    p.add_argument("--curve-public-key")
    p.add_argument("--curve-secret-key")
    p.add_argument("--curve-server-key")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--slowdown-ms", type=float, default=0.0, help="sleep after every local step")
    p.add_argument("--seed", type=int, default=1, help="torch seed (the initial model comes from the averager)")
    a = p.parse_args(argv)
    if a.heartbeat_ms <= 0 or a.heartbeat_timeout_ms <= a.heartbeat_ms:
        p.error("--heartbeat-timeout-ms must be > --heartbeat-ms > 0")
    if a.join_timeout_ms < 0:
        p.error("--join-timeout-ms must be >= 0")
    if not (a.lr > 0 and 0 <= a.momentum < 1 and a.threads >= 1 and a.slowdown_ms >= 0):
        p.error("--lr must be > 0, --momentum in [0, 1), --threads >= 1, --slowdown-ms >= 0")
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    try:
        train = fmnist.FashionMnist(a.data_dir, "train")
    except (OSError, ValueError) as e:
        print(f"{PROG}: cannot read Fashion-MNIST in '{a.data_dir}': {e}", file=sys.stderr)
        return 1
    model = prsgd_twins.make(a.model)
    loader = shard_loader(train)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    try:
        worker = SlowTwinWorker(
            model, opt, torch.nn.functional.cross_entropy, loader, a.averager,
            momentum_on_restart=a.momentum_on_restart, slowdown=a.slowdown_ms / 1000.0,
            model_fingerprint=fingerprints.model(a.model, fmnist.SHAPE, fmnist.CLASSES, flat_size(model)),
            data_fingerprint=fmnist.data_fingerprint(train), heartbeat_ms=a.heartbeat_ms,
            heartbeat_timeout_ms=a.heartbeat_timeout_ms, join_timeout_ms=a.join_timeout_ms,
            curve_public_key=a.curve_public_key,
            curve_secret_key=a.curve_secret_key, curve_server_key=a.curve_server_key, name="torch-worker")
    except ValueError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    return worker.run_to_exit_status(PROG)


if __name__ == "__main__":
    sys.exit(main())
