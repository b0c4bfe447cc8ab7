#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Step-level parity of prsgd's training library with PyTorch 1.13 (torch.set_num_threads(1)).

  prsgd_nn_bench parity fmnist-cnn 200 /tmp/parity-cnn     # writes init.f32, batches.u32, x0.f32, ...
  bench/algorithms/nn/parity.py --model fmnist-cnn /tmp/parity-cnn [--no-double] [--tensors]

Loads prsgd's initial parameters into the model of bench/vs_pytorch/torch_local_sgd.py (prsgd's flat
layout is PyTorch's parameters() order: per layer the weight, row-major [out][in] for linear and
[cout][cin][kh][kw] for conv, then the bias), checks the inputs (the first batch's normalised features
against torch_local_sgd.py's load()), runs the same batches with torch.optim.SGD(lr 0.05, momentum 0.9)
in float32 and (unless --no-double) in float64 from the same start, and prints per checkpoint step
the losses and the relative L2 / max abs differences of the parameters:
  p-t32  prsgd vs PyTorch float32      p-t64  prsgd vs PyTorch float64      t32-t64  PyTorch's own rounding
If prsgd computes the same function, p-t64 stays close to t32-t64 (both are float32 rounding against
the same reference); a systematic error shows as p-t64 >> t32-t64, in the tensor --tensors names.
Training is chaotic, so after tens of steps every pair drifts apart; the second table therefore
restarts at each checkpoint from prsgd's parameters before that step (before.f32) and compares
prsgd's gradient of that step (grads.f32) with PyTorch's at the same point: each step in isolation.
"""
import argparse
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "vs_pytorch"))
import torch_local_sgd as ref  # noqa: E402  make(), load(): what the vs-PyTorch benchmark trains

BATCH = 64


def flat(model):
    return torch.cat([p.detach().reshape(-1).to(torch.float64) for p in model.parameters()])


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()


def gradient(model, values, x, y):
    """Loss and flat gradient (float64) of one batch at the parameters `values`."""
    ref.load_flat(model, values)
    model.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    return loss.item(), torch.cat([q.grad.reshape(-1).to(torch.float64) for q in model.parameters()])


def trajectory(model, x, y, batches, steps, checkpoints):
    """Losses of every step and flat parameters (float64) after each checkpoint step."""
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses, params = [], {}
    for s in range(steps):
        idx = batches[s]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if s + 1 in checkpoints:
            params[s + 1] = flat(model)
    return losses, params


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", help="the outdir of `prsgd_nn_bench parity`")
    p.add_argument("--model", default="fmnist-mlp")
    p.add_argument("--no-double", action="store_true", help="skip the float64 reference run")
    p.add_argument("--tensors", action="store_true", help="per-tensor differences at every checkpoint")
    a = p.parse_args()
    torch.set_num_threads(1)

    d = a.dir
    init = np.fromfile(f"{d}/init.f32", np.float32)
    batches = torch.from_numpy(np.fromfile(f"{d}/batches.u32", np.uint32).astype(np.int64)).reshape(-1, BATCH)
    checkpoints = [int(v) for v in open(f"{d}/checkpoints.txt").read().split()]
    p_loss = [float(v) for v in open(f"{d}/loss.txt").read().split()]
    steps = len(p_loss)
    p_params = np.fromfile(f"{d}/params.f32", np.float32).reshape(len(checkpoints), init.size)
    p_params = {c: torch.from_numpy(p_params[i]).to(torch.float64) for i, c in enumerate(checkpoints)}
    p_before = np.fromfile(f"{d}/before.f32", np.float32).reshape(len(checkpoints), init.size)
    p_grads = np.fromfile(f"{d}/grads.f32", np.float32).reshape(len(checkpoints), -1)

    xtr, ytr = ref.load("train")
    x0 = torch.from_numpy(np.fromfile(f"{d}/x0.f32", np.float32)).reshape(BATCH, 1, 28, 28)
    dx = (x0 - xtr[batches[0]]).abs()
    print(f"inputs: first batch max |prsgd - torch| = {dx.max().item():.3g} "
          f"({(dx > 0).sum().item()} of {dx.numel()} values differ; max |x| = {x0.abs().max().item():.3g})")

    models = {}
    m32 = ref.make(a.model)
    ref.load_flat(m32, init)
    names = [n for n, _ in m32.named_parameters()]
    sizes = [q.numel() for q in m32.parameters()]
    models["t32"] = (m32, xtr, ytr)
    if not a.no_double:
        m64 = ref.make(a.model).double()
        ref.load_flat(m64, init)
        models["t64"] = (m64, xtr.double(), ytr)
    with torch.no_grad():
        first = {k: F.cross_entropy(m(x[batches[0]]), y[batches[0]]).item() for k, (m, x, y) in models.items()}
    print("first forward loss: prsgd %.9g  " % p_loss[0] + "  ".join(f"{k} {v:.9g}" for k, v in first.items()))

    runs = {k: trajectory(m, x, y, batches, steps, set(checkpoints)) for k, (m, x, y) in models.items()}
    runs["p"] = (p_loss, p_params)
    pairs = [("p", "t32")] + ([("p", "t64"), ("t32", "t64")] if "t64" in runs else [])

    def split(v):
        return dict(zip(names, torch.split(v, sizes)))

    head = f"{'step':>5} {'loss prsgd':>11} {'loss t32':>11}" + (f" {'loss t64':>11}" if "t64" in runs else "")
    head += "".join(f" {'rel ' + x + '-' + y:>13} {'maxabs ' + x + '-' + y:>14}" for x, y in pairs)
    head += "  worst tensor (rel p-" + ("t64" if "t64" in runs else "t32") + ")"
    print(head)
    for c in checkpoints:
        row = f"{c:5d} {p_loss[c - 1]:11.7f} {runs['t32'][0][c - 1]:11.7f}"
        if "t64" in runs:
            row += f" {runs['t64'][0][c - 1]:11.7f}"
        for x, y in pairs:
            u, v = runs[x][1][c], runs[y][1][c]
            row += f" {rel(u, v):13.3e} {(u - v).abs().max().item():14.3e}"
        ref_key = "t64" if "t64" in runs else "t32"
        per = {n: rel(u, v) for (n, u), v in zip(split(runs["p"][1][c]).items(), split(runs[ref_key][1][c]).values())}
        worst = max(per, key=per.get)
        row += f"  {worst} {per[worst]:.2e}"
        print(row)
        if a.tensors or c in (1, checkpoints[-1]):
            for n in names:
                pu, tu = split(runs["p"][1][c])[n], split(runs["t32"][1][c])[n]
                line = f"        {n:<12} p-t32 {rel(pu, tu):.3e}"
                if "t64" in runs:
                    t64 = split(runs["t64"][1][c])[n]
                    line += f"  p-t64 {rel(pu, t64):.3e}  t32-t64 {rel(tu, t64):.3e}"
                print(line)

    print("\nper step from prsgd's parameters before it: gradient differences (g64 = float64 reference)")
    ref_key = "t64" if "t64" in models else "t32"
    print(f"{'step':>5} {'loss prsgd':>11} {'loss ' + ref_key:>11} {'rel gp-g' + ref_key[1:]:>12}"
          + (f" {'rel g32-g64':>12}" if ref_key == "t64" else "") + "  worst tensor (p / t32 vs ref)")
    for i, c in enumerate(checkpoints):
        idx = batches[c - 1]
        out = {k: gradient(m, p_before[i], x[idx], y[idx]) for k, (m, x, y) in models.items()}
        gp = torch.from_numpy(p_grads[i]).to(torch.float64)
        gr = out[ref_key][1]
        row = f"{c:5d} {p_loss[c - 1]:11.7f} {out[ref_key][0]:11.7f} {rel(gp, gr):12.3e}"
        if ref_key == "t64":
            row += f" {rel(out['t32'][1], gr):12.3e}"
        per = {n: (rel(u, v), rel(w, v)) for n, u, v, w in
               zip(names, torch.split(gp, sizes), torch.split(gr, sizes), torch.split(out["t32"][1], sizes))}
        worst = max(per, key=lambda n: per[n][0])
        row += f"  {worst} {per[worst][0]:.2e} / {per[worst][1]:.2e}"
        print(row)


if __name__ == "__main__":
    sys.exit(main())
