#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A PyTorch worker of a prsgd averager that trains a CNN with dropout on Fashion-MNIST.

usage: cnn_dropout.py --averager ENDPOINT [--external] [--train-samples N] [--data-dir DIR] [--threads N]
                      [--momentum-on-restart keep|reset]
       cnn_dropout.py --averager ENDPOINT --evaluator [--test-samples N] [--data-dir DIR] [--threads N]
       cnn_dropout.py --print-spec | --print-model-spec

The network: conv3x3(16)+BN+ReLU+maxpool 2, conv3x3(32)+BN+ReLU+maxpool 2, dropout 0.25, fc(64)+ReLU,
dropout 0.5, fc(10). Dropout has no parameters, so the flat vector this worker sends (prsgd.torch's layout:
parameters, then batch-norm statistics) has exactly the layout of the prsgd model spec SPEC below, the same
network without dropout. The averager runs that spec: it averages the workers' vectors and evaluates x̄
with it, which is what this network computes in eval mode (dropout is the identity there).

With --external the averager does not run the network at all (`prsgd averager --model external`): the job
starts from this worker's initial weights, and a process started with --evaluator scores x̄ on the test set.
--print-model-spec prints the tensors' names and shapes for the averager's --model-spec.
"""
import json
import argparse
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import prsgd
import prsgd.fingerprints
import prsgd.fmnist
import prsgd.torch

SPEC = "cnn:c16k3p1-bn-r-m2-c32k3p1-bn-r-m2-f64-r-f10"


class CnnDropout(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.fc1 = nn.Linear(32 * 7 * 7, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        x = F.dropout(torch.flatten(x, 1), 0.25, self.training)
        x = F.dropout(F.relu(self.fc1(x)), 0.5, self.training)
        return self.fc2(x)


def main():
    p = argparse.ArgumentParser(description="a PyTorch CNN-with-dropout worker of a prsgd averager")
    p.add_argument("--averager", help="the averager's endpoint, e.g. tcp://127.0.0.1:7500")
    p.add_argument("--data-dir", default=prsgd.fmnist.DEFAULT_DIR)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--momentum-on-restart", choices=("keep", "reset"), default="keep")
    p.add_argument("--print-spec", action="store_true", help="print the model spec the averager runs and exit")
    p.add_argument("--print-model-spec", action="store_true",
                   help="print the tensors (JSON) for `prsgd averager --model external --model-spec` and exit")
    p.add_argument("--external", action="store_true", help="join a `prsgd averager --model external` job")
    p.add_argument("--evaluator", action="store_true", help="score x̄ on the test set for a --model external job")
    p.add_argument("--train-samples", type=int, help="train on the first N training samples only")
    p.add_argument("--test-samples", type=int, help="evaluate on the first N test samples only")
    p.add_argument("--seed", type=int, default=0, help="torch seed for the initial weights (--external)")
    a = p.parse_args()
    if a.print_spec:
        print(SPEC)
        return 0
    torch.manual_seed(a.seed)
    model = CnnDropout()
    if a.print_model_spec:
        print(json.dumps(prsgd.torch.model_spec(model)))
        return 0
    if not a.averager:
        p.error("--averager is required")
    torch.set_num_threads(a.threads)
    if a.evaluator:
        test = prsgd.fmnist.FashionMnist(a.data_dir, "test", a.test_samples)
        loader = torch.utils.data.DataLoader(
            test, batch_size=None, sampler=torch.utils.data.BatchSampler(
                torch.utils.data.SequentialSampler(test), 1000, drop_last=False))
        return prsgd.torch.Evaluator(model, loader, a.averager, name="cnn-dropout-evaluator") \
            .run_to_exit_status("cnn_dropout.py")
    train = prsgd.fmnist.FashionMnist(a.data_dir, "train", a.train_samples)
    if a.external:
        # The averager knows only the flat size: the fingerprints say that, the training-set length and the
        # labels' hash (the first member's fixes it for the job).
        fingerprints = dict(external=True, labels=train.labels.numpy())
    else:
        fingerprints = dict(model_fingerprint=prsgd.fingerprints.model(SPEC, prsgd.fmnist.SHAPE,
                                                                        prsgd.fmnist.CLASSES,
                                                                        prsgd.torch.flat_size(model)),
                            data_fingerprint=prsgd.fmnist.data_fingerprint(train))
    # shard_loader: whole batches from the data set, of the shard (or ranges) the averager assigns.
    worker = prsgd.torch.TorchWorker(
        model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), F.cross_entropy,
        prsgd.torch.shard_loader(train), a.averager,
        momentum_on_restart=a.momentum_on_restart, name="cnn-dropout", **fingerprints)
    return worker.run_to_exit_status("cnn_dropout.py")


if __name__ == "__main__":
    sys.exit(main())
