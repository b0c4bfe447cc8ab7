# SPDX-License-Identifier: Apache-2.0
"""prsgd.Evaluator: scores x̄ on a test set for an averager that has none (`prsgd averager --model external`).

    def score(params):                # params: 1-d float32 numpy array, x̄ after some round
        return accuracy, loss         # accuracy in [0, 1], loss the mean test cross-entropy (>= 0);
                                      # `return accuracy` alone leaves the round's test_loss null

    prsgd.Evaluator("tcp://127.0.0.1:7500", score, model_fingerprint=prsgd.fingerprints.external(P)).run()

The evaluator says hello (EVALUATOR_HELLO) every heartbeat interval; the averager answers with EVALUATE and x̄
every `--eval-every` rounds and at the end, and records the accuracy and loss the evaluator sends back
(EVALUATION) in that round's metrics line (test_acc, test_loss). It ends on STOP (the job is over: run()
returns "stopped") or SIGTERM/SIGINT ("left"), raises Refused when the averager refuses its model, and
JoinTimeout when nothing at all comes back from the averager's endpoint within join_timeout_ms of starting
(as `prsgd evaluator --join-timeout-ms`). Once an averager has answered, one that restarts finds the
evaluator again by its hellos, however long that takes. prsgd.torch.Evaluator scores a torch.nn.Module on a DataLoader.

Threads: run() owns the socket on the calling thread; scoring runs on a thread of its own, so hellos go on
while a long evaluation runs.
"""
import queue
import secrets
import signal
import sys
import threading
import time

import numpy as np
import zmq

from . import protocol as P
from .worker import JoinTimeout, Refused, connect, read_key_file

STOPPED, LEFT = "stopped", "left"


def _log(level, text):
    print(f"prsgd evaluator [{level}] {text}", file=sys.stderr, flush=True)


class Evaluator:
    """An evaluator process's side of the protocol. Subclass and override `score`, or pass `score=`.

    averager: the averager's endpoint. model_fingerprint: what the hello declares (the averager refuses
    another model's evaluator). heartbeat_ms: how often to say hello. join_timeout_ms: run() raises
    JoinTimeout when the averager's endpoint sends nothing back within this many ms of starting; 0 = keep
    asking. curve_*: `prsgd keygen` files, as for prsgd.Worker."""

    def __init__(self, averager, score=None, *, model_fingerprint="", heartbeat_ms=500, join_timeout_ms=600000,
                 curve_public_key=None, curve_secret_key=None, curve_server_key=None, name="python-evaluator",
                 log=_log):
        if heartbeat_ms <= 0:
            raise ValueError("heartbeat_ms must be > 0")
        if join_timeout_ms < 0:
            raise ValueError("join_timeout_ms must be >= 0")
        keys = (curve_public_key, curve_secret_key, curve_server_key)
        if any(keys) and not all(keys):
            raise ValueError("CURVE needs curve_public_key, curve_secret_key and curve_server_key together")
        self.averager, self._score_fn = averager, score
        self.model_fingerprint = model_fingerprint
        self.heartbeat = heartbeat_ms / 1000.0
        self.join_timeout = join_timeout_ms / 1000.0
        self._curve = tuple(read_key_file(k) for k in keys) if all(keys) else None
        self.name, self.log = name, log
        self.nonce = secrets.randbits(64) or 1
        self.averager_incarnation = 0
        self.evaluated = 0
        self.refusal = None
        self._stop = threading.Event()

    def score(self, params):
        """Returns the test accuracy (in [0, 1]) of the flat model `params`, or (accuracy, loss) with its mean
        test loss (finite, >= 0)."""
        if self._score_fn is None:
            raise NotImplementedError("pass score= or override Evaluator.score")
        return self._score_fn(params)

    def stop(self):
        """Ends run() (returns "left"). Safe from any thread and from a signal handler."""
        self._stop.set()

    def run_to_exit_status(self, prog):
        """For an evaluator program's main(): run(), then one line on standard output; returns 0 when the job ended, 3
        when stopped before (SIGTERM/SIGINT), 1 when the averager refused it or never answered."""
        try:
            end = self.run()
        except Refused as e:
            print(f"{prog}: the averager refused this evaluator: {e}", flush=True)
            return 1
        except JoinTimeout as e:
            print(f"{prog}: {e} (--join-timeout-ms); giving up", flush=True)
            return 1
        print(f"{prog}: {end} after {self.evaluated} evaluations", flush=True)
        return 3 if end == LEFT else 0

    def run(self, handle_signals=True):
        previous = {}
        if handle_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, lambda *_: self.stop())
        ctx = zmq.Context()
        jobs, results = queue.Queue(), queue.Queue()
        scorer = threading.Thread(target=self._score_loop, args=(jobs, results), name="prsgd-score", daemon=True)
        scorer.start()
        sock = connect(ctx, self.averager, self.name, self._curve)
        end, gave_up = LEFT, None
        started, answered = time.monotonic(), False
        try:
            next_hello = 0.0
            while not self._stop.is_set():
                now = time.monotonic()
                if not answered and self.join_timeout > 0 and now - started >= self.join_timeout:
                    gave_up = f"no averager answered at {self.averager} within {self.join_timeout:g} s"
                    break
                if now >= next_hello:
                    self._send(sock, [P.KIND_HEARTBEAT + self.name.encode()])
                    self._send(sock, P.encode_evaluator_hello(self.nonce, self.averager_incarnation,
                                                              self.model_fingerprint))
                    next_hello = now + self.heartbeat
                if sock.poll(50):
                    while sock.poll(0):
                        answered = True  # anything from the endpoint: its transport's heartbeat comes first
                        end = self._on_frames(sock.recv_multipart(), jobs) or end
                        if self._stop.is_set():
                            break
                while not results.empty():
                    a, rnd, request, acc, loss = results.get()
                    self._send(sock, P.encode_evaluation(self.nonce, a, rnd, request, acc, loss))
        finally:
            jobs.put(None)
            try:
                sock.send(P.KIND_BYE, zmq.NOBLOCK)
            except zmq.ZMQError:
                pass
            sock.close()
            ctx.term()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if self.refusal is not None:
            raise Refused(self.refusal)
        if gave_up is not None:
            raise JoinTimeout(gave_up)
        return end

    @staticmethod
    def _send(sock, frames):
        try:
            sock.send_multipart(frames, zmq.NOBLOCK, copy=False)
        except zmq.Again:
            pass  # not connected: hellos are repeated, a lost result leaves that round's accuracy empty

    def _on_frames(self, frames, jobs):
        if not frames or frames[0] != P.KIND_DATA:
            return None  # transport heartbeats and goodbyes
        try:
            m = P.decode(frames[1:], P.TO_EVALUATOR)
        except P.ProtocolError as e:
            self.log("warn", f"dropped a message from the averager: {e}")
            return None
        if m["i"] != self.nonce or m["a"] < self.averager_incarnation:
            return None  # for another evaluator, or from an averager incarnation that has been replaced
        self.averager_incarnation = m["a"]
        if m.type == P.EVALUATE:
            jobs.put((m["a"], m["r"], m["q"], m.payload))
        elif m.type == P.REFUSED:
            self.refusal = m["why"]
            self._stop.set()
        elif m.type == P.STOP:
            self._stop.set()
            return STOPPED
        return None

    def _score_loop(self, jobs, results):
        while True:
            job = jobs.get()
            if job is None:
                return
            a, rnd, request, params = job
            try:
                scored = self.score(params)
                acc, loss = scored if isinstance(scored, (tuple, list)) else (scored, None)
                acc, loss = float(acc), None if loss is None else float(loss)
            except Exception as e:  # a failing score function must not end the evaluator: report nothing
                self.log("error", f"scoring x̄ after round {rnd} failed: {e}")
                continue
            if not np.isfinite(acc) or not 0.0 <= acc <= 1.0:
                self.log("error", f"the score of x̄ after round {rnd} is {acc}, not an accuracy in [0, 1]")
                continue
            if loss is not None and not (np.isfinite(loss) and loss >= 0.0):
                self.log("error", f"the loss of x̄ after round {rnd} is {loss}, not a finite number >= 0")
                continue
            self.evaluated += 1
            self.log("info", f"x̄ after round {rnd}: test accuracy {acc:.4f}" +
                     ("" if loss is None else f", test loss {loss:.4f}"))
            results.put((a, rnd, request, acc, loss))


__all__ = ["Evaluator", "JoinTimeout", "Refused"]
