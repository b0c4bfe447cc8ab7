# SPDX-License-Identifier: Apache-2.0
"""A Python evaluator (prsgd.Evaluator) for a job of the built-in softmax regression `mlp:784-10` on
Fashion-MNIST: it scores x̄ with numpy on the test split, preprocessed as prsgd does (bytes / 255, then
normalised with the data set's mean and standard deviation), sends the accuracy with the mean
cross-entropy, and exits like `prsgd evaluator`.

    linear_evaluator.py ENDPOINT FINGERPRINT DATA_DIR PUBLIC SECRET SERVER_PUBLIC
"""
import gzip
import os
import sys

import numpy as np

import prsgd

MEAN, STD = 0.2860, 0.3530  # algorithms/include/prsgd/algorithms/fashion_mnist.hpp


def idx(path, offset):
    with gzip.open(path, "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)


def main():
    endpoint, fingerprint, data_dir, public, secret, server = sys.argv[1:7]
    images = idx(os.path.join(data_dir, "t10k-images-idx3-ubyte.gz"), 16).reshape(-1, 784)
    labels = idx(os.path.join(data_dir, "t10k-labels-idx1-ubyte.gz"), 8).astype(np.int64)
    x = ((images.astype(np.float32) / 255.0) - MEAN) / STD

    def score(params):
        w = params[:7840].reshape(10, 784)  # the weight, out x in, row-major; then the bias
        b = params[7840:7850]
        logits = (x @ w.T + b).astype(np.float64)
        shifted = logits - logits.max(axis=1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        loss = float(-np.mean(log_probs[np.arange(labels.size), labels]))  # mean cross-entropy
        return float(np.mean(np.argmax(logits, axis=1) == labels)), loss

    evaluator = prsgd.Evaluator(endpoint, score, model_fingerprint=fingerprint, heartbeat_ms=100,
                                curve_public_key=public, curve_secret_key=secret, curve_server_key=server)
    return evaluator.run_to_exit_status("linear_evaluator")


if __name__ == "__main__":
    sys.exit(main())
