# SPDX-License-Identifier: Apache-2.0
"""prsgd's IID shard sampler in Python, bit for bit (algorithms/src/data/rng.hpp and sharding.cpp).

Every pass ("epoch" of the sampler) all N workers cut the same seeded permutation of the training set into
N contiguous slices; worker w visits slice w in the permutation's order, in batches of B, the last batch of a
pass short (drop_last = false). `python3 prsgd_sampler.py` checks it against the order pinned by the C++ test
ShardingTest.IidOrderIsPinnedForThePyTorchTwin (ctest runs both).
"""
import os

_M = (1 << 64) - 1
_TAG_IID = 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & _M
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M
    return x ^ (x >> 31)


def derive_seed(seed, a, b=0, c=0):
    h = splitmix64(seed & _M)
    h = splitmix64(h ^ a)
    h = splitmix64(h ^ ((b + 0x632BE59BD9B4E019) & _M))
    return splitmix64(h ^ ((c + 0x8CB92BA72F3D8DD7) & _M))


def _rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & _M


class Rng:
    """xoshiro256** seeded through splitmix64, as detail::rng."""

    def __init__(self, seed):
        self.s = []
        for _ in range(4):
            seed = splitmix64(seed)
            self.s.append(seed)

    def next(self):
        s = self.s
        result = (_rotl((s[1] * 5) & _M, 7) * 9) & _M
        t = (s[1] << 17) & _M
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = _rotl(s[3], 45)
        return result

    def below(self, n):
        """Uniform in [0, n) without modulo bias (Lemire), as detail::rng::below."""
        m = self.next() * n
        low = m & _M
        if low < n:
            threshold = ((1 << 64) - n) % n
            while low < threshold:
                m = self.next() * n
                low = m & _M
        return m >> 64

    def shuffle(self, v):
        for i in range(len(v), 1, -1):
            j = self.below(i)
            v[i - 1], v[j] = v[j], v[i - 1]


def iid_slice(n, parts, w, seed, epoch):
    """Worker w's samples of pass `epoch`, in visiting order."""
    perm = list(range(n))
    Rng(derive_seed(seed, _TAG_IID, epoch)).shuffle(perm)
    return perm[n * w // parts: n * (w + 1) // parts]


class ShardSampler:
    """Worker w's batches, pass after pass, as prsgd's shard_sampler (IID, drop_last = false)."""

    def __init__(self, n, parts, w, seed, batch):
        self.n, self.parts, self.w, self.seed, self.batch = n, parts, w, seed, batch
        self.epoch = 0
        self.order = iid_slice(n, parts, w, seed, 0)
        self.pos = 0

    def next_batch(self):
        if self.pos == len(self.order):
            self.epoch += 1
            self.order = iid_slice(self.n, self.parts, self.w, self.seed, self.epoch)
            self.pos = 0
        out = self.order[self.pos:self.pos + self.batch]
        self.pos += len(out)
        return out


def batches(n, parts, w, seed, batch, steps, cache_dir=None):
    """Worker w's first `steps` batches as a list of index lists. With cache_dir, they are read from (or
    written to) an .npz file there, so a timed run does not spend its clock on pure-Python shuffles."""
    import numpy as np  # here, so the self-test runs on a Python without numpy

    path = None
    if cache_dir:
        path = os.path.join(cache_dir, f"prsgd-order-n{n}-N{parts}-w{w}-s{seed}-b{batch}-t{steps}.npz")
        if os.path.exists(path):
            with np.load(path) as z:
                flat, sizes = z["flat"].tolist(), z["sizes"].tolist()
            out, at = [], 0
            for k in sizes:
                out.append(flat[at:at + k])
                at += k
            return out
    s = ShardSampler(n, parts, w, seed, batch)
    out = [s.next_batch() for _ in range(steps)]
    if path:
        tmp = f"{path}.{os.getpid()}.tmp.npz"
        np.savez(tmp, flat=np.array([i for b in out for i in b], dtype=np.int64),
                 sizes=np.array([len(b) for b in out], dtype=np.int64))
        os.replace(tmp, path)
    return out


# The same values as ShardingTest.IidOrderIsPinnedForThePyTorchTwin (tests/unit/algorithms/data/sharding_test.cpp):
# (worker, batch, size, first three indices) of N = 4 workers, seed 1, batch 64 over 60000 samples.
GOLDEN = [(0, 0, 64, [45771, 23216, 28940]), (0, 234, 24, [38912, 36982, 52673]),
          (0, 235, 64, [36556, 2700, 42400]), (1, 0, 64, [43336, 12669, 24598]),
          (1, 234, 24, [2684, 40824, 12929]), (3, 235, 64, [19616, 32028, 21218])]


def self_test():
    bad = 0
    for w in (0, 1, 3):
        s = ShardSampler(60000, 4, w, 1, 64)
        for b in range(236):
            batch = s.next_batch()
            for gw, gb, size, first in GOLDEN:
                if (gw, gb) == (w, b) and (len(batch) != size or batch[:3] != first):
                    print(f"worker {w} batch {b}: {len(batch)} samples {batch[:3]}, want {size} {first}")
                    bad += 1
    print("prsgd_sampler: " + ("FAILED" if bad else "matches prsgd's pinned order"))
    return 1 if bad else 0


if __name__ == "__main__":
    import sys
    sys.exit(self_test())
