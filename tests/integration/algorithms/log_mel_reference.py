#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Independent numpy reference for prsgd::algorithms::log_mel (used by log_mel_test and speech_test).

Usage: log_mel_reference.py OUT.txt FILE.wav...
Writes, per file, a line "frames mels" followed by frames lines of mels values (%.9g).
Definition (must match log_mel.hpp): 16 kHz 16-bit mono WAV scaled by 1/32768, frames of 400 samples every
160 (no padding), periodic Hann, 512-point rfft, power |X|^2, 40 HTK-mel triangles (peak 1) with edges equally
spaced in mel between 20 and 8000 Hz, natural log(mel + 1e-6). Everything in float64 with numpy's own FFT.
"""
import sys
import wave

import numpy as np

SR, WIN, HOP, NFFT, MELS, FMIN, FMAX, EPS = 16000, 400, 160, 512, 40, 20.0, 8000.0, 1e-6


def read(path):
    with wave.open(path, "rb") as w:
        assert w.getframerate() == SR and w.getnchannels() == 1 and w.getsampwidth() == 2, path
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float64) / 32768.0


def mel_bank():
    hz2mel = lambda f: 2595.0 * np.log10(1.0 + f / 700.0)
    mel2hz = lambda m: 700.0 * (10.0 ** (m / 2595.0) - 1.0)
    edges = mel2hz(np.linspace(hz2mel(FMIN), hz2mel(FMAX), MELS + 2))
    freqs = np.fft.rfftfreq(NFFT, d=1.0 / SR)
    lower = (freqs[None, :] - edges[:-2, None]) / (edges[1:-1] - edges[:-2])[:, None]
    upper = (edges[2:, None] - freqs[None, :]) / (edges[2:] - edges[1:-1])[:, None]
    return np.maximum(0.0, np.minimum(lower, upper))


def log_mel(x):
    frames = 1 + (len(x) - WIN) // HOP
    idx = np.arange(WIN)[None, :] + HOP * np.arange(frames)[:, None]
    window = np.hanning(WIN + 1)[:-1]  # periodic Hann
    spec = np.abs(np.fft.rfft(x[idx] * window, n=NFFT, axis=1)) ** 2
    return np.log(spec @ mel_bank().T + EPS)


def main():
    out = open(sys.argv[1], "w")
    for path in sys.argv[2:]:
        m = log_mel(read(path))
        out.write(f"{m.shape[0]} {m.shape[1]}\n")
        for row in m:
            out.write(" ".join(f"{v:.9g}" for v in row) + "\n")
    out.close()


if __name__ == "__main__":
    main()
