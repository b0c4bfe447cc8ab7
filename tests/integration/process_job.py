# SPDX-License-Identifier: Apache-2.0
"""Process bookkeeping for the Python-driven integration tests: one job's processes, their logs and the
averager's metrics file, all in one work directory.

    job = ProcessJob("/tmp/work")
    job.start("averager", [prsgd, "averager", "--listen", "tcp://127.0.0.1:*", "--endpoint-file", f, ...])
    endpoint = job.wait_for_endpoint(f, "averager", 120)

Every timeout is multiplied by PRSGD_TEST_TIME_SCALE. fail() prints one line and exits 1.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

SCALE = float(os.environ.get("PRSGD_TEST_TIME_SCALE", "1"))


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


class ProcessJob:
    def __init__(self, workdir):
        self.dir = workdir
        shutil.rmtree(workdir, ignore_errors=True)
        os.makedirs(workdir)
        self.procs = {}
        self.metrics = os.path.join(workdir, "metrics.jsonl")

    def start(self, name, argv):
        """Starts argv with stdout and stderr in WORKDIR/NAME.log."""
        log = open(os.path.join(self.dir, name + ".log"), "w")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        return self.procs[name]

    def log(self, name):
        with open(os.path.join(self.dir, name + ".log")) as f:
            return f.read()

    def wait_for_endpoint(self, endpoint_file, name, timeout):
        """Returns the endpoint process NAME wrote to endpoint_file (its whole line); fails when NAME exits
        first or the timeout passes."""
        deadline = time.monotonic() + timeout * SCALE
        while time.monotonic() < deadline:
            if os.path.exists(endpoint_file):
                with open(endpoint_file) as f:
                    text = f.read()
                if text.endswith("\n"):
                    return text.strip()
            if self.procs[name].poll() is not None:
                self.stop_all()
                fail(f"{name} exited early:\n" + self.log(name))
            time.sleep(0.05)
        self.stop_all()
        fail(f"{name} did not listen")

    def wait(self, name, timeout):
        """Returns NAME's exit status, or None when it is still running after the timeout."""
        try:
            return self.procs[name].wait(timeout=timeout * SCALE)
        except subprocess.TimeoutExpired:
            return None

    def stop_all(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()

    def lines(self):
        """The metrics file's complete JSON lines (a line still being written is left out)."""
        with open(self.metrics) as f:
            return [json.loads(l) for l in f if l.endswith("\n") and l.strip()]
