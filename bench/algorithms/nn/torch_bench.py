#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch twin of prsgd_nn_bench: the same models, batch, optimiser and measurements, one thread.

  torch_bench.py throughput <model> [steps]   forward+backward+SGD step, batch 64
  torch_bench.py train <model> [epochs]       Fashion-MNIST, batch 64, lr 0.05, momentum 0.9
Prints one JSON line per run.
"""
import gzip
import json
import os
import resource
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)
BATCH = 64
MEAN, STD = 0.2860, 0.3530


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.b2(self.c2(F.relu(self.b1(self.c1(x)))))
        return F.relu(y + (x if self.short is None else self.short(x)))


def resnet(n):
    layers = [nn.Conv2d(1, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()]
    cin = 16
    for stage in range(3):
        cout = 16 << stage
        for block in range(n):
            layers.append(BasicBlock(cin, cout, 2 if stage > 0 and block == 0 else 1))
            cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)]
    return nn.Sequential(*layers)


def make(name):
    if name == "fmnist-mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                             nn.Linear(256, 10))
    if name == "fmnist-cnn":
        return nn.Sequential(nn.Conv2d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(16, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(1568, 10))
    if name == "fmnist-resnet":
        return resnet(3)
    if name == "fmnist-resnet8":
        return resnet(1)
    raise SystemExit(f"unknown model {name}")


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def load(split):
    d = os.environ.get("PRSGD_FMNIST_DIR") or "/usr/share/datasets/fashion-mnist"
    with gzip.open(f"{d}/{split}-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).astype(np.float32).reshape(-1, 1, 28, 28)
    with gzip.open(f"{d}/{split}-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
    return torch.from_numpy((x / 255.0 - MEAN) / STD), torch.from_numpy(y)


def step(model, opt, x, y):
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


def throughput(name, steps):
    torch.manual_seed(1)
    model = make(name)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    n = 1024
    xs = torch.randn(n, 1, 28, 28)
    ys = torch.arange(n) % 10

    def run(count):
        for s in range(count):
            o = (s * BATCH) % n
            step(model, opt, xs[o:o + BATCH], ys[o:o + BATCH])

    run(max(3, steps // 10))
    cpu0 = time.process_time()  # CPU time of every thread of the process, like prsgd_nn_bench
    start = time.perf_counter()
    run(steps)
    secs = time.perf_counter() - start
    cpu = time.process_time() - cpu0
    print(json.dumps({"impl": "pytorch", "mode": "throughput", "model": name, "steps": steps, "batch": BATCH,
                      "samples_per_s": round(steps * BATCH / secs, 1),
                      "samples_per_cpu_s": round(steps * BATCH / cpu, 1), "peak_rss_mib": round(peak_rss_mib(), 1)}))


def train(name, epochs):
    xtr, ytr = load("train")
    xte, yte = load("t10k")
    torch.manual_seed(1)
    model = make(name)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start = time.perf_counter()
    last = 0.0
    for _ in range(epochs):
        model.train()
        perm = torch.randperm(len(ytr))
        total, batches = 0.0, 0
        for s in range(0, len(ytr), BATCH):
            idx = perm[s:s + BATCH]
            total += step(model, opt, xtr[idx], ytr[idx]).item()
            batches += 1
        last = total / batches
    secs = time.perf_counter() - start
    model.eval()
    correct, loss = 0, 0.0
    with torch.no_grad():
        for s in range(0, len(yte), 256):
            out = model(xte[s:s + 256])
            loss += F.cross_entropy(out, yte[s:s + 256], reduction="sum").item()
            correct += (out.argmax(1) == yte[s:s + 256]).sum().item()
    print(json.dumps({"impl": "pytorch", "mode": "train", "model": name, "epochs": epochs,
                      "train_loss": round(last, 4), "test_loss": round(loss / len(yte), 4),
                      "test_accuracy": round(correct / len(yte), 4), "train_seconds": round(secs, 1),
                      "peak_rss_mib": round(peak_rss_mib(), 1)}))


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    mode, name = sys.argv[1], sys.argv[2]
    if mode == "throughput":
        throughput(name, int(sys.argv[3]) if len(sys.argv) > 3 else 200)
    elif mode == "train":
        train(name, int(sys.argv[3]) if len(sys.argv) > 3 else 3)
    else:
        raise SystemExit(__doc__)
