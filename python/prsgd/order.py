# SPDX-License-Identifier: Apache-2.0
"""The order in which the averager hands out a data set's samples (actors/PROTOCOL.md, "Data: sample ranges
per round"): RESTART's `ranges` name *positions*, counted over all epochs; position q is position
p = q mod n of epoch e = q div n, which names the sample epoch_permutation(seed, e, n)(p).

The permutation is a six-round balanced Feistel network over [0, 4^h) (4^h the smallest power of four
>= n, h >= 1) with cycle walking, keyed from splitmix64; the C++ averager and workers compute the same
values bit for bit.
"""
import numpy as np

_M64 = (1 << 64) - 1
_ROUNDS = 6


def splitmix64(x):
    """The splitmix64 step on one integer: add the golden-ratio increment, then mix (mod 2^64)."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _splitmix64_array(x):
    # numpy uint64 arithmetic wraps modulo 2^64, as the C++ does.
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


class EpochPermutation:
    """A bijection of [0, n) drawn from (seed, epoch): maps a position of that epoch to a sample index."""

    def __init__(self, seed, epoch, n):
        if n <= 0:
            raise ValueError("EpochPermutation needs a non-empty data set")
        self.n = int(n)
        self.half = 1
        while self.half < 32 and (1 << (2 * self.half)) < self.n:
            self.half += 1
        self.mask = (1 << self.half) - 1
        k = splitmix64(splitmix64(int(seed) & _M64) ^ (int(epoch) & _M64))
        self.keys = []
        for _ in range(_ROUNDS):
            self.keys.append(k)
            k = splitmix64(k)

    def _feistel(self, x):
        h, mask = np.uint64(self.half), np.uint64(self.mask)
        left, right = x >> h, x & mask
        with np.errstate(over="ignore"):
            for key in self.keys:
                left, right = right, left ^ (_splitmix64_array(right ^ np.uint64(key)) & mask)
        return (left << h) | right

    def __call__(self, positions):
        """Returns the samples at `positions` (an int or an array of ints below n)."""
        scalar = np.isscalar(positions)
        p = np.atleast_1d(np.asarray(positions, dtype=np.uint64))
        if p.size and int(p.max()) >= self.n:
            raise ValueError(f"position {int(p.max())} is outside the data set of {self.n}")
        x = self._feistel(p)
        n = np.uint64(self.n)
        walk = x >= n
        while walk.any():  # cycle walking: apply the network again until the value is a sample
            x[walk] = self._feistel(x[walk])
            walk = x >= n
        out = x.astype(np.int64)
        return int(out[0]) if scalar else out


def samples_of(ranges, n, seed):
    """Returns the sample indices (int64 array) at the global positions `ranges` ([begin, end) pairs of
    RESTART) of a data set of n samples, in the ranges' order."""
    n = int(n)
    parts = []
    for b, e in ranges:
        q = int(b)
        while q < int(e):
            epoch, p = divmod(q, n)
            stop = min(int(e), (epoch + 1) * n)  # a range could in principle cross an epoch's end
            parts.append(EpochPermutation(seed, epoch, n)(np.arange(p, p + stop - q, dtype=np.uint64)))
            q = stop
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)
