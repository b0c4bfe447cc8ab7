# SPDX-License-Identifier: Apache-2.0
"""The fingerprints a JOIN declares, built as `prsgd worker` builds them, so that a Python worker of a built-in
model (and data set) is admitted to a job whose averager runs that model, and refused from any other.

    model("fmnist-mlp", (1, 28, 28), 10, 535818)  -> "fmnist-mlp in=1x28x28 out=10 params=535818"
    data("fashion-mnist", 60000, (1, 28, 28), 10)  -> "fashion-mnist n=60000 shape=1x28x28 classes=10"

For a model the averager does not build (`prsgd averager --model external`):

    external(203530)                               -> "external params=203530"
    external_data(60000, labels)                   -> "external n=60000 labels=<16 hex digits>"
"""
import numpy as np


def _shape(shape):
    return "x".join(str(int(d)) for d in shape)


def model(name, in_shape, classes, params):
    """The model fingerprint: model name, input shape (C, H, W), classes and the flat parameter count."""
    return f"{name} in={_shape(in_shape)} out={int(classes)} params={int(params)}"


def data(name, train_size, shape, classes, labels=None):
    """The data fingerprint: data set name, training samples, sample shape (C, H, W) and classes, and with
    `labels` (the training labels in order) their hash, as averagers that check the labels declare it."""
    text = f"{name} n={int(train_size)} shape={_shape(shape)} classes={int(classes)}"
    if labels is not None:
        text += f" labels={label_hash(labels):016x}"
    return text


def fnv1a64(data):
    """The 64-bit FNV-1a hash of `data` (bytes)."""
    h = 0xcbf29ce484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def label_hash(labels):
    """FNV-1a (64 bit) over the labels as little-endian 32-bit integers, as prsgd hashes them."""
    return fnv1a64(np.asarray(labels, dtype="<i4").tobytes())


def external(params):
    """The model fingerprint of a `--model external` job: the flat parameter count (what --model-size says)."""
    return f"external params={int(params)}"


def external_data(train_size, labels=None):
    """The data fingerprint of a `--model external` job: the training set's length (what --train-size says)
    and, with `labels` (the training labels in order), their hash. The first member that declares a hash
    fixes it for the job; a later member with another hash is refused."""
    text = f"external n={int(train_size)}"
    if labels is not None:
        text += f" labels={label_hash(labels):016x}"
    return text
