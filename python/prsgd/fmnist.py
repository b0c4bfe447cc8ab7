# SPDX-License-Identifier: Apache-2.0
"""Fashion-MNIST as prsgd reads it: Debian's dataset-fashion-mnist files (idx, gzip), pixels scaled to [0, 1]
and normalised with mean 0.2860 and std 0.3530, images of shape (1, 28, 28), 10 classes.

    train = prsgd.fmnist.FashionMnist("/usr/share/datasets/fashion-mnist", "train")
    train[[0, 5, 9]]  -> (float32 tensor (3, 1, 28, 28), int64 tensor (3,))

Indexing with a list of indices returns a whole batch at once; use it with `DataLoader(ds, batch_size=None,
sampler=BatchSampler(sampler, B, drop_last=False))` to skip per-sample collation.
"""
import gzip
import os

import numpy as np
import torch

MEAN, STD = 0.2860, 0.3530
SHAPE, CLASSES, NAME = (1, 28, 28), 10, "fashion-mnist"
DEFAULT_DIR = os.environ.get("PRSGD_FMNIST_DIR", "/usr/share/datasets/fashion-mnist")


def _read_idx(path, magic):
    with gzip.open(path, "rb") as f:
        data = f.read()
    got = int.from_bytes(data[:4], "big")
    if got != magic:
        raise ValueError(f"{path}: not an idx file of the expected kind (magic {got:#x})")
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


class FashionMnist(torch.utils.data.Dataset):
    """One split ("train" or "test") of Fashion-MNIST, held as bytes and normalised when indexed; with `limit`,
    only its first `limit` samples."""

    def __init__(self, data_dir=DEFAULT_DIR, split="train", limit=None):
        prefix = {"train": "train", "test": "t10k"}[split]
        images = _read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"), 0x803)
        labels = _read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"), 0x801)
        if images.shape[0] != labels.shape[0]:
            raise ValueError(f"{data_dir}: {images.shape[0]} images but {labels.shape[0]} labels")
        if limit is not None:
            if limit <= 0:
                raise ValueError(f"limit must be positive (got {limit})")
            images, labels = images[:limit], labels[:limit]
        self.images = torch.from_numpy(images.copy())
        self.labels = torch.from_numpy(labels.astype(np.int64))
        table = (np.arange(256, dtype=np.float32) / np.float32(255.0) - np.float32(MEAN)) / np.float32(STD)
        self.table = torch.from_numpy(table.astype(np.float32))

    def __len__(self):
        return self.labels.shape[0]

    def __getitem__(self, index):
        idx = torch.as_tensor(index, dtype=torch.int64)
        x = self.table[self.images[idx].to(torch.int64)]
        return x.unsqueeze(-3), self.labels[idx]


def data_fingerprint(train):
    """The fingerprint `prsgd worker` declares for this training split (with its labels' hash when the
    protocol's averagers check it)."""
    from . import fingerprints, protocol
    labels = train.labels.numpy() if protocol.DATA_FINGERPRINT_HAS_LABELS else None
    return fingerprints.data(NAME, len(train), SHAPE, CLASSES, labels)
