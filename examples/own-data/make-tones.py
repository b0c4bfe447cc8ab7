#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Writes a small labelled WAV data set of tones for `prsgd --dataset wav-folder`.

    examples/own-data/make-tones.py OUT_DIR [--train-per-label 12] [--test-per-label 4] [--seed 0]

OUT_DIR/train/<label>/*.wav and OUT_DIR/test/<label>/*.wav, one folder per label: low (250 Hz), mid
(500 Hz), high (1 kHz) and chirp (a sweep from 300 Hz to 2 kHz). Every clip is 1 s of 16 kHz mono 16-bit
PCM with a random pitch offset (up to 8 %), onset, length, loudness and background noise, so the classes
differ by pitch and shape only. Needs python3-numpy; the same seed writes the same files.
"""
import argparse
import os
import sys
import wave

import numpy as np

RATE = 16000
LABELS = {"low": 250.0, "mid": 500.0, "high": 1000.0, "chirp": None}


def clip(label: str, rng: np.random.Generator) -> np.ndarray:
    t = np.arange(RATE) / RATE
    scale = 1.0 + rng.uniform(-0.08, 0.08)
    if LABELS[label] is None:
        freq = (300.0 + (2000.0 - 300.0) * t) * scale  # linear sweep
    else:
        freq = np.full_like(t, LABELS[label] * scale)
    phase = 2 * np.pi * np.cumsum(freq) / RATE + rng.uniform(0, 2 * np.pi)
    start = rng.uniform(0.0, 0.3)
    length = rng.uniform(0.4, 0.7)
    envelope = ((t >= start) & (t < start + length)).astype(np.float64)
    signal = rng.uniform(0.2, 0.6) * envelope * np.sin(phase) + rng.normal(0.0, 0.02, RATE)
    return np.clip(signal, -1.0, 1.0)


def write_wav(path: str, samples: np.ndarray) -> None:
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes((samples * 32767.0).astype("<i2").tobytes())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--train-per-label", type=int, default=12)
    ap.add_argument("--test-per-label", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    for split, count in (("train", args.train_per_label), ("test", args.test_per_label)):
        for label in LABELS:
            folder = os.path.join(args.out_dir, split, label)
            os.makedirs(folder, exist_ok=True)
            for i in range(count):
                write_wav(os.path.join(folder, f"{label}-{i:03d}.wav"), clip(label, rng))
    total = (args.train_per_label + args.test_per_label) * len(LABELS)
    print(f"{args.out_dir}: {total} clips, labels {', '.join(sorted(LABELS))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
