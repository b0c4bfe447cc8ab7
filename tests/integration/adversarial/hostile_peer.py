#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A hostile peer against a real job: `prsgd averager` and two real `prsgd worker` processes on loopback.

The peer speaks the training protocol (actors/PROTOCOL.md) with pyzmq and msgpack (head-spoof: the runtime
envelope, runtime/PROTOCOL.md). Each scenario runs one job and asserts that the job completes, that the real
workers end normally and never lose their membership, and what the averager did with the attack (its
metrics file, log and metrics endpoint). zero-model, impostor, join-storm and other-model first run the same
job without the attacker (WORKDIR/reference) and also assert the same final accuracy within 1 point and a
bounded log; the attack's job runs in WORKDIR/attack.

  zero-model   joins as a member and answers every RESTART with an all-zero model claiming 2^50 samples
  impostor     sends LEAVE, HEARTBEAT and MODEL naming the real members, without their tokens
  join-storm   repeats one JOIN hundreds of times; at most one RESTART per round comes back
  other-model  a real `prsgd worker` with another model: it exits 1 with one line; the job goes on
  keys         CURVE with keys from `prsgd keygen` and an allow-list directory: a stranger's key is refused at
               connect time (zap_denied); a member's token used from another allowed key is refused (wrong_key)
  head-spoof   a job that finds its averager through `prsgd head`: a stranger tries to take the name
               prsgd/averager, the averager's node name, and sends leave and node_down for other nodes; every
               claim is refused, the name still leads to the averager, and the job completes
  endless-multipart
               CURVE job: a stranger opens raw TCP connections and streams frames that never end; each is closed
               at the handshake and the averager's heap (RssAnon) stays flat; a member with a valid key sends a
               message of 1000 frames: its connection is dropped at the frames cap (too_many_frames)

usage: hostile_peer.py --prsgd PATH --workdir DIR SCENARIO
"""
import argparse
import os
import re
import secrets
import socket
import struct
import subprocess
import sys
import threading
import time

import msgpack
import zmq

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from process_job import SCALE, ProcessJob, fail  # noqa: E402  (tests/integration/process_job.py)

VERSION = 6
JOIN, WELCOME, LEAVE, HEARTBEAT, MODEL, RESTART, REMOVED, STOP, REFUSED = range(1, 10)
ROUNDS = 12
# Scaled like every other bound (PRSGD_TEST_TIME_SCALE), so slow builds do not time out honest members.
HEARTBEAT_TIMEOUT_MS = str(int(1500 * SCALE))


class Job(ProcessJob):
    def __init__(self, prsgd, workdir):
        super().__init__(workdir)
        self.prsgd = prsgd

    def start(self, name, args):
        return super().start(name, [self.prsgd] + args)

    def start_averager(self, extra=()):
        endpoint_file = os.path.join(self.dir, "averager.endpoint")
        self.start("averager", ["averager", "--listen", "tcp://127.0.0.1:*", "--endpoint-file", endpoint_file,
                                "--model", "fmnist-mlp", "--rounds", str(ROUNDS), "--interval", "4", "--batch", "32",
                                "--min-workers", "2", "--max-workers", "3", "--heartbeat-ms", "100",
                                "--heartbeat-timeout-ms", HEARTBEAT_TIMEOUT_MS, "--idle-rounds", "2", "--eval-every", "0",
                                "--metrics-jsonl", self.metrics, "--progress", "off", "--log-level", "info"]
                   + list(extra))
        self.endpoint = self.wait_for_endpoint(endpoint_file, "averager", 120)

    def start_worker(self, name, model="fmnist-mlp", extra=()):
        return self.start(name, ["worker", "--averager", self.endpoint, "--model", model, "--batch", "32",
                                 "--heartbeat-ms", "100", "--heartbeat-timeout-ms", HEARTBEAT_TIMEOUT_MS, "--slowdown-ms", "5",
                                 "--progress", "off"] + list(extra))

    def wait_rounds(self, n, timeout=120):
        """Waits until `n` rounds have closed (the real workers are members and have trained)."""
        deadline = time.monotonic() + timeout * SCALE
        while time.monotonic() < deadline:
            if os.path.exists(self.metrics) and len([l for l in self.lines() if "members" in l]) >= n:
                return
            if self.procs["averager"].poll() is not None:
                fail("the averager exited early:\n" + self.log("averager")[-4000:])
            time.sleep(0.05)
        fail(f"{n} rounds did not close:\n" + self.log("averager")[-4000:])

    def finish(self):
        """Asserts the job ran every round and both real workers ended normally, still members."""
        status = self.wait("averager", 300)
        if status != 0:
            self.stop_all()
            fail(f"the averager did not finish (status {status}):\n" + self.log("averager")[-4000:])
        for w in ("worker-0", "worker-1"):
            status = self.wait(w, 60)
            if status != 0:
                self.stop_all()
                fail(f"{w} ended with status {status}:\n" + self.log(w)[-4000:])
            if "removed by averager" in self.log(w):
                fail(f"{w} lost its membership:\n" + self.log(w)[-4000:])
        rounds = [l for l in self.lines() if "round" in l and "members" in l]
        if len(rounds) != ROUNDS:
            fail(f"{len(rounds)} rounds closed, expected {ROUNDS}")
        return rounds


class Peer:
    """One DEALER connection that speaks the protocol (with CURVE when given `curve`: (public, secret, server))."""

    def __init__(self, endpoint, curve=None):
        self.ctx = zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        if curve is not None:
            public, secret, server = curve
            self.sock.curve_publickey, self.sock.curve_secretkey, self.sock.curve_serverkey = public, secret, server
        # The transport's client id: node name, NUL, 16 random bytes (transport/README.md).
        self.sock.setsockopt(zmq.ROUTING_ID, b"hostile\0" + secrets.token_bytes(16))
        self.sock.connect(endpoint)
        self.member, self.token, self.ainc = 0, 0, 0
        self.nonce = secrets.randbits(63) | 1

    def send(self, header, payload=None):
        frames = [b"D", msgpack.packb(dict(header, v=VERSION))]
        if payload is not None:
            frames.append(payload)
        self.sock.send_multipart(frames)

    def recv(self, timeout_ms):
        if not self.sock.poll(timeout_ms):
            return None
        frames = self.sock.recv_multipart()
        if not frames or frames[0] != b"D":
            return {}  # transport frames (liveness), not protocol
        header = msgpack.unpackb(frames[1], raw=False)
        header["_payload"] = frames[2] if len(frames) > 2 else None
        return header

    def join(self, mf="", df=""):
        self.send({"t": JOIN, "m": 0, "i": self.nonce, "a": 0, "r": 0, "s": 0.0, "mf": mf, "df": df})

    def heartbeat(self, member, token, round_=0, inc=None):
        self.send({"t": HEARTBEAT, "m": member, "i": self.nonce if inc is None else inc, "a": self.ainc,
                   "r": round_, "fa": False, "k": token})


def scenario_zero_model(job):
    peer = Peer(job.endpoint)
    mf, df = declared_fingerprints(job)  # a faulty member declares the job's model and data
    job.wait_rounds(1)  # the real workers hold shards 0 and 1, as in the run without the attacker
    peer.join(mf, df)
    zero_models, restarts = 0, 0
    deadline = time.monotonic() + 300 * SCALE
    while job.procs["averager"].poll() is None and time.monotonic() < deadline:
        m = peer.recv(100)
        if m is None or not m:
            continue
        if m["t"] == WELCOME:
            peer.member, peer.token, peer.ainc = m["m"], m["k"], m["a"]
        elif m["t"] == RESTART and m["m"] == peer.member:
            restarts += 1
            n = m["n"]
            peer.send({"t": MODEL, "m": peer.member, "i": peer.nonce, "a": peer.ainc, "r": m["r"], "k": peer.token,
                       "st": m["iv"], "sa": 2 ** 50, "ls": 0.0, "lc": 0, "g": False, "n": n, "ct": False},
                      bytes(4 * n))
            zero_models += 1
        elif m["t"] == REMOVED:
            peer.nonce = secrets.randbits(63) | 1
            peer.join(mf, df)  # come back and try again
        elif m["t"] == STOP:
            break
        if peer.member and secrets.randbelow(3) == 0:
            peer.heartbeat(peer.member, peer.token)
    rounds = job.finish()
    if zero_models == 0:
        fail("the hostile member never got a RESTART to answer")
    rejected = sum(l["rejected"] for l in rounds)
    if rejected < 1:
        fail("no zero model was rejected")
    if max(l["submissions"] for l in rounds) > 2:
        fail("a hostile submission entered an average")
    if "samples >" not in job.log("averager"):
        fail("the averager did not say why it rejected the claim")
    print(f"zero-model: {zero_models} hostile models sent, {rejected} rejected, {len(rounds)} rounds")


def scenario_impostor(job):
    peer = Peer(job.endpoint)
    sent = 0
    deadline = time.monotonic() + 300 * SCALE
    while job.procs["averager"].poll() is None and time.monotonic() < deadline:
        for member in range(1, 6):
            for token in (0, secrets.randbits(64)):
                peer.send({"t": LEAVE, "m": member, "i": secrets.randbits(63), "a": 1, "r": 0, "k": token})
                peer.heartbeat(member, token)
                peer.send({"t": MODEL, "m": member, "i": 1, "a": 1, "r": 0, "k": token, "st": 4, "sa": 128,
                           "ls": 0.0, "lc": 0, "g": False, "n": 0, "ct": False}, b"")
                sent += 3
        while peer.recv(0) is not None:
            pass
        time.sleep(0.05)
    rounds = job.finish()
    unauthorised = sum(l.get("unauthorised", 0) for l in rounds)
    if unauthorised == 0:
        fail("no forged message was counted as unauthorised")
    print(f"impostor: {sent} forged messages, {unauthorised} counted unauthorised during the rounds")


def scenario_join_storm(job):
    peer = Peer(job.endpoint)
    mf, df = declared_fingerprints(job)
    job.wait_rounds(1)  # the real workers hold shards 0 and 1, as in the run without the attacker
    restarts_per_round = {}
    welcomes = 0
    deadline = time.monotonic() + 300 * SCALE
    while job.procs["averager"].poll() is None and time.monotonic() < deadline:
        for _ in range(50):
            peer.join(mf, df)
        while True:
            m = peer.recv(20)
            if m is None:
                break
            if not m:
                continue
            if m["t"] == WELCOME:
                welcomes += 1
                peer.member, peer.token, peer.ainc = m["m"], m["k"], m["a"]
            elif m["t"] == RESTART:
                key = (m["a"], m["m"], m["r"])
                restarts_per_round[key] = restarts_per_round.get(key, 0) + 1
            elif m["t"] == REMOVED:
                peer.nonce = secrets.randbits(63) | 1
    rounds = job.finish()
    if welcomes == 0:
        fail("the storm never got a WELCOME")
    worst = max(restarts_per_round.values(), default=0)
    if worst > 1:
        fail(f"a member got {worst} RESTARTs in one round")
    print(f"join-storm: {welcomes} WELCOMEs, {len(restarts_per_round)} rounds with a RESTART, at most {worst} each")


def scenario_other_model(job):
    status = job.wait("worker-other", 120)
    if status != 1:
        job.stop_all()
        fail(f"the worker with another model ended with status {status}:\n" + job.log("worker-other"))
    lines = [l for l in job.log("worker-other").splitlines() if l.startswith("prsgd worker:")]
    if len(lines) != 1 or "model mismatch" not in lines[0]:
        fail("expected one line naming the model mismatch, got:\n" + job.log("worker-other"))
    job.finish()
    print("other-model: " + lines[0])


def metrics_port(job):
    """The port the averager's metrics server got (it binds port 0, any free one, and logs the address: no port
    chosen here can be taken by another process before the averager binds it)."""
    deadline = time.monotonic() + 120 * SCALE
    while time.monotonic() < deadline:
        found = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", job.log("averager"))
        if found:
            return int(found.group(1))
        if job.procs["averager"].poll() is not None:
            fail("the averager exited before serving metrics:\n" + job.log("averager")[-4000:])
        time.sleep(0.05)
    fail("the averager did not log its metrics address:\n" + job.log("averager")[-4000:])


def scrape(port):
    """The averager's Prometheus text as {series: value} ({} when nobody answers yet)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5 * SCALE) as c:
            c.sendall(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            data = b""
            while True:
                chunk = c.recv(65536)
                if not chunk:
                    break
                data += chunk
    except OSError:
        return {}
    out = {}
    for line in data.decode(errors="replace").split("\r\n\r\n", 1)[-1].splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                pass
    return out


def keygen(job, out_dir, name):
    r = subprocess.run([job.prsgd, "keygen", "--out-dir", out_dir, "--name", name], capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"prsgd keygen failed: {r.stderr}")
    read = lambda ext: open(os.path.join(out_dir, f"{name}.{ext}")).read().strip().encode()
    return read("public"), read("secret")


def scenario_keys(job):
    """CURVE on, with an allow-list directory: strangers refused at connect time, members bound to their key."""
    server_pub = job.server_key
    stranger = Peer(job.endpoint, curve=job.keys["stranger"] + (server_pub,))
    stranger.join()
    # Join once the real workers train, so that the quick answers below do not make them look idle.
    job.wait_rounds(1)
    # A faulty member with an allowed key, and a second allowed key that tries to speak for it with its token.
    member = Peer(job.endpoint, curve=job.keys["hostile"] + (server_pub,))
    member.join(job.mf, job.df)
    other = Peer(job.endpoint, curve=job.keys["hostile-2"] + (server_pub,))
    restarts, last_round, forged, removed, metrics = 0, -1, 0, 0, {}

    def scraper():  # on its own thread, so a slow scrape never delays the member's answers
        nonlocal metrics
        while job.procs["averager"].poll() is None:
            metrics = scrape(job.metrics_port) or metrics
            time.sleep(0.3)

    threading.Thread(target=scraper, daemon=True).start()
    deadline = time.monotonic() + 300 * SCALE
    while job.procs["averager"].poll() is None and time.monotonic() < deadline:
        m = member.recv(50)
        if m:
            if m["t"] == WELCOME:
                member.member, member.token, member.ainc = m["m"], m["k"], m["a"]
            elif m["t"] == RESTART and m["m"] == member.member:
                restarts, last_round = restarts + 1, m["r"]
                # An honest-looking answer: x̄ back unchanged, the assigned steps, a plausible sample count.
                member.send({"t": MODEL, "m": member.member, "i": member.nonce, "a": member.ainc, "r": m["r"],
                             "k": member.token, "st": m["iv"], "sa": 32 * m["iv"], "ls": 0.0, "lc": 0, "g": False,
                             "n": m["n"], "ct": False}, m["_payload"])
            elif m["t"] == REMOVED:
                removed += 1
        if member.member:
            member.heartbeat(member.member, member.token)
            other.ainc = member.ainc
            other.nonce = member.nonce
            other.send({"t": LEAVE, "m": member.member, "i": member.nonce, "a": member.ainc, "r": 0,
                        "k": member.token})
            other.heartbeat(member.member, member.token)
            forged += 2
        if stranger.recv(0):
            fail("the stranger's key got an answer")
    rounds = job.finish()
    if removed or last_round != ROUNDS - 1:
        fail(f"the member with a valid key was removed ({removed} REMOVED, last RESTART for round {last_round})")
    wrong_key = metrics.get('prsgd_dropped_total{reason="wrong_key"}', 0)
    zap = metrics.get('prsgd_transport_dropped_total{reason="zap_denied"}', 0)
    if wrong_key < 1:
        fail(f"no message from another key was counted as wrong_key: {sorted(k for k in metrics if 'drop' in k)}")
    if zap < 1:
        fail("the stranger's key was not counted as zap_denied")
    print(f"keys: {forged} messages with a member's token from another key, {int(wrong_key)} counted wrong_key; "
          f"stranger refused {int(zap)} times; {len(rounds)} rounds")


def anon_rss_kib(pid):
    """The process's anonymous resident memory: its heap and stacks, not the code it pages in."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    fail("no RssAnon for the averager")


# What the averager's heap may grow by while strangers stream at it: the job runs on meanwhile. Under
# ThreadSanitizer every byte the job touches for the first time also gets shadow memory (its documentation
# gives 5-10x the memory), so the allowance is eight times as large there.
RSS_ALLOWANCE_KIB = (32 << 10) * (8 if "thread" in os.environ.get("PRSGD_SANITIZERS", "") else 1)


def zmtp_greeting(mechanism):
    """A ZMTP 3.0 greeting (64 bytes) proposing `mechanism`, as a client."""
    return b"\xff" + bytes(8) + b"\x7f" + bytes([3, 0]) + mechanism.ljust(20, b"\0") + b"\0" + bytes(31)


def endless_frames(endpoint, budget):
    """Opens a raw TCP connection, proposes the NULL mechanism and streams 64 KiB frames flagged MORE, never a
    last one, until the peer closes the connection or `budget` bytes are out. Returns the bytes it got out."""
    host, port = endpoint.rsplit("/", 1)[-1].rsplit(":", 1)
    frame = b"\x03" + struct.pack(">Q", 65536) + bytes(65536)  # MORE | LONG, 8-byte size, body
    sent = 0
    with socket.create_connection((host, int(port))) as c:
        c.settimeout(10 * SCALE)
        try:
            c.sendall(zmtp_greeting(b"NULL"))
            # READY with an empty property list, then the frames of a message that never ends.
            c.sendall(b"\x04\x06\x05READY")
            while sent < budget:
                c.sendall(frame)
                sent += len(frame)
        except OSError:
            pass  # closed by the averager: what we want
    return sent


def scenario_endless_multipart(job):
    """Messages that never end: strangers are cut off at the handshake, a member's long message at the cap."""
    job.wait_rounds(1)
    pid = job.procs["averager"].pid
    before = anon_rss_kib(pid)
    budget, streamed = 256 << 20, 0
    for _ in range(8):
        streamed += endless_frames(job.endpoint, budget)
    after = anon_rss_kib(pid)
    if streamed >= budget:
        fail("the averager kept reading a stranger's endless message")
    if after - before > RSS_ALLOWANCE_KIB:
        fail(f"the averager's anonymous RSS grew from {before} to {after} KiB (allowed: {RSS_ALLOWANCE_KIB} KiB) "
             f"while strangers streamed {streamed} bytes")
    # A member with a valid key sends a finished message of 1000 frames (the cap is 72): its connection is
    # dropped, and the job goes on.
    member = Peer(job.endpoint, curve=job.keys["hostile"] + (job.server_key,))
    member.sock.send_multipart([b"D"] + [b"x"] * 1000)
    cap_seen = 0
    deadline = time.monotonic() + 60 * SCALE
    while time.monotonic() < deadline and job.procs["averager"].poll() is None:
        cap_seen = scrape(job.metrics_port).get('prsgd_transport_dropped_total{reason="too_many_frames"}', 0)
        if cap_seen >= 1:
            break
        time.sleep(0.1)
    rounds = job.finish()
    if cap_seen < 1:
        fail("the message of 1000 frames was not counted as too_many_frames")
    print(f"endless-multipart: strangers got {streamed} bytes out over 8 connections, the averager's anonymous RSS "
          f"went from {before} to {after} KiB; the 1000-frame message was dropped at the cap; {len(rounds)} rounds")


class NodePeer:
    """A stranger speaking the runtime envelope (runtime/PROTOCOL.md, version 1) on one DEALER connection."""
    TELL, ASK, REPLY, ERROR, REGISTER_NODE, REGISTER_NAME, LOOKUP, NODE_DOWN, LEAVE = 1, 2, 3, 4, 10, 11, 12, 13, 14
    ALREADY_EXISTS, UNAUTHORIZED = 4, 17

    def __init__(self, endpoint, name):
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.ROUTING_ID, name.encode() + b"\0" + secrets.token_bytes(16))
        self.sock.connect(endpoint)

    def send(self, header):
        self.sock.send_multipart([b"D", msgpack.packb(dict(header, v=1))])

    def request(self, header):
        """Sends a request and returns the answer's header (with `a` unpacked), or fails after a while."""
        c = secrets.randbits(63) | 1
        self.send(dict(header, c=c))
        deadline = time.monotonic() + 30 * SCALE
        while time.monotonic() < deadline:
            if not self.sock.poll(100):
                continue
            frames = self.sock.recv_multipart()
            if len(frames) < 2 or frames[0] != b"D":
                continue
            h = msgpack.unpackb(frames[1], raw=False)
            if h.get("c") == c:
                if h.get("a"):
                    h["a"] = msgpack.unpackb(h["a"], raw=False)
                return h
        fail(f"no answer to {header}")


def scenario_head_spoof(job):
    job.wait_rounds(1)
    head = NodePeer(job.head_endpoint, "stranger")
    nodes = head.request({"t": NodePeer.LOOKUP, "n": ""})["a"]
    averager = head.request({"t": NodePeer.LOOKUP, "n": "prsgd/averager"})
    if averager["t"] != NodePeer.REPLY:
        fail(f"the averager is not registered: {averager}")
    avg_node, avg_id = averager["a"]
    avg_endpoint = next(ep for name, ep, _ in nodes if name == avg_node)
    head_node = nodes[0][0]
    refusals = []
    # Take the averager's name, for the stranger's own actor and for one on the averager's node.
    for f in (["stranger", 1], [avg_node, 7]):
        answer = head.request({"t": NodePeer.REGISTER_NAME, "n": "prsgd/averager", "f": f})
        refusals.append(("register_name prsgd/averager as " + repr(f), answer))
    # Claim the averager's node name with another endpoint and a newer incarnation.
    answer = head.request({"t": NodePeer.REGISTER_NODE, "nd": avg_node, "ep": "tcp://127.0.0.1:9", "i": 2 ** 62})
    refusals.append(("register_node " + avg_node, answer))
    for what, answer in refusals:
        if answer["t"] != NodePeer.ERROR or answer.get("ec") not in (NodePeer.ALREADY_EXISTS, NodePeer.UNAUTHORIZED):
            fail(f"the head accepted {what}: {answer}")
    # Say the averager's node left (to the head), and that the head is down (to the averager's node).
    for _ in range(20):
        head.send({"t": NodePeer.LEAVE, "nd": avg_node, "i": 2 ** 62})
    node = NodePeer(avg_endpoint, "stranger")
    for _ in range(20):
        node.send({"t": NodePeer.NODE_DOWN, "nd": head_node, "i": 2 ** 62})
    deadline = time.monotonic() + 30 * SCALE
    while "refused node_down" not in job.log("averager"):
        if time.monotonic() > deadline:
            fail("the averager's node did not refuse the forged node_down:\n" + job.log("averager")[-4000:])
        time.sleep(0.05)
    # The head handles one connection's messages in order: the leaves came before this lookup.
    after = head.request({"t": NodePeer.LOOKUP, "n": "prsgd/averager"})
    if after["t"] != NodePeer.REPLY or after["a"] != [avg_node, avg_id]:
        fail(f"prsgd/averager no longer leads to the averager: {after}")
    rounds = job.finish()
    head_log = job.log("head")
    if "refused leave" not in head_log or "refused register_node" not in head_log:
        fail("the head did not log the refused claims:\n" + head_log[-4000:])
    print(f"head-spoof: {len(refusals)} claims refused ({', '.join(str(a.get('ec')) for _, a in refusals)}), "
          f"40 forged leave/node_down ignored; prsgd/averager still at {avg_node}; {len(rounds)} rounds")


def start_head_job(job):
    """A head on loopback; the averager registers with it and the workers find the averager through it."""
    endpoint_file = os.path.join(job.dir, "head.endpoint")
    job.start("head", ["head", "--listen", "tcp://127.0.0.1:*", "--endpoint-file", endpoint_file,
                       "--heartbeat-ms", "100", "--heartbeat-timeout-ms", HEARTBEAT_TIMEOUT_MS, "--log-level", "info"])
    deadline = time.monotonic() + 60 * SCALE
    while not (os.path.exists(endpoint_file) and open(endpoint_file).read().endswith("\n")):
        if time.monotonic() > deadline or job.procs["head"].poll() is not None:
            fail("the head did not listen:\n" + job.log("head"))
        time.sleep(0.05)
    job.head_endpoint = open(endpoint_file).read().strip()
    job.start_averager(["--head", job.head_endpoint])
    for w in ("worker-0", "worker-1"):
        job.start(w, ["worker", "--head", job.head_endpoint, "--model", "fmnist-mlp", "--batch", "32",
                      "--heartbeat-ms", "100", "--heartbeat-timeout-ms", HEARTBEAT_TIMEOUT_MS, "--slowdown-ms", "5",
                      "--progress", "off"])


def declared_fingerprints(job):
    """Learns the job's fingerprints the way a stranger could: a REFUSED names the job's model, then its data."""
    probe = Peer(job.endpoint, curve=getattr(job, "probe_curve", None))
    probe.join("probe", "probe")
    deadline = time.monotonic() + 30 * SCALE
    while time.monotonic() < deadline:
        m = probe.recv(100)
        if m and m.get("t") == REFUSED:
            why = m["why"]
            mf = why.split("the job trains ", 1)[1].split(", the worker has", 1)[0]
            break
    else:
        fail("the probe JOIN was not refused")
    probe.join(mf, "probe")
    deadline = time.monotonic() + 30 * SCALE
    while time.monotonic() < deadline:
        m = probe.recv(100)
        if m and m.get("t") == REFUSED:
            df = m["why"].split("the job trains on ", 1)[1].split(", the worker has", 1)[0]
            return mf, df
    fail("the second probe JOIN was not refused")


SCENARIOS = {"zero-model": scenario_zero_model, "impostor": scenario_impostor, "join-storm": scenario_join_storm,
             "other-model": scenario_other_model, "keys": scenario_keys,
             "endless-multipart": scenario_endless_multipart, "head-spoof": scenario_head_spoof}


def start_keyed_job(job):
    """Keys from `prsgd keygen`: a server pair, and an allow-list directory with the workers' and two hostile
    members' public keys; the stranger's key is made elsewhere and never listed."""
    keys, allowed = os.path.join(job.dir, "keys"), os.path.join(job.dir, "keys", "allowed")
    job.server_key = keygen(job, keys, "server")[0]
    job.keys = {name: keygen(job, allowed, name) for name in ("worker-0", "worker-1", "hostile", "hostile-2")}
    job.keys["stranger"] = keygen(job, keys, "stranger")
    job.start_averager(["--curve-public-key", os.path.join(keys, "server.public"), "--curve-secret-key",
                        os.path.join(keys, "server.secret"), "--curve-allow", allowed,
                        "--metrics-bind", "127.0.0.1:0"])
    job.metrics_port = metrics_port(job)
    for w in ("worker-0", "worker-1"):
        job.start_worker(w, extra=["--curve-public-key", os.path.join(allowed, w + ".public"), "--curve-secret-key",
                                   os.path.join(allowed, w + ".secret"), "--curve-server-key",
                                   os.path.join(keys, "server.public")])
    job.probe_curve = job.keys["hostile"] + (job.server_key,)
    job.mf, job.df = declared_fingerprints(job)


# Scenarios whose attacker never adds a model to x̄: the job must end where the same job without the attacker
# ends (the same seed and shards give the same averages), and the attack may cost at most this many log lines
# more (rate-limited warnings: a few lines per 10 s per kind; unlimited, the floods above write thousands).
COMPARED = ("zero-model", "impostor", "join-storm", "other-model")
ACCURACY_TOLERANCE = 0.01
EXTRA_LOG_LINES = 200


def final_accuracy(job):
    done = [l for l in job.lines() if l.get("event") == "done"]
    if not done or done[-1].get("test_acc") is None:
        fail("the metrics file has no done line with a test accuracy")
    return done[-1]["test_acc"]


def log_lines(job):
    return len(job.log("averager").splitlines())


def run_reference(prsgd, workdir):
    """The same job without the attacker: its final accuracy and the length of the averager's log."""
    ref = Job(prsgd, workdir)
    try:
        ref.start_averager()
        ref.start_worker("worker-0")
        ref.start_worker("worker-1")
        ref.finish()
        return final_accuracy(ref), log_lines(ref)
    finally:
        ref.stop_all()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prsgd", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("scenario", choices=sorted(SCENARIOS))
    args = ap.parse_args()
    reference = None
    if args.scenario in COMPARED:
        reference = run_reference(args.prsgd, os.path.join(args.workdir, "reference"))
    job = Job(args.prsgd, os.path.join(args.workdir, "attack"))
    try:
        if args.scenario in ("keys", "endless-multipart"):
            start_keyed_job(job)
        elif args.scenario == "head-spoof":
            start_head_job(job)
        else:
            job.start_averager()
            job.start_worker("worker-0")
            job.start_worker("worker-1")
        if args.scenario == "other-model":
            job.start_worker("worker-other", model="mlp:784-32-10")
        SCENARIOS[args.scenario](job)
    finally:
        job.stop_all()
    if reference is not None:
        ref_acc, ref_lines = reference
        acc, lines = final_accuracy(job), log_lines(job)
        if abs(acc - ref_acc) > ACCURACY_TOLERANCE:
            fail(f"test accuracy {acc:.4f} under attack, {ref_acc:.4f} without: more than 1 point apart")
        if lines > ref_lines + EXTRA_LOG_LINES:
            fail(f"the averager wrote {lines} log lines under attack, {ref_lines} without")
        print(f"{args.scenario}: accuracy {acc:.4f} (without the attacker {ref_acc:.4f}); "
              f"{lines} log lines (without {ref_lines})")


if __name__ == "__main__":
    main()
