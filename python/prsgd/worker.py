# SPDX-License-Identifier: Apache-2.0
"""prsgd.Worker: a worker of a prsgd averager, generic over a flat float32 parameter vector.

    def train(params, interval):            # params: 1-d float32 numpy array, x̄ of this round
        ...run `interval` local steps...
        return params, steps, samples, loss  # loss: mean per-sample training loss over those steps

    prsgd.Worker("tcp://127.0.0.1:7500", train, model_fingerprint=..., data_fingerprint=...).run()

The worker follows the training protocol (actors/PROTOCOL.md) as `prsgd worker` does: it joins with its
fingerprints, takes the member id, session token, data shard and job settings the averager hands out in
WELCOME, trains one round per RESTART, sends MODEL, heartbeats, and joins again as a new member when the
averager removes it, restarts, or goes silent. SIGTERM and SIGINT make it send LEAVE and return.

Threads: `run()` trains on the calling thread; one background thread owns the ZeroMQ socket (heartbeats and
joins go on while a round trains). The socket is touched by that thread only.
"""
import os
import secrets
import signal
import sys
import threading
import time
from collections import deque

import numpy as np
import zmq

from . import protocol as P
from .order import samples_of

JOINING, WELCOMED, TRAINING, SUBMITTED, LEFT, STOPPED = "joining", "welcomed", "training", "submitted", "left", \
    "stopped"


class Refused(Exception):
    """The averager refused this worker for good (its model or data differ from the job's); str() says how."""


class JoinTimeout(Exception):
    """No averager welcomed this worker within join_timeout_ms of starting to join (or of rejoining after it
    lost its averager); str() says what it waited for."""


class Round:
    """What the averager asked for in one RESTART, plus the member's assignment from its WELCOME.

    number, interval (local steps I_i), step_size (γ), mode (protocol.RESTARTED_SGD or MINIBATCH_SGD),
    ranges (list of [begin, end) pairs of global sample positions to train on this round, or None: use the
    shard; `samples(n)` maps them to sample indices),
    shard, num_shards, batch_size, seed (the job's), and `cancelled`, a threading.Event that is set when the
    round is superseded (a newer RESTART, a rejoin, STOP or LEAVE): a train function may stop early then,
    its result is thrown away anyway."""

    def __init__(self, number, interval, step_size, mode, ranges, shard, num_shards, batch_size, seed):
        self.number, self.interval, self.step_size, self.mode = number, interval, step_size, mode
        self.ranges, self.shard, self.num_shards = ranges, shard, num_shards
        self.batch_size, self.seed = batch_size, seed
        self.cancelled = threading.Event()

    def samples(self, n):
        """Returns the sample indices (an int64 numpy array) this round's ranges name in a data set of n
        samples, in the ranges' order (shuffle them yourself), or None without ranges."""
        if self.ranges is None:
            return None
        return samples_of(self.ranges, n, self.seed)


def read_key_file(path):
    """Returns the 40-character Z85 CURVE key in a `prsgd keygen` file (.public or .secret)."""
    try:
        with open(path, encoding="ascii") as f:
            text = f.read().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot read key file '{path}': {e}") from None
    z85 = set("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#")
    if len(text) != 40 or not set(text) <= z85:
        raise ValueError(f"key file '{path}' does not hold a 40-character Z85 key")
    return text


def connect(ctx, averager, name, curve=None):
    """Returns a DEALER socket of `ctx` connected to the averager as the prsgd transport expects: its routing id
    is the node name, NUL and 16 random bytes (transport/README.md); curve: (public, secret, server) Z85 keys."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 2000)
    sock.setsockopt(zmq.ROUTING_ID, name.encode()[:64] + b"\0" + os.urandom(16))
    sock.setsockopt(zmq.IMMEDIATE, 1)  # what is sent is repeated: don't pile it up while disconnected
    sock.setsockopt(zmq.RECONNECT_IVL, 100)
    sock.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
    if curve:
        sock.curve_publickey, sock.curve_secretkey, sock.curve_serverkey = (k.encode() for k in curve)
    sock.connect(averager)
    return sock


def _log(level, text):
    print(f"prsgd worker [{level}] {text}", file=sys.stderr, flush=True)


class Worker:
    """A worker process's side of the protocol. Subclass and override `train` (and `gradient` for
    mini-batch jobs), or pass `train=` a function.

    averager: the averager's endpoint (tcp://HOST:PORT, ipc://PATH).
    model_fingerprint, data_fingerprint: what JOIN declares; the averager refuses a worker whose declared
    fingerprints differ from the job's (prsgd.fingerprints builds prsgd's own strings).
    model_size: floats in the parameter vector, checked against WELCOME (None: not checked).
    speed_hint: expected local steps per second for the first JOIN (later JOINs send the measured speed).
    initial_model: a 1-d float32 array sent with every JOIN: a `--model external` averager without
    --init-model starts the job from the first one it receives (None: send none).
    heartbeat_ms, heartbeat_timeout_ms: as `prsgd worker --heartbeat-ms / --heartbeat-timeout-ms`.
    join_timeout_ms: as `prsgd worker --join-timeout-ms`: run() raises JoinTimeout when no averager welcomed the
    worker within this many milliseconds of starting to join or of rejoining; 0 keeps trying.
    curve_public_key, curve_secret_key, curve_server_key: `prsgd keygen` files; all three or none.
    """

    def __init__(self, averager, train=None, *, model_fingerprint="", data_fingerprint="", model_size=None,
                 speed_hint=0.0, initial_model=None, heartbeat_ms=500, heartbeat_timeout_ms=5000,
                 join_timeout_ms=600000, curve_public_key=None, curve_secret_key=None, curve_server_key=None,
                 name="python-worker", log=_log):
        if heartbeat_ms <= 0 or heartbeat_timeout_ms <= heartbeat_ms:
            raise ValueError("heartbeat_timeout_ms must be > heartbeat_ms > 0")
        if join_timeout_ms < 0:
            raise ValueError("join_timeout_ms must be >= 0")
        keys = (curve_public_key, curve_secret_key, curve_server_key)
        if any(keys) and not all(keys):
            raise ValueError("CURVE needs curve_public_key, curve_secret_key and curve_server_key together")
        self.averager = averager
        self._train_fn = train
        self.model_fingerprint, self.data_fingerprint = model_fingerprint, data_fingerprint
        self.model_size = model_size
        self.initial_model = None if initial_model is None else \
            np.ascontiguousarray(initial_model, dtype=np.float32).reshape(-1)
        self.speed = float(speed_hint)
        self.heartbeat = heartbeat_ms / 1000.0
        self.timeout = heartbeat_timeout_ms / 1000.0
        self.join_retry = max(self.heartbeat, 0.2)
        self.join_timeout = join_timeout_ms / 1000.0
        self._curve = tuple(read_key_file(k) for k in keys) if all(keys) else None
        self.name = name
        self.log = log
        self.nonce = secrets.randbits(64) or 1
        # Protocol state: touched by the I/O thread only, except where _lock is held.
        self.state = JOINING
        self.member = self.token = self.averager_incarnation = 0
        self.round_number, self.have_restart, self.last_finished = 0, False, 0
        self.welcome = None  # the last WELCOME's fields
        self.round = None  # the Round the training thread works on (set before train() is called)
        self._latest = None  # the newest accepted Round (I/O thread, under _lock)
        self.models_sent = 0
        self.refusal = None
        self.gave_up = None  # what the worker waited for when join_timeout passed
        self._joining_since = None
        self._lock = threading.Lock()
        self._tasks = deque()  # (Round, params) for the training thread
        self._results = deque()  # MODEL frames for the I/O thread
        self._wake_task = threading.Condition(self._lock)
        self._leave_requested = False
        self._io = None
        self._ctx = zmq.Context()
        self._wake_addr = f"inproc://prsgd-wake-{id(self)}"
        self._wake_rx = self._ctx.socket(zmq.PAIR)
        self._wake_rx.bind(self._wake_addr)
        self._wake_tx = self._ctx.socket(zmq.PAIR)
        self._wake_tx.connect(self._wake_addr)
        self._wake_tx_lock = threading.Lock()

    def run_to_exit_status(self, prog):
        """For a worker program's main(): run(), then one line on stderr; returns the exit status, as the C++
        worker's: 0 when the job ended, 3 when the worker left before it (SIGTERM/SIGINT or leave()), 1 (with
        the reason) when the averager refused it."""
        try:
            end = self.run()
        except Refused as e:
            print(f"{prog}: the averager refused this worker: {e}", file=sys.stderr)
            return 1
        except JoinTimeout as e:
            print(f"{prog}: {e} (--join-timeout-ms); giving up", file=sys.stderr)
            return 1
        print(f"{prog}: {end} after {self.models_sent} models", file=sys.stderr)
        return 3 if end == LEFT else 0

    # --- to override --------------------------------------------------------------------------------------

    def train(self, params, interval):
        """Runs `interval` local steps from `params` (x̄ of round self.round); returns (params, steps, samples,
        loss) with loss the mean per-sample loss over the steps. Fewer steps than asked mark the MODEL cut."""
        if self._train_fn is None:
            raise NotImplementedError("pass train= or override Worker.train")
        return self._train_fn(params, interval)

    def gradient(self, params):
        """Mini-batch mode: returns (gradient, samples, loss) of one mini-batch at `params`."""
        raise NotImplementedError("this worker does not compute gradients (mini-batch mode)")

    def on_welcome(self, welcome):
        """Called on the training thread's side after each WELCOME (a dict of its fields); may raise
        ValueError to end the worker with that message."""

    # --- running --------------------------------------------------------------------------------------------

    def run(self, handle_signals=True):
        """Joins the job and trains until the averager sends STOP (returns "stopped") or the worker leaves
        (SIGTERM/SIGINT or leave(): returns "left"). Raises Refused when the averager refuses the worker."""
        previous = {}
        if handle_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, lambda *_: self.leave())
        self._io = threading.Thread(target=self._io_loop, name="prsgd-io", daemon=True)
        self._io.start()
        try:
            while True:
                task = self._next_task()
                if task is None:
                    break
                self._run_task(*task)
        finally:
            self.leave()
            self._io.join()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            for s in (self._wake_tx, self._wake_rx):
                s.close(0)
            self._ctx.term()
        if self.refusal is not None:
            raise Refused(self.refusal)
        if self.gave_up is not None:
            raise JoinTimeout(self.gave_up)
        return self.state

    def leave(self):
        """Sends LEAVE (once) and ends run(). Safe from any thread and from a signal handler."""
        with self._lock:
            if self._leave_requested:
                return
            self._leave_requested = True
            if self._latest is not None:
                self._latest.cancelled.set()
            self._wake_task.notify_all()
        self._wake_io()

    # --- the training thread ------------------------------------------------------------------------------

    def _next_task(self):
        with self._lock:
            while not self._tasks and self.state not in (LEFT, STOPPED) and not self._leave_requested:
                self._wake_task.wait(0.5)
            if self.state in (LEFT, STOPPED) or self._leave_requested:
                return None
            return self._tasks.popleft()

    def _run_task(self, rnd, params, welcome):
        if welcome is not None:
            try:
                self.on_welcome(welcome)
            except ValueError as e:
                self.leave()
                raise SystemExit(f"prsgd worker: {e}") from None
            return
        self.round = rnd
        start = time.monotonic()
        if rnd.mode == P.MINIBATCH_SGD:
            grad, samples, loss = self.gradient(params)
            out, steps, gradient = grad, 1, True
        else:
            out, steps, samples, loss = self.train(params, rnd.interval)
            gradient = False
        elapsed = time.monotonic() - start
        if rnd.cancelled.is_set():
            return
        if steps > 0 and elapsed > 0:
            measured = steps / elapsed
            self.speed = measured if self.speed <= 0 else 0.5 * self.speed + 0.5 * measured
        out = np.asarray(out, dtype=np.float32).reshape(-1)
        with self._lock:
            self._results.append((rnd, out, int(steps), int(samples), float(loss) * samples, int(samples), gradient,
                                  steps < rnd.interval and not gradient))
        self._wake_io()

    def _wake_io(self):
        with self._wake_tx_lock:
            try:
                self._wake_tx.send(b"", zmq.NOBLOCK)
            except zmq.ZMQError:
                pass  # a wake-up is already pending, or the worker is shutting down

    # --- the I/O thread -------------------------------------------------------------------------------------

    def _io_loop(self):
        sock = connect(self._ctx, self.averager, self.name, self._curve)
        self._sock = sock
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(self._wake_rx, zmq.POLLIN)
        now = time.monotonic()
        self._last_heard = now
        self._next_heartbeat = now + self.heartbeat
        self._next_transport_heartbeat = now
        self._send(P.encode_join(self.nonce, 0, 0, self.speed, self.model_fingerprint, self.data_fingerprint,
                                 self.initial_model))
        self._next_join = now + self.join_retry
        self._joining_since = now
        try:
            while True:
                with self._lock:
                    leaving = self._leave_requested
                if leaving:
                    self._do_leave()
                    break
                if self.state in (LEFT, STOPPED):
                    break
                self._send_results()
                timeout = max(0.0, min(self._next_wakeup() - time.monotonic(), 0.25))
                for s, _ in poller.poll(int(timeout * 1000) + 1):
                    if s is self._wake_rx:
                        while self._wake_rx.poll(0):
                            self._wake_rx.recv()
                    else:
                        while sock.poll(0):
                            self._on_frames(sock.recv_multipart(copy=True))
                self._tick()
        finally:
            try:
                sock.send(P.KIND_BYE, zmq.NOBLOCK)
            except zmq.ZMQError:
                pass
            sock.close()
            with self._lock:
                if self.state not in (LEFT, STOPPED):
                    self.state = LEFT
                self._wake_task.notify_all()

    def _send(self, frames):
        try:
            self._sock.send_multipart(frames, zmq.NOBLOCK, copy=False)
        except zmq.Again:
            pass  # not connected: JOINs and heartbeats are repeated, a lost MODEL is the protocol's to cope with

    def _next_wakeup(self):
        t = min(self._next_heartbeat, self._next_transport_heartbeat)
        if self.state == JOINING:
            t = min(t, self._next_join)
            return min(t, self._joining_since + self.join_timeout) if self.join_timeout > 0 else t
        return min(t, self._last_heard + self.timeout + 0.001)

    def _tick(self):
        now = time.monotonic()
        if self.state == JOINING and self.join_timeout > 0 and now - self._joining_since >= self.join_timeout:
            self.gave_up = f"no averager welcomed this worker within {self.join_timeout:g} s at {self.averager}"
            self.log("error", self.gave_up + "; giving up")
            self._stop()
            return
        if now >= self._next_transport_heartbeat:
            self._send([P.KIND_HEARTBEAT + self.name.encode()])
            self._next_transport_heartbeat = now + min(self.heartbeat, 0.25)
        if self.state != JOINING and now - self._last_heard > self.timeout:
            self.log("warn", f"member {self.member}: averager silent; rejoining")
            self._rejoin()
            self._last_heard = now
        elif self.state == JOINING and now >= self._next_join:
            self._send(P.encode_join(self.nonce, self.averager_incarnation, self.last_finished, self.speed,
                                     self.model_fingerprint, self.data_fingerprint, self.initial_model))
            self._next_join = now + self.join_retry
        if now >= self._next_heartbeat:
            if self.member:
                self._send(P.encode_heartbeat(self.member, self.nonce, self.averager_incarnation, self.round_number,
                                              self.token))
            self._next_heartbeat = now + self.heartbeat

    def _cancel_current(self):
        with self._lock:
            if self._latest is not None:
                self._latest.cancelled.set()
            self._tasks.clear()
            self._results.clear()

    def _rejoin(self):
        self._cancel_current()
        self.state = JOINING
        self._joining_since = time.monotonic()
        self.member = self.token = 0
        self._send(P.encode_join(self.nonce, self.averager_incarnation, self.last_finished, self.speed,
                                 self.model_fingerprint, self.data_fingerprint, self.initial_model))
        self._next_join = time.monotonic() + self.join_retry

    def _do_leave(self):
        self._cancel_current()
        if self.state in (LEFT, STOPPED):
            return  # the job ended (STOP) or the worker already left: nothing to announce
        if self.member:
            self._send(P.encode_leave(self.member, self.nonce, self.averager_incarnation, self.round_number,
                                      self.token))
        self.state = LEFT

    def _send_results(self):
        while True:
            with self._lock:
                if not self._results:
                    return
                rnd, params, steps, samples, loss_sum, loss_count, gradient, cut = self._results.popleft()
            if self.state != TRAINING or rnd is not self._latest:
                continue  # superseded meanwhile
            self._send(P.encode_model(self.member, self.nonce, self.averager_incarnation, rnd.number, self.token,
                                      params, steps, samples, loss_sum, loss_count, gradient, cut))
            self.models_sent += 1
            self.last_finished = rnd.number
            self.state = SUBMITTED

    def _on_frames(self, frames):
        if not frames or frames[0] != P.KIND_DATA:
            return  # the transport's heartbeats and goodbyes: not protocol messages
        try:
            m = P.decode(frames[1:])
        except P.ProtocolError as e:
            self.log("warn", f"dropped malformed message from the averager: {e}")
            return
        if self.state in (LEFT, STOPPED):
            return
        now = time.monotonic()
        if m.type == P.WELCOME:
            if m["i"] == self.nonce and m["m"] != 0 and (self.state == JOINING or m["m"] == self.member):
                self._last_heard = now
                self._on_welcome(m)
            return
        if m.type == P.REFUSED:
            if m["i"] == self.nonce and self.state == JOINING:
                self.refusal = m["why"]
                self._stop()
            return
        if m["m"] != self.member:
            return  # misaddressed
        if m.type == P.RESTART:
            if m["i"] == self.nonce:
                self._last_heard = now
                self._on_restart(m)
        elif m.type == P.HEARTBEAT:
            if not m["fa"] or m["a"] < self.averager_incarnation:
                return
            self._last_heard = now
            if m["a"] > self.averager_incarnation and self.state != JOINING:
                self.log("info", f"member {self.member} sees new averager incarnation {m['a']}; rejoining")
                self._rejoin()
        elif m.type == P.REMOVED:
            if m["i"] != self.nonce or m["a"] < self.averager_incarnation:
                return
            self._last_heard = now
            if self.state != JOINING:
                self.log("info", f"member {self.member} removed by averager incarnation {m['a']}; rejoining")
                self._rejoin()
        elif m.type == P.STOP:
            if m["a"] >= self.averager_incarnation:
                self._stop()

    def _stop(self):
        self._cancel_current()
        with self._lock:
            self.state = STOPPED
            self._wake_task.notify_all()

    def _on_welcome(self, m):
        if m["a"] < self.averager_incarnation:
            return
        if m["a"] > self.averager_incarnation:
            self.averager_incarnation = m["a"]
            self.have_restart = False
        if m["hb"] > 0:
            self.heartbeat = m["hb"] / 1e9
        if self.state != JOINING:
            return
        if self.model_size is not None and m["ms"] != self.model_size:
            self.log("error", f"the job's model has {m['ms']} floats, this worker's {self.model_size}; leaving")
            self.refusal = f"model size mismatch: the job's model has {m['ms']} floats, the worker's {self.model_size}"
            self._do_leave()
            self._stop()
            return
        self.state = WELCOMED
        self.member, self.token = m["m"], m["k"]
        self.welcome = dict(m.fields)
        self.log("info", f"joined as member {self.member} (shard {m['sh']} of {m['ns']}) of averager incarnation "
                         f"{m['a']}, admitted at round {m['ad']}")
        with self._lock:
            self._tasks.append((None, None, dict(m.fields)))
            self._wake_task.notify_all()

    def _on_restart(self, m):
        if m["a"] < self.averager_incarnation:
            return
        if m["a"] > self.averager_incarnation:
            self.averager_incarnation = m["a"]  # overtook its WELCOME from a new incarnation
            self.have_restart = False
        elif self.have_restart and m["r"] <= self.round_number:
            return  # duplicate or reordered older RESTART
        if self.welcome is None:
            return  # cannot train without a shard
        self.have_restart = True
        self.round_number = m["r"]
        w = self.welcome
        rnd = Round(m["r"], max(m["iv"], 1), m["ss"], m["md"], m["ranges"], w["sh"], w["ns"], w["bs"], w["sd"])
        with self._lock:
            if self._latest is not None:
                self._latest.cancelled.set()
            self._tasks = deque(t for t in self._tasks if t[0] is None)  # keep a pending WELCOME hook
            self._results.clear()
            self._latest = rnd
            self._tasks.append((rnd, m.payload, None))
            self._wake_task.notify_all()
        self.state = TRAINING
