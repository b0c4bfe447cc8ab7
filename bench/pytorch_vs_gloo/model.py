# SPDX-License-Identifier: Apache-2.0
"""The network and data both sides of bench/pytorch_vs_gloo train: the same module, the same Fashion-MNIST
subset (prsgd.fmnist, the first --train-samples training and --test-samples test images)."""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import prsgd.fmnist  # noqa: E402


class Mlp(nn.Module):
    """784-256-128-10 with ReLU: small enough for a loaded 2-core machine, big enough to need averaging."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(28 * 28, 256)
        self.fc2 = nn.Linear(256, 128)
        self.fc3 = nn.Linear(128, 10)

    def forward(self, x):
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def data(split, limit):
    return prsgd.fmnist.FashionMnist(prsgd.fmnist.DEFAULT_DIR, split, limit)


def evaluate(model, test):
    """Returns (accuracy, mean cross-entropy) of `model` on the whole of `test`."""
    model.eval()
    with torch.no_grad():
        x, y = test[list(range(len(test)))]
        out = model(x)
        acc = float((out.argmax(dim=1) == y).float().mean())
        loss = float(F.cross_entropy(out, y))
    model.train()
    return acc, loss
