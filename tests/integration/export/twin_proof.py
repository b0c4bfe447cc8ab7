#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Proof that prsgd's exported weights are the PyTorch twins' weights (python/prsgd_twins.py).

  twin_proof.py --prsgd BIN --model fmnist-mlp --workdir DIR train --epochs 1
  twin_proof.py --prsgd BIN --model fmnist-cnn --workdir DIR train --rounds 12 --checkpoint
  twin_proof.py --prsgd BIN --model fmnist-resnet8 --workdir DIR random
  twin_proof.py --prsgd BIN --model kws-cnn --workdir DIR random

train: `prsgd local --save-model` trains briefly and writes the final model; the twin loads it with
strict=True and predicts the Fashion-MNIST test set; `prsgd eval --json --predictions` must agree on at
least 99.9 % of the images and the two accuracies may differ by no more than the disagreements. With
--checkpoint, `prsgd export` of the job's last checkpoint must hold the same tensors, bit for bit.
random: the twin, with random parameters and running statistics, writes the weights (Python's
safetensors writer, read by prsgd); Fashion-MNIST models are compared through `prsgd eval` as above,
kws-cnn through `prsgd predict --json` on random log-mel features (probabilities within 1e-4).
"""
import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "python"))
import prsgd_twins  # noqa: E402


def run(cmd):
    print("+ " + " ".join(cmd), flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"FAIL: exit status {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}")
    return done.stdout


def fmnist_test():
    d = os.environ.get("PRSGD_FMNIST_DIR") or "/usr/share/datasets/fashion-mnist"
    with gzip.open(f"{d}/t10k-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).astype(np.float32).reshape(-1, 1, 28, 28)
    with gzip.open(f"{d}/t10k-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
    x = (x / np.float32(255.0) - np.float32(prsgd_twins.FMNIST_MEAN)) / np.float32(prsgd_twins.FMNIST_STD)
    return torch.from_numpy(x), torch.from_numpy(y)


def twin_from(model, path):
    twin = prsgd_twins.make(model)
    twin.load_state_dict(prsgd_twins.load_safetensors(path), strict=True)  # names, shapes, num_batches_tracked
    return twin.eval()


def compare_eval(a, twin, weights):
    """prsgd eval's predictions against the twin's on the Fashion-MNIST test set."""
    preds = os.path.join(a.workdir, "predictions.csv")
    report = json.loads(run([a.prsgd, "eval", "--model", a.model, "--weights", weights, "--json",
                             "--predictions", preds]))
    rows = np.loadtxt(preds, delimiter=",", skiprows=1, dtype=np.int64)
    x, y = fmnist_test()
    with torch.no_grad():
        mine = torch.cat([twin(x[s:s + 500]).argmax(1) for s in range(0, len(y), 500)]).numpy()
    assert (rows[:, 1] == y.numpy()).all(), "prsgd eval's labels are not the test set's"
    agree = float((rows[:, 2] == mine).mean())
    acc_twin = float((mine == y.numpy()).mean())
    acc_prsgd = float(report["accuracy"])
    print(f"{a.model}: identical predictions on {100 * agree:.3f} % of {len(y)} test images; accuracy prsgd "
          f"{100 * acc_prsgd:.2f} %, PyTorch twin {100 * acc_twin:.2f} %")
    assert abs(acc_prsgd - float((rows[:, 2] == rows[:, 1]).mean())) < 1e-12, "eval's accuracy vs its predictions"
    assert agree >= 0.999, f"only {agree:.4%} identical predictions"
    assert abs(acc_prsgd - acc_twin) <= 1 - agree + 1e-12, "accuracies differ by more than the disagreements"


def randomise(twin, seed):
    """Random parameters and running statistics (positive variances), so that every tensor matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in twin.state_dict().items():
            if name.endswith("num_batches_tracked"):
                t.fill_(3)
            elif name.endswith("running_var"):
                t.copy_(0.5 + torch.rand(t.shape, generator=g))
            elif name.endswith("running_mean"):
                t.copy_(0.2 * torch.randn(t.shape, generator=g))
            elif name.endswith("bn1.weight") or ".bn" in name or name.startswith("bn"):
                t.copy_(1 + 0.2 * torch.randn(t.shape, generator=g))
            else:
                t.add_(0.05 * torch.randn(t.shape, generator=g))
    return twin


def train_mode(a):
    weights = os.path.join(a.workdir, "model.safetensors")
    cmd = [a.prsgd, "local", "--model", a.model, "--workers", "2", "--save-model", weights, "--progress", "off",
           "--log-dir", os.path.join(a.workdir, "logs"), "--seed", "3"]
    cmd += ["--epochs", str(a.epochs)] if a.epochs else ["--epochs", "0", "--rounds", str(a.rounds)]
    ckpt = os.path.join(a.workdir, "ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)  # a checkpoint left by an earlier run would be resumed
    if a.checkpoint:
        cmd += ["--checkpoint-dir", ckpt, "--checkpoint-every", str(a.rounds)]
    run(cmd)
    twin = twin_from(a.model, weights)
    compare_eval(a, twin, weights)
    if a.checkpoint:
        exported = os.path.join(a.workdir, "exported.safetensors")
        run([a.prsgd, "export", "--checkpoint-dir", ckpt, "--out", exported])
        final, meta_final = prsgd_twins.read_safetensors(weights)
        ckpt_tensors, meta_ckpt = prsgd_twins.read_safetensors(exported)
        assert final.keys() == ckpt_tensors.keys()
        for k in final:
            assert final[k].tobytes() == ckpt_tensors[k].tobytes(), f"{k} differs between --save-model and export"
        assert meta_final["prsgd.round"] == meta_ckpt["prsgd.round"] == str(a.rounds), (meta_final, meta_ckpt)
        assert meta_final["prsgd.fingerprint"] == meta_ckpt["prsgd.fingerprint"]
        print(f"export of the round-{a.rounds} checkpoint equals the saved final model ({len(final)} tensors)")


def random_mode(a):
    torch.manual_seed(5)
    twin = randomise(prsgd_twins.make(a.model), 11).eval()
    weights = os.path.join(a.workdir, "random.safetensors")
    prsgd_twins.save_safetensors(twin.state_dict(), weights, {"format": "pt"})
    if a.model.startswith("kws"):
        x = np.random.default_rng(2).normal(-4, 3, size=(64, 1, 98, 40)).astype(np.float32)
        inputs = os.path.join(a.workdir, "features.npy")
        np.save(inputs, x)
        out = run([a.prsgd, "predict", "--model", a.model, "--weights", weights, "--json", "--top-k", "12", inputs])
        lines = [json.loads(line) for line in out.splitlines()]
        assert len(lines) == len(x), f"{len(lines)} predictions for {len(x)} samples"
        with torch.no_grad():
            probs = F.softmax(twin(torch.from_numpy(x)).double(), 1).numpy()
        worst = 0.0
        for line in lines:
            p = probs[line["index"]]
            assert line["top"][0]["class"] == int(p.argmax()), line
            assert line["top"][0]["name"] == prsgd_twins.KWS_WORDS[int(p.argmax())]
            for entry in line["top"]:
                worst = max(worst, abs(entry["probability"] - p[entry["class"]]))
        print(f"{a.model}: same top-1 class on all {len(x)} samples; largest probability difference {worst:.2e}")
        assert worst < 1e-4
    else:
        compare_eval(a, twin, weights)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prsgd", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--workdir", required=True)
    sub = p.add_subparsers(dest="mode", required=True)
    t = sub.add_parser("train")
    t.add_argument("--epochs", type=int, default=0)
    t.add_argument("--rounds", type=int, default=24)
    t.add_argument("--checkpoint", action="store_true")
    sub.add_parser("random")
    a = p.parse_args()
    torch.set_num_threads(1)
    os.makedirs(a.workdir, exist_ok=True)
    train_mode(a) if a.mode == "train" else random_mode(a)
    print("PASS")


if __name__ == "__main__":
    main()
