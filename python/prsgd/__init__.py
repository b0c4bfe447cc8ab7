# SPDX-License-Identifier: Apache-2.0
"""Python workers for prsgd averagers.

prsgd.Worker          the worker protocol over a flat float32 parameter vector (numpy only)
prsgd.Evaluator       scores x̄ for an averager that has no test set of its own (`--model external`)
prsgd.torch           TorchWorker (any torch.nn.Module), Evaluator, ShardSampler, flatten/load_flat (needs torch)
prsgd.fingerprints    the model and data fingerprints `prsgd worker` declares
prsgd.fmnist          Fashion-MNIST from Debian's dataset-fashion-mnist, as prsgd reads it (needs torch)
"""
from .evaluator import Evaluator
from .worker import JoinTimeout, Refused, Round, Worker, read_key_file

__all__ = ["Worker", "Evaluator", "Round", "Refused", "JoinTimeout", "read_key_file"]
__version__ = "0.1.0"
