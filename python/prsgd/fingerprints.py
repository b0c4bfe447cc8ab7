# SPDX-License-Identifier: Apache-2.0
"""The fingerprints a JOIN declares, built as `prsgd worker` builds them, so that a Python worker of a built-in
model (and data set) is admitted to a job whose averager runs that model, and refused from any other.

    model("fmnist-mlp", (1, 28, 28), 10, 535818)  -> "fmnist-mlp in=1x28x28 out=10 params=535818"
    data("fashion-mnist", 60000, (1, 28, 28), 10)  -> "fashion-mnist n=60000 shape=1x28x28 classes=10"
"""


def _shape(shape):
    return "x".join(str(int(d)) for d in shape)


def model(name, in_shape, classes, params):
    """The model fingerprint: model name, input shape (C, H, W), classes and the flat parameter count."""
    return f"{name} in={_shape(in_shape)} out={int(classes)} params={int(params)}"


def data(name, train_size, shape, classes):
    """The data fingerprint: data set name, training samples, sample shape (C, H, W) and classes."""
    return f"{name} n={int(train_size)} shape={_shape(shape)} classes={int(classes)}"
