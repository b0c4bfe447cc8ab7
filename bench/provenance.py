# SPDX-License-Identifier: Apache-2.0
"""What the benchmark scripts write under their results: the commit measured and the machine it ran on."""
import datetime
import os
import platform
import subprocess


def commit(root):
    """The checkout's HEAD (12 hex digits), marked when tracked files had uncommitted changes."""
    try:
        c = subprocess.run(["git", "-C", root, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                           check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return c + (" (tree had uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine():
    """Cores, CPU model, memory, kernel and the load average now."""
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    mem = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal"))
    load = " ".join(open("/proc/loadavg").read().split()[:3])
    return (f"{os.cpu_count()} cores ({cpu}), {mem / 1048576:.0f} GiB, kernel {platform.release()}, "
            f"load average {load} at the start")


def now_utc():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
