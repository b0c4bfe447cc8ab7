#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks of the Python package without any process or socket: the codec (what the averager's messages
must look like, what JOIN/HEARTBEAT/LEAVE/MODEL look like), ShardSampler's shards and ranges, and the flat
layout of the PyTorch twins (parameters first, then floating-point buffers, in state_dict order).

The evaluator's scoring loop and TorchWorker.train run on this thread too, on a hand-fed job and round
(the worker's in-process wake-up pair of sockets is created and closed, never connected to anything).

usage: package_test.py PYTHON_SRC_DIR       (prints one line per check; exit 1 on the first failure)
"""
import importlib.util
import struct
import sys

sys.path.insert(0, sys.argv[1])

import msgpack  # noqa: E402
import numpy as np  # noqa: E402

from prsgd import protocol as P  # noqa: E402


def check(name, cond):
    if not cond:
        print(f"FAIL {name}")
        sys.exit(1)
    print(f"ok   {name}")


def raises(frames, fragment):
    try:
        P.decode(frames)
    except P.ProtocolError as e:
        return fragment in str(e)
    return False


def header(**fields):
    h = {"v": P.VERSION, "m": 3, "i": 9, "a": 5, "r": 1}
    h.update(fields)
    return msgpack.packb(h)


WELCOME = dict(t=P.WELCOME, ad=1, md=0, ms=4, hb=100, k=77, sh=1, ns=2, mf="m", df="d", bs=8, sd=3)
payload = struct.pack("<4f", 1, 2, 3, 4)
RESTART = dict(t=P.RESTART, iv=8, ss=0.05, md=0, n=4)

m = P.decode([header(**WELCOME)])
check("WELCOME decodes", m.type == P.WELCOME and m["k"] == 77 and m["sh"] == 1 and m["bs"] == 8)
m = P.decode([header(**RESTART), payload])
check("RESTART decodes with its payload", m.type == P.RESTART and list(m.payload) == [1, 2, 3, 4])
check("RESTART without ranges: the shard", m["ranges"] is None)
m = P.decode([header(ranges=[[0, 5], [10, 12]], **RESTART), payload])
check("RESTART carries sample ranges", m["ranges"] == [(0, 5), (10, 12)])
check("empty ranges: the shard", P.decode([header(ranges=[], **RESTART), payload])["ranges"] is None)
check("a backwards range is refused", raises([header(ranges=[[5, 1]], **RESTART), payload], "bad range"))
check("another version is refused", raises([header(**dict(WELCOME, v=1))], "protocol version"))
check("a JOIN is not sent to workers", raises([header(t=P.JOIN)], "not sent to workers"))
check("a missing field is refused", raises([header(**{k: v for k, v in WELCOME.items() if k != "k"})], "'k'"))
check("a negative integer is refused", raises([header(**dict(WELCOME, k=-1))], "'k'"))
check("a bool is not an integer", raises([header(**dict(WELCOME, ms=True))], "'ms'"))
check("a shard beyond the count is refused", raises([header(**dict(WELCOME, sh=2))], "shard 2 of 2"))
check("mode 2 is refused", raises([header(**dict(RESTART, md=2)), payload], "training mode"))
check("a short payload is refused", raises([header(**RESTART), payload[:12]], "does not hold 4 floats"))
check("a RESTART without payload is refused", raises([header(**RESTART)], "does not hold"))
check("a payload on a WELCOME is refused", raises([header(**WELCOME), payload], "with a payload"))
check("n above 2^28 is refused before the payload", raises([header(**dict(RESTART, n=(1 << 28) + 1)), b""],
                                                           "too large"))
check("a header above MAX_HEADER_BYTES is refused",
      raises([header(why="x" * 250, pad=["y" * 250] * P.MAX_ARRAY)], "header of"))
check("three frames are refused", raises([b"a", b"b", b"c"], "3 frames"))
check("garbage is refused", raises([b"\xc1"], "msgpack"))
dup = b"\x87" + b"".join(msgpack.packb(k) + msgpack.packb(v) for k, v in
                         [("v", P.VERSION), ("t", P.REMOVED), ("m", 3), ("i", 9), ("a", 5), ("r", 1), ("m", 4)])
check("a repeated key: the first counts", P.decode([dup])["m"] == 3)

frames = P.encode_model(3, 9, 5, 1, 77, np.array([1, 2, 3], np.float32), 8, 64, 12.5, 64, cut=True)
h = msgpack.unpackb(frames[1])
check("MODEL header", frames[0] == b"D" and h["t"] == P.MODEL and h["k"] == 77 and h["st"] == 8 and h["sa"] == 64
      and h["ct"] is True and h["g"] is False and h["n"] == 3 and bytes(frames[2]) == struct.pack("<3f", 1, 2, 3))
frames = P.encode_join(9, 0, 0, 0.0, "external params=3", "external n=10", np.array([1, 2, 3], np.float32))
h = msgpack.unpackb(frames[1])
check("JOIN with an initial model: n and a payload", len(frames) == 3 and h["n"] == 3 and
      bytes(frames[2]) == struct.pack("<3f", 1, 2, 3))
check("JOIN without one: no n, no payload", len(P.encode_join(9, 0, 0, 0.0, "m", "d")) == 2 and
      "n" not in msgpack.unpackb(P.encode_join(9, 0, 0, 0.0, "m", "d")[1]))
EVALUATE = dict(t=P.EVALUATE, q=7, n=4)
m = P.decode([header(**EVALUATE), payload], P.TO_EVALUATOR)
check("EVALUATE decodes for an evaluator", m.type == P.EVALUATE and m["q"] == 7 and list(m.payload) == [1, 2, 3, 4])
check("EVALUATE is not sent to workers", raises([header(**EVALUATE), payload], "not sent to workers"))
try:
    P.decode([header(**RESTART), payload], P.TO_EVALUATOR)
    check("RESTART is not sent to evaluators", False)
except P.ProtocolError:
    check("RESTART is not sent to evaluators", True)
h = msgpack.unpackb(P.encode_evaluation(9, 5, 12, 7, 0.75)[1])
check("EVALUATION header", h["t"] == P.EVALUATION and h["q"] == 7 and h["acc"] == 0.75 and h["r"] == 12 and
      h["a"] == 5 and h["i"] == 9)
check("EVALUATION without a loss has no loss key", "loss" not in h)
h = msgpack.unpackb(P.encode_evaluation(9, 5, 12, 7, 0.75, 0.5)[1])
check("EVALUATION with a loss", h["loss"] == 0.5 and isinstance(h["loss"], float) and h["acc"] == 0.75)


def scored_by(score):
    """Runs prsgd.Evaluator's scoring loop on one job, on this thread: what it would send, or None."""
    import queue
    from prsgd.evaluator import Evaluator
    ev = Evaluator("tcp://127.0.0.1:1", score, log=lambda *_: None)
    jobs, results = queue.Queue(), queue.Queue()
    jobs.put((5, 12, 7, np.zeros(3, dtype=np.float32)))
    jobs.put(None)
    ev._score_loop(jobs, results)
    return None if results.empty() else results.get()[3:]


check("a score of an accuracy alone sends no loss", scored_by(lambda p: 0.5) == (0.5, None))
check("a score of (accuracy, loss) sends both", scored_by(lambda p: (0.5, 0.25)) == (0.5, 0.25))
check("a NaN loss sends nothing", scored_by(lambda p: (0.5, float("nan"))) is None)
check("a negative loss sends nothing", scored_by(lambda p: (0.5, -1.0)) is None)
h = msgpack.unpackb(P.encode_evaluator_hello(9, 5, "external params=3")[1])
check("EVALUATOR_HELLO header", h["t"] == P.EVALUATOR_HELLO and h["mf"] == "external params=3" and h["m"] == 0)
from prsgd import fingerprints  # noqa: E402
check("external fingerprints", fingerprints.external(3) == "external params=3" and
      fingerprints.external_data(10) == "external n=10" and
      fingerprints.external_data(2, [1, 2]).startswith("external n=2 labels="))
h = msgpack.unpackb(P.encode_join(9, 0, 0, 12.0, "m" * 300, "d")[1])
check("JOIN header, fingerprints clipped to 256 bytes",
      h["m"] == 0 and h["i"] == 9 and h["s"] == 12.0 and len(h["mf"]) == 256 and h["df"] == "d")
h = msgpack.unpackb(P.encode_leave(3, 9, 5, 1, 77)[1])
check("LEAVE carries the token", h["t"] == P.LEAVE and h["k"] == 77)
h = msgpack.unpackb(P.encode_heartbeat(3, 9, 5, 1, 77)[1])
from prsgd import fingerprints  # noqa: E402
check("FNV-1a 64: the published test vectors",
      fingerprints.fnv1a64(b"") == 0xcbf29ce484222325 and fingerprints.fnv1a64(b"a") == 0xaf63dc4c8601ec8c and
      fingerprints.fnv1a64(b"foobar") == 0x85944171f73967e8)
check("label hash: FNV-1a over the labels as little-endian int32",
      fingerprints.label_hash([1, 258]) == fingerprints.fnv1a64(bytes([1, 0, 0, 0, 2, 1, 0, 0])) and
      fingerprints.data("d", 2, (1, 2, 2), 3, [1, 0]).startswith("d n=2 shape=1x2x2 classes=3 labels="))
check("HEARTBEAT from a worker", h["t"] == P.HEARTBEAT and h["fa"] is False and h["k"] == 77)

# The epoch permutation: the same vectors as actors/PROTOCOL.md and the C++ unit test (EpochPermutation).
from prsgd import order  # noqa: E402


def first(seed, epoch, n, k):
    return order.EpochPermutation(seed, epoch, n)(np.arange(k)).tolist()


check("epoch permutation: the protocol's test vectors",
      first(0, 0, 10, 10) == [9, 8, 1, 3, 6, 5, 4, 0, 7, 2] and
      first(42, 3, 1797, 12) == [804, 588, 810, 1616, 555, 832, 426, 879, 689, 1103, 1496, 537] and
      first(0xFEEDFACE12345678, 7, 60000, 12) ==
      [47684, 34121, 57683, 14058, 3852, 41251, 34326, 20073, 10960, 46219, 27062, 53014])
check("epoch permutation: a bijection of [0, n) for awkward n",
      all(sorted(first(3, 1, n, n)) == list(range(n)) for n in (1, 2, 3, 5, 16, 17, 1000, 4097)))
check("epoch permutation: a scalar position gives an int", order.EpochPermutation(0, 0, 10)(0) == 9)
check("global positions: epoch 1 of 10 samples starts at 10",
      order.samples_of([(10, 13)], 10, 0).tolist() == first(0, 1, 10, 3))
from prsgd.worker import Round  # noqa: E402
check("Round.samples maps a RESTART's ranges with the job's seed",
      Round(1, 2, 0.1, 0, [(10, 13)], 0, 1, 4, 0).samples(10).tolist() == first(0, 1, 10, 3) and
      Round(1, 2, 0.1, 0, None, 0, 1, 4, 0).samples(10) is None)
check("global positions: a range across an epoch's end",
      order.samples_of([(8, 12)], 10, 0).tolist() == first(0, 0, 10, 10)[8:] + first(0, 1, 10, 2))

if importlib.util.find_spec("torch") is None:
    print("prsgd.torch checks skipped: no torch")
    sys.exit(0)

import prsgd_twins  # noqa: E402
import prsgd.torch as pt  # noqa: E402
import torch  # noqa: E402

samplers = []
for shard in range(3):
    s = pt.ShardSampler(100)
    s.configure(shard, 3, 11)
    samplers.append(s)
first = [list(s) for s in samplers]
check("shards are disjoint and cover the data set", sorted(sum(first, [])) == list(range(100)))
check("a shard is reshuffled every pass, same members",
      list(samplers[0]) != first[0] and sorted(list(samplers[0])) == sorted(first[0]))
samplers[1].set_ranges([(10, 20), (150, 155)], 7)
got = list(samplers[1])
want = order.EpochPermutation(11, 0, 100)(np.arange(10, 20)).tolist() + \
    order.EpochPermutation(11, 1, 100)(np.arange(50, 55)).tolist()
check("a round's ranges replace the shard: the samples their positions name",
      sorted(got) == sorted(want) and len(set(got)) == 15)
samplers[1].set_ranges(None, 8)
check("without ranges the shard is back", sorted(list(samplers[1])) == sorted(first[1]))

net = prsgd_twins.make("fmnist-resnet8")
names = [n for n, _ in pt.flat_tensors(net)]
first_buffer = next(i for i, n in enumerate(names) if n.endswith("running_mean"))
check("resnet8: every parameter before the first buffer",
      all(not n.endswith(("running_mean", "running_var")) for n in names[:first_buffer]) and
      all(n.endswith(("running_mean", "running_var")) for n in names[first_buffer:]))
check("resnet8: num_batches_tracked is not sent", not any("num_batches_tracked" in n for n in names))
state = net.state_dict()
check("each part in state_dict order",
      [n for n in state if n in names and n in dict(net.named_parameters())] == names[:first_buffer] and
      [n for n in state if n in names[first_buffer:]] == names[first_buffer:])
v = pt.flatten(net)
check("resnet8: flat size", v.size == pt.flat_size(net))
pt.load_flat(net, np.arange(v.size, dtype=np.float32))
check("load_flat then flatten is the identity", np.array_equal(pt.flatten(net), np.arange(v.size, dtype=np.float32)))
check("mlp: fc1.weight first, row-major", pt.flat_tensors(prsgd_twins.make("fmnist-mlp"))[0][0] == "fc1.weight")


class Pairs(torch.utils.data.Dataset):
    """Sample i is (a 1-float input i, target 0); indexing with a list returns the batch."""

    def __len__(self):
        return 1000

    def __getitem__(self, idx):
        idx = torch.as_tensor(idx)
        return idx.float().reshape(-1, 1), torch.zeros(idx.numel(), dtype=torch.long)


# A round whose ranges hold fewer batches than its interval (a drop_last loader): the worker trains each
# granted sample once and reports the steps it took, instead of starting over on the same samples.
lin = torch.nn.Linear(1, 2)
loader = torch.utils.data.DataLoader(
    Pairs(), batch_size=None,
    sampler=torch.utils.data.BatchSampler(pt.ShardSampler(1000), 64, drop_last=True))
tw = pt.TorchWorker(lin, torch.optim.SGD(lin.parameters(), lr=0.01), torch.nn.functional.cross_entropy, loader,
                    "tcp://127.0.0.1:1")
tw.round = Round(3, 4, 0.01, 0, [(0, 200)], 0, 1, 64, 5)
_, steps, samples, _ = tw.train(pt.flatten(lin), 4)
tw._ctx.destroy(linger=0)  # the in-process wake-up pair TorchWorker makes; nothing was connected
check("a round's ranges are trained once: 3 full batches of 200 samples, not a 4th from the start",
      steps == 3 and samples == 192)
