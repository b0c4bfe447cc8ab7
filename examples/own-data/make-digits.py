#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Writes scikit-learn's handwritten digits (1,797 8x8 images, 10 classes) as a prsgd data set.

    examples/own-data/make-digits.py OUT_DIR [--format npy|csv] [--test-fraction 0.2] [--seed 0]

npy: OUT_DIR/train_x.npy (N, 8, 8) uint8 in 0..16 scaled to 0..255, train_y.npy (N,) int64, and the same
for test_*.npy; prsgd divides uint8 features by 255.
csv: OUT_DIR/train.csv and test.csv with a header row "label,p0,...,p63" and pixel values in [0, 1].

The test split is a stratified random 20 % (fixed seed), so every run writes the same files.
Needs Debian's python3-sklearn (the digits ship with it; nothing is downloaded).
"""
import argparse
import os
import sys

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--format", choices=("npy", "csv"), default="npy")
    ap.add_argument("--test-fraction", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    digits = load_digits()
    # Pixels are 0..16; stretch to 0..255 so that uint8 / 255 gives [0, 1].
    images = np.round(digits.images * (255.0 / 16.0)).astype(np.uint8)
    labels = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        images, labels, test_size=args.test_fraction, random_state=args.seed, stratify=labels)

    os.makedirs(args.out_dir, exist_ok=True)
    if args.format == "npy":
        np.save(os.path.join(args.out_dir, "train_x.npy"), x_train)
        np.save(os.path.join(args.out_dir, "train_y.npy"), y_train)
        np.save(os.path.join(args.out_dir, "test_x.npy"), x_test)
        np.save(os.path.join(args.out_dir, "test_y.npy"), y_test)
    else:
        header = "label," + ",".join(f"p{i}" for i in range(64))
        for name, x, y in (("train.csv", x_train, y_train), ("test.csv", x_test, y_test)):
            rows = np.column_stack([y, x.reshape(len(x), -1) / 255.0])
            np.savetxt(os.path.join(args.out_dir, name), rows, delimiter=",", header=header, comments="",
                       fmt=["%d"] + ["%.4f"] * 64)
    print(f"{args.out_dir}: {len(y_train)} train and {len(y_test)} test digits ({args.format})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
