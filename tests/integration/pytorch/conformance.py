#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Worker conformance: the worker side of the training protocol (actors/PROTOCOL.md), checked against a
scripted averager. The same checks run against `prsgd worker` and the Python package's worker
(`python -m prsgd.twin_worker`), both with --model fmnist-mlp; each check starts a fresh worker process.

  join       the first message of the worker's member connection is a JOIN (member 0, a nonzero nonce,
             averager incarnation 0) declaring the fmnist-mlp fingerprints; unanswered, it is repeated with
             the same nonce. A SPEC (the C++ worker asks for the job's spec first, on a connection of its
             own) is answered with the scripted job's SPEC_REPLY wherever it comes from
  refused    a REFUSED for its nonce ends the worker with status 1 and one line (besides log lines) that
             carries the reason
  train      after WELCOME the worker heartbeats with its member id and token; a RESTART gets one MODEL for
             that round (the token, the round's steps, samples within steps x batch, finite loss and payload
             of the model's size); a repeated RESTART gets none; the next round's RESTART gets the next MODEL
  supersede  a newer RESTART while a round trains (slowed down): the MODEL that follows is the newer round's,
             and no MODEL of the older round comes after it
  removed    REMOVED makes the worker JOIN again (member 0)
  incarnation  a HEARTBEAT from a newer averager incarnation makes the worker JOIN again
  silent     an averager silent for the heartbeat timeout makes the worker JOIN again
  stop       STOP ends the worker with status 0, saying it was stopped
  sigterm    SIGTERM makes a member send LEAVE with its token, then end with status 3, saying it left
  jointimeout  with --join-timeout-ms 2000 and its JOINs unanswered, the worker ends with status 1 and one line
             (besides log lines) saying that no averager welcomed it and naming the option

usage: conformance.py --worker cpp|python --prsgd PATH [--python PY] [--workdir DIR] [CHECK...]
"""
import argparse
import math
import os
import re
import secrets
import signal
import struct
import subprocess
import sys
import time

import msgpack
import zmq

SCALE = float(os.environ.get("PRSGD_TEST_TIME_SCALE", "1"))
VERSION = 6
JOIN, WELCOME, LEAVE, HEARTBEAT, MODEL, RESTART, REMOVED, STOP, REFUSED = range(1, 10)
SPEC, SPEC_REPLY = 24, 25
MODEL_FLOATS = 535818
# What `prsgd worker --model fmnist-mlp` declares (since protocol 3, DF ends with " labels=" and the hash of
# the training labels, prsgd.fingerprints.label_hash).
MF = f"fmnist-mlp in=1x28x28 out=10 params={MODEL_FLOATS}"
DF = "fashion-mnist n=60000 shape=1x28x28 classes=10 labels=3941146f6aa883f5"
BATCH = 16
HB_MS, TIMEOUT_MS = 100, 1500


class CheckFailed(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise CheckFailed(what)


class Averager:
    """A ROUTER that speaks the protocol (and the transport's framing) to one worker connection."""

    def __init__(self):
        self.ctx = zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind("tcp://127.0.0.1:*")
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.rid = None
        self.incarnation = 1000 + secrets.randbelow(1000)
        self.next_h = 0.0
        self.silent = False
        self.member = None  # (member, nonce) to send HEARTBEATs to, once welcomed
        self.seen = []

    def close(self):
        self.sock.close(0)

    def _liveness(self):
        now = time.monotonic()
        if self.rid is not None and not self.silent and now >= self.next_h:
            self.sock.send_multipart([self.rid, b"Hconformance"])
            if self.member is not None:
                self.send(HEARTBEAT, self.member[0], self.member[1], 0, fa=True, k=0)
            self.next_h = now + 0.1

    def send(self, type_, member, incarnation, round_, payload=None, **fields):
        h = {"v": VERSION, "t": type_, "m": member, "i": incarnation, "a": self.incarnation, "r": round_}
        h.update(fields)
        frames = [self.rid, b"D", msgpack.packb(h)]
        if payload is not None:
            frames.append(payload)
        self.sock.send_multipart(frames)

    def answer_spec(self, rid, request):
        """SPEC_REPLY: the job the scripted averager stands for, fmnist-mlp with batch BATCH and seed 3."""
        h = {"v": VERSION, "t": SPEC_REPLY, "m": 0, "i": request["i"], "a": self.incarnation, "r": 0, "mf": MF,
             "df": DF, "bs": BATCH, "sd": 3, "mn": "fmnist-mlp", "dn": "fashion-mnist", "do": [], "ni": False,
             "da": 0.5, "lr": 0.05, "mo": 0.9, "km": True, "wd": "f32", "md": 0, "ms": MODEL_FLOATS}
        self.sock.send_multipart([rid, b"D", msgpack.packb(h)])

    def recv(self, timeout_s, want=None):
        """Returns the next protocol message (header dict with '_payload') of a type in `want`, or None."""
        deadline = time.monotonic() + timeout_s * SCALE
        while True:
            self._liveness()
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if not self.sock.poll(int(min(left, 0.05) * 1000) + 1):
                continue
            frames = self.sock.recv_multipart()
            if len(frames) < 3 or frames[1] != b"D":
                continue
            h = msgpack.unpackb(frames[2], raw=False)
            if h.get("t") == SPEC:
                # A worker may ask for the job's spec first, on a connection of its own (it is no member).
                self.answer_spec(frames[0], h)
                continue
            if self.rid is None:
                self.rid = frames[0]
            if frames[0] != self.rid:
                continue
            h["_payload"] = frames[3] if len(frames) > 3 else None
            self.seen.append(h)
            if want is None or h["t"] in want:
                return h


class WorkerProcess:
    def __init__(self, kind, args, endpoint, workdir, name, slowdown_ms=0, extra=()):
        log_path = os.path.join(workdir, f"{kind}-{name}.log")
        self.log_path = log_path
        common = ["--averager", endpoint, "--model", "fmnist-mlp", "--heartbeat-ms", str(HB_MS),
                  "--heartbeat-timeout-ms", str(TIMEOUT_MS)]
        if slowdown_ms:
            common += ["--slowdown-ms", str(slowdown_ms)]
        common += list(extra)
        if kind == "cpp":
            argv = [args.prsgd, "worker", "--progress", "off"] + common
        else:
            argv = [args.python, "-m", "prsgd.twin_worker"] + common
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)

    def wait(self, timeout_s):
        try:
            return self.proc.wait(timeout=timeout_s * SCALE)
        except subprocess.TimeoutExpired:
            return None

    def output(self):
        with open(self.log_path) as f:
            return f.read()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def join_of(avg):
    j = avg.recv(60, {JOIN})
    expect(j is not None, "no JOIN within 60 s")
    return j


def welcome(avg, j, member=5, token=None):
    token = token if token is not None else secrets.randbits(64)
    avg.send(WELCOME, member, j["i"], 0, ad=0, md=0, ms=MODEL_FLOATS, hb=HB_MS * 1_000_000, k=token, sh=1, ns=2,
             mf=MF, df=DF, bs=BATCH, sd=3)
    avg.member = (member, j["i"])
    return member, token


def model_payload(seed):
    import random
    rnd = random.Random(seed)
    # small random weights: a usable fmnist-mlp starting point
    vals = [rnd.uniform(-0.03, 0.03) for _ in range(1024)]
    return struct.pack("<1024f", *vals) * (MODEL_FLOATS // 1024) + struct.pack("<f", 0.0) * (MODEL_FLOATS % 1024)


def restart(avg, member, nonce, round_, interval, payload):
    avg.send(RESTART, member, nonce, round_, payload, iv=interval, ss=0.05, md=0, n=MODEL_FLOATS, ranges=[])


def check_model(m, member, token, round_, interval, payload):
    expect(m["m"] == member and m["k"] == token, f"MODEL names member {m['m']} token {m['k']}")
    expect(m["r"] == round_, f"MODEL for round {m['r']}, expected {round_}")
    expect(m["st"] == interval and not m.get("ct", False), f"MODEL claims {m['st']} steps, cut {m.get('ct')}")
    expect(0 < m["sa"] <= interval * BATCH, f"MODEL claims {m['sa']} samples for {interval} steps of {BATCH}")
    expect(m["g"] is False, "MODEL marked as a gradient in restarted mode")
    expect(0 < m["lc"] <= m["sa"] and math.isfinite(m["ls"]), f"loss sum {m['ls']} over {m['lc']}")
    expect(m["n"] == MODEL_FLOATS and m["_payload"] is not None and len(m["_payload"]) == 4 * MODEL_FLOATS,
           "MODEL payload is not the model's size")
    vals = struct.unpack(f"<{MODEL_FLOATS}f", m["_payload"])
    expect(all(math.isfinite(v) for v in vals[:4096]) and all(math.isfinite(v) for v in vals[-4096:]),
           "MODEL payload is not finite")
    expect(m["_payload"] != payload, "MODEL payload equals the RESTART's: no training happened")


def c_join(avg, w):
    j = join_of(avg)
    expect(j["m"] == 0 and j["i"] != 0 and j["a"] == 0, f"JOIN header {j}")
    expect(j.get("mf") == MF, f"JOIN model fingerprint {j.get('mf')!r}")
    expect(j.get("df") == DF, f"JOIN data fingerprint {j.get('df')!r}")
    expect("f32" in j.get("wds", ["f32"]), f"JOIN wire dtypes {j.get('wds')!r} without f32")
    again = avg.recv(10, {JOIN})
    expect(again is not None and again["i"] == j["i"], "the unanswered JOIN was not repeated with its nonce")


def c_refused(avg, w):
    j = join_of(avg)
    avg.send(REFUSED, 0, j["i"], 0, why="model mismatch: the job trains something else")
    status = w.wait(60)
    expect(status == 1, f"exit status {status} after REFUSED, expected 1")
    # Log lines (timestamped, or the Python worker's "prsgd worker [level]") aside, one line says why.
    lines = [l for l in w.output().splitlines()
             if l.strip() and not re.match(r"\d{4}-\d\d-\d\dT|prsgd worker \[", l)]
    expect(len(lines) == 1 and "model mismatch: the job trains something else" in lines[0],
           "expected one line with the reason, got:\n" + "\n".join(lines))


def c_train(avg, w):
    j = join_of(avg)
    member, token = welcome(avg, j)
    hb = avg.recv(10, {HEARTBEAT})
    expect(hb is not None, "no HEARTBEAT after WELCOME")
    expect(hb["m"] == member and hb["k"] == token and hb["fa"] is False, f"HEARTBEAT {hb}")
    x0 = model_payload(1)
    restart(avg, member, j["i"], 0, 3, x0)
    m = avg.recv(120, {MODEL})
    expect(m is not None, "no MODEL for round 0")
    check_model(m, member, token, 0, 3, x0)
    restart(avg, member, j["i"], 0, 3, x0)  # repeated: must not be trained again
    x1 = model_payload(2)
    restart(avg, member, j["i"], 1, 2, x1)
    m = avg.recv(120, {MODEL})
    expect(m is not None, "no MODEL for round 1")
    check_model(m, member, token, 1, 2, x1)
    expect(sum(1 for h in avg.seen if h["t"] == MODEL) == 2, "a repeated RESTART was trained again")


def c_supersede(avg, w):
    j = join_of(avg)
    member, token = welcome(avg, j)
    x0 = model_payload(1)
    restart(avg, member, j["i"], 0, 10_000, x0)  # ~10 s of slowed-down steps
    x1 = model_payload(2)
    restart(avg, member, j["i"], 1, 2, x1)
    m = avg.recv(120, {MODEL})
    expect(m is not None, "no MODEL after the newer RESTART")
    check_model(m, member, token, 1, 2, x1)
    expect(avg.recv(1, {MODEL}) is None, "another MODEL after the newer round's")


def rejoin_after(avg, w, action):
    j = join_of(avg)
    member, token = welcome(avg, j)
    expect(avg.recv(10, {HEARTBEAT}) is not None, "no HEARTBEAT after WELCOME")
    action(j, member)
    again = avg.recv(30, {JOIN})
    expect(again is not None and again["m"] == 0, "no new JOIN")


def c_removed(avg, w):
    rejoin_after(avg, w, lambda j, member: avg.send(REMOVED, member, j["i"], 0))


def c_incarnation(avg, w):
    def newer(j, member):
        avg.member = None
        avg.incarnation += 1
        avg.send(HEARTBEAT, member, j["i"], 0, fa=True, k=0)
    rejoin_after(avg, w, newer)


def c_silent(avg, w):
    def silence(j, member):
        avg.silent = True
    rejoin_after(avg, w, silence)


def c_stop(avg, w):
    j = join_of(avg)
    member, _ = welcome(avg, j)
    avg.send(STOP, member, j["i"], 0)
    status = w.wait(60)
    expect(status == 0, f"exit status {status} after STOP, expected 0")
    expect("stopped" in w.output(), "the worker does not say that the job stopped it")


def c_sigterm(avg, w):
    j = join_of(avg)
    member, token = welcome(avg, j)
    expect(avg.recv(10, {HEARTBEAT}) is not None, "no HEARTBEAT after WELCOME")
    w.proc.send_signal(signal.SIGTERM)
    leave = avg.recv(30, {LEAVE})
    expect(leave is not None, "no LEAVE after SIGTERM")
    expect(leave["m"] == member and leave["k"] == token, f"LEAVE {leave}")
    status = w.wait(60)
    expect(status == 3, f"exit status {status} after SIGTERM, expected 3")
    expect("left" in w.output(), "the worker does not say that it left")


def c_jointimeout(avg, w):
    join_of(avg)  # never answered
    status = w.wait(60)
    expect(status == 1, f"exit status {status} with its JOINs unanswered, expected 1")
    lines = [l for l in w.output().splitlines()
             if l.strip() and not re.match(r"\d{4}-\d\d-\d\dT|prsgd worker \[", l)]
    expect(len(lines) == 1 and "no averager welcomed this worker within 2 s" in lines[0]
           and "(--join-timeout-ms); giving up" in lines[0],
           "expected one line saying it gave up, got:\n" + "\n".join(lines))


CHECKS = {"join": c_join, "refused": c_refused, "train": c_train, "supersede": c_supersede, "removed": c_removed,
          "incarnation": c_incarnation, "silent": c_silent, "stop": c_stop, "sigterm": c_sigterm,
          "jointimeout": c_jointimeout}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--worker", choices=("cpp", "python"), required=True)
    p.add_argument("--prsgd", required=True)
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--workdir", default=".")
    p.add_argument("checks", nargs="*", default=list(CHECKS))
    args = p.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    failed = []
    for name in args.checks:
        avg = Averager()
        w = WorkerProcess(args.worker, args, avg.endpoint, args.workdir, name,
                          slowdown_ms=1 if name == "supersede" else 0,
                          extra=["--join-timeout-ms", "2000"] if name == "jointimeout" else [])
        try:
            CHECKS[name](avg, w)
            print(f"ok   {args.worker} {name}")
        except CheckFailed as e:
            failed.append(name)
            print(f"FAIL {args.worker} {name}: {e}\n--- worker log ---\n{w.output()[-3000:]}")
        finally:
            w.kill()
            avg.close()
    print(f"{len(args.checks) - len(failed)}/{len(args.checks)} checks passed for the {args.worker} worker")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
