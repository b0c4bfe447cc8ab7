#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch workers (the prsgd Python package) in real jobs of a real `prsgd averager`, on loopback.

  install  makes a venv (--system-site-packages) in WORKDIR and installs python/ into it with
           pip --no-build-isolation --no-index; checks that the package and prsgd_twins import from it
  mixed    fmnist-mlp, the same seed and settings twice: 4 `prsgd worker`s, then 2 `prsgd worker`s and
           2 PyTorch twin workers; both jobs finish every round, the PyTorch workers submit models that
           enter the averages, and the final test accuracies differ by at most 0.5 points
  curve    a job with CURVE keys (prsgd keygen) and a client allow-list: one `prsgd worker` and one PyTorch
           worker holding allowed keys train every round together
  balanced time-balanced intervals with a C++ worker and a PyTorch worker slowed down by 40 ms a step: by
           the last rounds the averager gives the slow worker at most half the fast one's interval
  example  examples/pytorch: 4 PyTorch CNN-with-dropout workers on an averager running the matching model
           spec, with checkpoints; one worker is killed with SIGKILL after round 3 (a fifth, waiting for a
           free shard, joins in its place), the averager after round 6 (restarted on the same port and checkpoint directory, it
           resumes from its checkpoint and the running workers rejoin); the job finishes every round, the
           last with all four workers, above 60 % test accuracy
  refused  a PyTorch worker of fmnist-cnn against an fmnist-mlp job: exit status 1 and one line saying the
           model differs; the job's two C++ workers finish it
  external           `--model external`: two examples/pytorch CNN workers (--external, 6000 training samples)
           and an evaluator (2000 test samples), no C++ model anywhere; x̄_0 is the first worker's model; the
           metrics lines carry the evaluator's accuracies, the done line one above 60 %, and --save-model
           writes the --model-spec's tensor names
  external_recovery  the same job with checkpoints through a kill -9 of a worker (a spare takes its shard)
           and of the averager (restarted with the same command); every round closes exactly once, every
           training sample is consumed once per epoch, and the evaluator carries on with the new averager
  external_refused   a worker whose model has another parameter count than --model-size: exit status 1 and
           one line naming both fingerprints; an evaluator of another size is refused the same way
  external_no_evaluator  the job without an evaluator, started from --init-model (a safetensors file of the
           --model-spec tensors): every test_acc is null and the job is done

usage: pytorch_job.py --prsgd PATH --python-src DIR --workdir DIR [--venv DIR] SCENARIO
The scenarios after install run the venv's python (--venv, default WORKDIR/../venv).
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from process_job import SCALE, ProcessJob, fail  # noqa: E402  (tests/integration/process_job.py)

COMMON = ["--heartbeat-ms", "200", "--heartbeat-timeout-ms", "4000"]
JOB = ["--model", "fmnist-mlp", "--batch", "64", "--lr", "0.05", "--seed", "7"]


class Job(ProcessJob):
    def __init__(self, prsgd, python, workdir):
        super().__init__(workdir)
        self.prsgd, self.python = prsgd, python

    def start_averager(self, extra, job=JOB, name="averager"):
        endpoint_file = os.path.join(self.dir, "averager.endpoint")
        if os.path.exists(endpoint_file):
            os.remove(endpoint_file)
        listen = [] if "--listen" in extra else ["--listen", "tcp://127.0.0.1:*"]
        self.start(name, [self.prsgd, "averager"] + listen + ["--endpoint-file", endpoint_file, "--metrics-jsonl",
                                                              self.metrics, "--progress", "off"]
                   + list(job) + COMMON + list(extra))
        self.procs["averager"] = self.procs[name]
        self.endpoint = self.wait_for_endpoint(endpoint_file, name, 120)

    def keygen(self, name):
        keys = os.path.join(self.dir, "keys")
        subprocess.run([self.prsgd, "keygen", "--out-dir", keys, "--name", name], check=True,
                       stdout=subprocess.DEVNULL)
        return os.path.join(keys, name + ".public"), os.path.join(keys, name + ".secret")

    def start_cpp_worker(self, name, extra=()):
        return self.start(name, [self.prsgd, "worker", "--averager", self.endpoint, "--progress", "off"] + JOB[:2]
                          + COMMON + list(extra))

    def start_torch_worker(self, name, model="fmnist-mlp", extra=()):
        return self.start(name, [self.python, "-m", "prsgd.twin_worker", "--averager", self.endpoint, "--model", model,
                                 "--lr", "0.05"] + COMMON + list(extra))

    def wait_for_round(self, r, timeout):
        deadline = time.monotonic() + timeout * SCALE
        while time.monotonic() < deadline:
            if os.path.exists(self.metrics) and any(l.get("round", -1) >= r for l in self.lines()):
                return
            if self.procs["averager"].poll() is not None:
                break
            time.sleep(0.1)
        self.stop_all()
        fail(f"round {r} did not close")

    def kill9(self, name):
        """Kills process NAME with SIGKILL and reaps it."""
        self.procs[name].kill()
        self.procs[name].wait()

    def wait_for_log(self, name, text, timeout):
        deadline = time.monotonic() + timeout * SCALE
        while time.monotonic() < deadline:
            if text in self.log(name):
                return
            if self.procs[name].poll() is not None:
                break
            time.sleep(0.1)
        self.stop_all()
        fail(f"{name} did not log '{text}':\n" + self.log(name)[-2000:])

    def finish(self, workers, averager="averager", with_accuracy=True):
        """Waits for the averager and `workers` to exit 0; returns the metrics lines and the done line (which
        must carry a test accuracy unless with_accuracy is False)."""
        status = self.wait("averager", 600)
        if status != 0:
            self.stop_all()
            fail(f"the averager did not finish (status {status}):\n" + self.log(averager)[-4000:])
        for w in workers:
            status = self.wait(w, 60)
            if status != 0:
                self.stop_all()
                fail(f"{w} ended with status {status}:\n" + self.log(w)[-4000:])
        lines = self.lines()
        done = [l for l in lines if l.get("event") == "done"]
        if len(done) != 1 or (with_accuracy and done[0].get("test_acc") is None):
            fail(f"no done line{' with a test accuracy' if with_accuracy else ''} in {self.metrics}")
        return lines, done[0]


def scenario_install(args):
    venv = args.venv or os.path.join(os.path.dirname(args.workdir), "venv")
    shutil.rmtree(venv, ignore_errors=True)
    src = os.path.join(args.workdir, "src")
    shutil.rmtree(src, ignore_errors=True)
    os.makedirs(args.workdir, exist_ok=True)
    shutil.copytree(args.python_src, src, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True)
    py = os.path.join(venv, "bin", "python")
    r = subprocess.run([py, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--quiet", src],
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail("pip install failed:\n" + r.stdout + r.stderr)
    check = ("import prsgd, prsgd.torch, prsgd.twin_worker, prsgd_twins, os; "
             "assert os.path.realpath(prsgd.__file__).startswith(os.path.realpath(%r)), prsgd.__file__; "
             "print(prsgd.__version__)" % venv)
    r = subprocess.run([py, "-c", check], capture_output=True, text=True, cwd="/")
    if r.returncode != 0:
        fail("the installed package does not import from the venv:\n" + r.stderr)
    print(f"install: prsgd {r.stdout.strip()} in {venv}")


def run_job(args, name, torch_workers, epochs):
    job = Job(args.prsgd, args.python, os.path.join(args.workdir, name))
    job.start_averager(["--min-workers", "4", "--epochs", str(epochs), "--interval", "8", "--idle-rounds", "0"])
    names = []
    for i in range(4):
        n = f"worker-{i}"
        names.append(n)
        if i < torch_workers:
            job.start_torch_worker(n)
        else:
            job.start_cpp_worker(n)
    lines, done = job.finish(names)
    rounds = [l for l in lines if "members" in l]
    return job, rounds, done


def scenario_mixed(args):
    epochs = 2
    _, base_rounds, base = run_job(args, "all-cpp", 0, epochs)
    job, rounds, mixed = run_job(args, "mixed", 2, epochs)
    if len(rounds) != len(base_rounds):
        fail(f"the mixed job closed {len(rounds)} rounds, the all-C++ one {len(base_rounds)}")
    # The last round shares out what is left of the last epoch's samples, so fewer members may train in it.
    short = [r for r in rounds[:-1] if r["submissions"] != 4] + [r for r in rounds if r["rejected"] != 0]
    if short:
        fail("a round of the mixed job did not average all four workers: " + json.dumps(short[:3]))
    for w in ("worker-0", "worker-1"):
        if "stopped after" not in job.log(w):
            fail(f"the PyTorch {w} did not end with the job:\n" + job.log(w)[-2000:])
    a, b = base["test_acc"], mixed["test_acc"]
    print(f"mixed: all-C++ test accuracy {a:.4f}, 2 C++ + 2 PyTorch {b:.4f}, {len(rounds)} rounds each")
    if abs(a - b) > 0.005:
        fail(f"the accuracies differ by {abs(a - b) * 100:.2f} points (> 0.5)")


def scenario_curve(args):
    job = Job(args.prsgd, args.python, os.path.join(args.workdir, "curve"))
    server_pub, server_sec = job.keygen("server")
    cpp_pub, cpp_sec = job.keygen("worker-cpp")
    py_pub, py_sec = job.keygen("worker-py")
    job.start_averager(["--min-workers", "2", "--rounds", "10", "--interval", "4", "--curve-public-key", server_pub,
                        "--curve-secret-key", server_sec, "--curve-allow", cpp_pub, "--curve-allow", py_pub])
    job.start_cpp_worker("worker-0", ["--curve-public-key", cpp_pub, "--curve-secret-key", cpp_sec,
                                      "--curve-server-key", server_pub])
    job.start_torch_worker("worker-1", extra=["--curve-public-key", py_pub, "--curve-secret-key", py_sec,
                                              "--curve-server-key", server_pub])
    lines, done = job.finish(["worker-0", "worker-1"])
    rounds = [l for l in lines if "members" in l]
    if len(rounds) != 10 or any(r["submissions"] != 2 for r in rounds):
        fail("the CURVE job did not average both workers in all 10 rounds")
    print(f"curve: 10 rounds with a C++ and a PyTorch worker over CURVE, test accuracy {done['test_acc']:.4f}")


def scenario_balanced(args):
    job = Job(args.prsgd, args.python, os.path.join(args.workdir, "balanced"))
    rounds = 12
    job.start_averager(["--min-workers", "2", "--rounds", str(rounds), "--interval", "8",
                        "--interval-policy", "time-balanced"])
    job.start_cpp_worker("worker-0")
    job.start_torch_worker("worker-1", extra=["--slowdown-ms", "40"])
    lines, _ = job.finish(["worker-0", "worker-1"])
    rounds_ = [l for l in lines if "members" in l]
    last = rounds_[-1]
    if len(rounds_) != rounds or last["submissions"] != 2:
        fail(f"{len(rounds_)} rounds, the last with {last['submissions']} submissions")
    if not last["interval_max"] >= 2 * last["interval_min"]:
        fail(f"the last round's intervals {last['interval_min']}..{last['interval_max']} are not balanced "
             "towards the fast worker")
    print(f"balanced: the last round's intervals {last['interval_min']}..{last['interval_max']}")


def scenario_example(args):
    job = Job(args.prsgd, args.python, os.path.join(args.workdir, "example"))
    script = os.path.join(args.examples, "pytorch", "cnn_dropout.py")
    spec = subprocess.run([args.python, script, "--print-spec"], check=True, capture_output=True,
                          text=True).stdout.strip()
    rounds = 10
    argv = ["--min-workers", "4", "--rounds", str(rounds), "--interval", "4", "--idle-rounds", "0",
            "--checkpoint-dir", os.path.join(job.dir, "ckpt"), "--checkpoint-every", "1"]
    spec_job = ["--model", spec, "--batch", "64", "--lr", "0.05", "--seed", "7"]
    job.start_averager(argv, spec_job, "averager-1")

    def worker(name):
        return job.start(name, [args.python, script, "--averager", job.endpoint])

    for i in range(4):
        worker(f"worker-{i}")
    for i in range(4):
        job.wait_for_log(f"worker-{i}", "joined as member", 600)
    worker("worker-4")  # every shard is taken: it repeats its JOIN until one is free
    job.wait_for_round(3, 600)
    job.kill9("worker-0")
    job.wait_for_log("worker-4", "joined as member", 600)
    job.wait_for_round(6, 600)
    job.kill9("averager")
    # The same command on the same port (the one the first averager bound) and checkpoint directory.
    job.start_averager(argv + ["--listen", job.endpoint], spec_job, "averager-2")
    survivors = [f"worker-{i}" for i in range(1, 5)]
    lines, done = job.finish(survivors, "averager-2")
    if not any(l.get("event") == "resumed" for l in lines):
        fail("the restarted averager did not resume from its checkpoint:\n" + job.log("averager-2")[-3000:])
    closed = sorted(l["round"] for l in lines if "members" in l)
    if closed != list(range(rounds)):
        fail(f"rounds closed: {closed}, expected each of 0..{rounds - 1} once")
    last = [l for l in lines if "members" in l][-1]
    if last["submissions"] != 4:
        fail(f"the last round averaged {last['submissions']} workers, expected 4: not every worker rejoined")
    if done["test_acc"] < 0.6:
        fail(f"test accuracy {done['test_acc']:.4f} after {rounds} rounds (< 0.6): is the flat layout right?")
    print(f"example: {rounds} rounds through a worker kill and an averager kill, test accuracy "
          f"{done['test_acc']:.4f}")


def scenario_refused(args):
    job = Job(args.prsgd, args.python, os.path.join(args.workdir, "refused"))
    job.start_averager(["--min-workers", "2", "--rounds", "10", "--interval", "4"])
    # First the mismatched worker, alone: no round can start before the C++ workers join.
    job.start_torch_worker("torch-cnn", model="fmnist-cnn")
    status = job.wait("torch-cnn", 300)
    if status != 1:
        job.stop_all()
        fail(f"the fmnist-cnn PyTorch worker ended with status {status}, expected 1:\n" + job.log("torch-cnn"))
    out = job.log("torch-cnn").strip().splitlines()
    if len(out) != 1 or not out[0].startswith("prsgd-torch-worker: the averager refused this worker: model "
                                              "mismatch") or "fmnist-cnn" not in out[0]:
        job.stop_all()
        fail("expected one line saying the model differs, got:\n" + "\n".join(out))
    job.start_cpp_worker("worker-0")
    job.start_cpp_worker("worker-1")
    lines, _ = job.finish(["worker-0", "worker-1"])
    if "refused a JOIN" not in job.log("averager"):
        fail("the averager did not log the refusal")
    print(f"refused: {out[0]}")


# ---- --model external ---------------------------------------------------------------------------------------

EXTERNAL_TRAIN, EXTERNAL_TEST = 6000, 2000


class ExternalJob(Job):
    """A `--model external` job of examples/pytorch/cnn_dropout.py processes."""

    def __init__(self, args, name):
        super().__init__(args.prsgd, args.python, os.path.join(args.workdir, name))
        self.script = os.path.join(args.examples, "pytorch", "cnn_dropout.py")
        spec = subprocess.run([self.python, self.script, "--print-model-spec"], check=True, capture_output=True,
                              text=True).stdout
        self.spec_file = os.path.join(self.dir, "model-spec.json")
        with open(self.spec_file, "w") as f:
            f.write(spec)
        self.model_size = sum(_prod(t["shape"]) for t in json.loads(spec))

    def start_external(self, extra, name="averager", spec=True):
        size = ["--model-spec", self.spec_file] if spec else ["--model-size", str(self.model_size)]
        job = ["--model", "external", "--train-size", str(EXTERNAL_TRAIN), "--batch", "64", "--lr", "0.05",
               "--seed", "7"] + size
        self.start_averager(list(extra), job, name)

    def start_worker(self, name, extra=()):
        return self.start(name, [self.python, self.script, "--averager", self.endpoint, "--external",
                                 "--train-samples", str(EXTERNAL_TRAIN)] + list(extra))

    def start_evaluator(self, name="evaluator", extra=()):
        return self.start(name, [self.python, self.script, "--averager", self.endpoint, "--evaluator",
                                 "--test-samples", str(EXTERNAL_TEST)] + list(extra))

    def rounds(self):
        return [l for l in self.lines() if "members" in l]


def _prod(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _safetensors_names(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    return [k for k in header if k != "__metadata__"]


def scenario_external(args):
    job = ExternalJob(args, "external")
    saved = os.path.join(job.dir, "final.safetensors")
    job.start_external(["--min-workers", "2", "--epochs", "2", "--interval", "8", "--eval-every", "2",
                        "--save-model", saved])
    job.start_evaluator()
    job.wait_for_log("averager", "evaluator on connection", 120)
    job.start_worker("worker-0", ["--seed", "1"])
    job.start_worker("worker-1", ["--seed", "2"])
    lines, done = job.finish(["worker-0", "worker-1"])
    status = job.wait("evaluator", 60)
    if status != 0:
        job.stop_all()
        fail(f"the evaluator ended with status {status} (expected 0: STOP at the end of the job):\n" +
             job.log("evaluator")[-2000:])
    rounds = [l for l in lines if "members" in l]
    scored = [l for l in rounds if l.get("test_acc") is not None]
    if len(scored) < len(rounds) // 2 or rounds[-1].get("test_acc") is None:
        fail(f"{len(scored)} of {len(rounds)} rounds carry an accuracy (every second one and the last expected)")
    # prsgd.torch.Evaluator sends the mean cross-entropy beside the accuracy: every scored round has it.
    bad = [l for l in scored + [done] if not (isinstance(l.get("test_loss"), float) and
                                              math.isfinite(l["test_loss"]) and l["test_loss"] > 0)]
    if bad:
        fail(f"{len(bad)} evaluated lines without a finite positive test_loss, e.g. {bad[0]}")
    if "x̄_0 is the model of the first member" not in job.log("averager"):
        fail("the averager did not start from the first member's model:\n" + job.log("averager")[-2000:])
    if done["test_acc"] < 0.6:
        fail(f"test accuracy {done['test_acc']:.4f} after 2 epochs of {EXTERNAL_TRAIN} samples (< 0.6)")
    names = _safetensors_names(saved)
    want = [t["name"] for t in json.load(open(job.spec_file))]
    if names != want:
        fail(f"--save-model wrote tensors {names[:4]}..., expected the --model-spec names {want[:4]}...")
    print(f"external: {len(rounds)} rounds, {len(scored)} evaluated, test accuracy {done['test_acc']:.4f}, "
          f"test loss {done['test_loss']:.4f}, "
          f"model saved with {len(names)} named tensors")


def scenario_external_recovery(args):
    job = ExternalJob(args, "external-recovery")
    argv = ["--min-workers", "2", "--epochs", "2", "--interval", "8", "--eval-every", "2", "--idle-rounds", "0",
            "--checkpoint-dir", os.path.join(job.dir, "ckpt"), "--checkpoint-every", "1"]
    job.start_external(argv, "averager-1")
    job.start_evaluator()
    for i in range(2):
        job.start_worker(f"worker-{i}", ["--seed", str(i + 1)])
    for i in range(2):
        job.wait_for_log(f"worker-{i}", "joined as member", 300)
    job.start_worker("worker-2", ["--seed", "3"])  # every shard is taken: it waits for a free one
    job.wait_for_round(2, 300)
    job.kill9("worker-0")
    job.wait_for_log("worker-2", "joined as member", 300)
    job.wait_for_round(5, 300)
    job.kill9("averager")
    job.start_external(argv + ["--listen", job.endpoint], "averager-2")
    lines, done = job.finish(["worker-1", "worker-2"], "averager-2")
    if job.wait("evaluator", 60) != 0:
        job.stop_all()
        fail("the evaluator did not end with the job:\n" + job.log("evaluator")[-2000:])
    if not any(l.get("event") == "resumed" for l in lines):
        fail("the restarted averager did not resume from its checkpoint:\n" + job.log("averager-2")[-3000:])
    rounds = [l for l in lines if "members" in l]
    closed = [l["round"] for l in rounds]
    if closed != list(range(len(closed))):
        fail(f"rounds closed: {closed}, expected each of 0..{len(closed) - 1} once, in order")
    seen = {}
    for l in rounds:
        for member, epoch, begin, end in l["data"]:
            seen.setdefault(epoch, []).append((begin, end))
    for epoch in (0, 1):
        ranges = sorted(seen.get(epoch, []))
        covered = sum(e - b for b, e in ranges)
        overlaps = any(ranges[i][1] > ranges[i + 1][0] for i in range(len(ranges) - 1))
        if overlaps or covered != EXTERNAL_TRAIN:
            fail(f"epoch {epoch}: the accepted submissions consumed {covered} samples (overlapping: {overlaps}), "
                 f"expected each of the {EXTERNAL_TRAIN} once")
    late = [l for l in rounds if l["round"] > 6 and l.get("test_acc") is not None]
    if not late or done["test_acc"] is None or done["test_acc"] < 0.6:
        fail(f"after the restart the evaluator scored {len(late)} rounds, final accuracy {done['test_acc']}")
    print(f"external_recovery: {len(closed)} rounds each once through a worker and an averager kill, every sample "
          f"once per epoch, test accuracy {done['test_acc']:.4f}")


def scenario_external_refused(args):
    job = ExternalJob(args, "external-refused")
    job.start_external(["--min-workers", "1", "--rounds", "2", "--interval", "2"], spec=False)
    # A worker and an evaluator of a network with another parameter count (--model-size differs by 10).
    bad = [args.python, "-c", (
        "import sys, torch, prsgd.fmnist, prsgd.torch\n"
        "m = torch.nn.Linear(10, 1)\n"
        "ds = prsgd.fmnist.FashionMnist(split='train', limit=%d)\n"
        "w = prsgd.torch.TorchWorker(m, torch.optim.SGD(m.parameters(), lr=0.1), torch.nn.functional.mse_loss, "
        "prsgd.torch.shard_loader(ds), sys.argv[1], external=True)\n"
        "sys.exit(w.run_to_exit_status('bad-worker'))" % EXTERNAL_TRAIN), job.endpoint]
    job.start("bad-worker", bad)
    status = job.wait("bad-worker", 120)
    out = job.log("bad-worker").strip().splitlines()
    expected = f"external params={job.model_size}"
    if status != 1 or len(out) != 1 or "model mismatch" not in out[0] or expected not in out[0] or \
            "external params=11" not in out[0]:
        job.stop_all()
        fail(f"the worker with 11 parameters ended with status {status}, expected 1 and one line naming both "
             "sizes:\n" + "\n".join(out))
    bad_eval = [args.python, "-c", (
        "import sys, torch, prsgd.torch\n"
        "e = prsgd.torch.Evaluator(torch.nn.Linear(10, 1), [], sys.argv[1])\n"
        "sys.exit(e.run_to_exit_status('bad-evaluator'))"), job.endpoint]
    job.start("bad-evaluator", bad_eval)
    status = job.wait("bad-evaluator", 120)
    eval_out = job.log("bad-evaluator").strip().splitlines()
    if status != 1 or len(eval_out) != 1 or "model mismatch" not in eval_out[0]:
        job.stop_all()
        fail(f"the evaluator with 11 parameters ended with status {status}, expected 1 and one line:\n" +
             "\n".join(eval_out))
    # An evaluator that nothing answers gives up after its join timeout, in one line; one that the averager
    # answered keeps going past it and ends with the job.
    evaluator = ("import sys, prsgd\n"
                 "e = prsgd.Evaluator(sys.argv[1], lambda p: 0.5, model_fingerprint=sys.argv[2], join_timeout_ms=%d)\n"
                 "sys.exit(e.run_to_exit_status(sys.argv[3]))")
    nobody = "tcp://127.0.0.1:1"
    job.start("lost-evaluator", [args.python, "-c", evaluator % 500, nobody, "", "lost-evaluator"])
    status = job.wait("lost-evaluator", 120)
    lost_out = job.log("lost-evaluator").strip().splitlines()
    if status != 1 or lost_out != [f"lost-evaluator: no averager answered at {nobody} within 0.5 s "
                                   "(--join-timeout-ms); giving up"]:
        job.stop_all()
        fail(f"the evaluator nobody answered ended with status {status}, expected 1 and one line:\n" +
             "\n".join(lost_out))
    patient_timeout = 1.0
    started = time.monotonic()
    patient = job.start("patient-evaluator", [args.python, "-c", evaluator % (patient_timeout * 1000),
                                              job.endpoint, f"external params={job.model_size}",
                                              "patient-evaluator"])
    job.wait_for_log("averager", "connected (1 now)", 120)
    while time.monotonic() - started < 2 * patient_timeout and patient.poll() is None:
        time.sleep(0.05)
    if patient.poll() is not None:
        job.stop_all()
        fail(f"the evaluator the averager answered ended (status {patient.returncode}) before the job did:\n" +
             job.log("patient-evaluator")[-2000:])
    job.start_worker("worker-0")
    lines, done = job.finish(["worker-0"], with_accuracy=False)
    status = job.wait("patient-evaluator", 60)
    if status != 0 or "stopped after" not in job.log("patient-evaluator"):
        fail(f"the evaluator the averager answered ended with status {status}, expected 0 on STOP:\n" +
             job.log("patient-evaluator")[-2000:])
    print(f"external_refused: {out[0]}")


def _write_safetensors(path, spec, rng):
    """Writes small random F32 tensors named and shaped as `spec` (the safetensors layout, by hand)."""
    header, blobs, offset = {}, [], 0
    for t in spec:
        data = (rng.standard_normal(_prod(t["shape"])) * 0.05).astype("<f4").tobytes()
        header[t["name"]] = {"dtype": "F32", "shape": t["shape"], "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(blobs))


def scenario_external_no_evaluator(args):
    import numpy as np
    job = ExternalJob(args, "external-no-evaluator")
    init = os.path.join(job.dir, "init.safetensors")
    _write_safetensors(init, json.load(open(job.spec_file)), np.random.default_rng(3))
    job.start_external(["--min-workers", "1", "--rounds", "4", "--interval", "4", "--eval-every", "1",
                        "--init-model", init])
    job.start_worker("worker-0")
    lines, done = job.finish(["worker-0"], with_accuracy=False)
    rounds = [l for l in lines if "members" in l]
    if len(rounds) != 4 or any(l.get("test_acc") is not None for l in rounds) or done.get("test_acc") is not None:
        fail("without an evaluator every round's test_acc and the done line's must be null: " +
             json.dumps([l.get("test_acc") for l in rounds]))
    if "x̄_0 is the model of the first member" in job.log("averager"):
        fail("with --init-model the averager still took the first member's model")
    print(f"external_no_evaluator: {len(rounds)} rounds from --init-model, test_acc null throughout, job done")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--prsgd", required=True)
    p.add_argument("--python-src", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--venv")
    p.add_argument("--examples", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                                      "examples"))
    scenarios = {"install": scenario_install, "mixed": scenario_mixed, "curve": scenario_curve,
                 "balanced": scenario_balanced, "example": scenario_example, "refused": scenario_refused,
                 "external": scenario_external, "external_recovery": scenario_external_recovery,
                 "external_refused": scenario_external_refused,
                 "external_no_evaluator": scenario_external_no_evaluator}
    p.add_argument("scenario", choices=sorted(scenarios))
    args = p.parse_args()
    venv = args.venv or os.path.join(os.path.dirname(args.workdir), "venv")
    args.python = os.path.join(venv, "bin", "python")
    if args.scenario != "install" and not os.path.exists(args.python):
        fail(f"no venv at {venv}: run the install scenario first")
    scenarios[args.scenario](args)


if __name__ == "__main__":
    main()
