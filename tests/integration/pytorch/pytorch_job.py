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

usage: pytorch_job.py --prsgd PATH --python-src DIR --workdir DIR [--venv DIR] SCENARIO
The scenarios after install run the venv's python (--venv, default WORKDIR/../venv).
"""
import argparse
import json
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

    def finish(self, workers, averager="averager"):
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
        if len(done) != 1 or done[0].get("test_acc") is None:
            fail(f"no done line with a test accuracy in {self.metrics}")
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
    job.procs["worker-0"].kill()
    job.procs["worker-0"].wait()
    job.wait_for_log("worker-4", "joined as member", 600)
    job.wait_for_round(6, 600)
    job.procs["averager"].kill()
    job.procs["averager"].wait()
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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--prsgd", required=True)
    p.add_argument("--python-src", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--venv")
    p.add_argument("--examples", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                                      "examples"))
    p.add_argument("scenario", choices=["install", "mixed", "curve", "balanced", "example", "refused"])
    args = p.parse_args()
    venv = args.venv or os.path.join(os.path.dirname(args.workdir), "venv")
    args.python = os.path.join(venv, "bin", "python")
    if args.scenario != "install" and not os.path.exists(args.python):
        fail(f"no venv at {venv}: run the install scenario first")
    {"install": scenario_install, "mixed": scenario_mixed, "curve": scenario_curve,
     "balanced": scenario_balanced, "example": scenario_example, "refused": scenario_refused}[args.scenario](args)


if __name__ == "__main__":
    main()
