#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Reads an ops/cluster YAML file and prints it as lines the ops/cluster shell script reads.

Output, one record per line, fields separated by single spaces, each field shell-quoted:
  set KEY VALUE            run-dir, remote-dir, install, bin, keys, data, metrics-port, max-workers
  ssh OPTION               one per ssh option
  plugin PATH              one per plugin
  proc ROLE HOST ADDR DIR [ARG ...]   one per process to start (DIR "-" = the default)
  slot worker HOST ADDR DIR [ARG ...] one per workers entry, where `scale` adds workers
A problem with the file is one line on stderr and exit status 2.
"""
import os
import shlex
import sys

import yaml

TOP_KEYS = {"run-dir", "remote-dir", "install", "bin", "keys", "data", "plugins", "metrics-port", "max-workers",
            "ssh-options", "hosts", "head", "averager", "workers"}
HOST_KEYS = {"address", "ssh", "dir"}
ROLE_KEYS = {"host", "args", "count"}


def fail(path, msg):
    print(f"cluster: {path}: {msg}", file=sys.stderr)
    sys.exit(2)


def args_of(path, where, value):
    if value is None:
        return []
    if isinstance(value, str):
        return shlex.split(value)
    if isinstance(value, list) and all(isinstance(a, (str, int, float)) for a in value):
        return [str(a) for a in value]
    fail(path, f"{where}.args must be a list of strings or one string")


def main():
    if len(sys.argv) != 2:
        print("usage: cluster-spec.py FILE.yaml", file=sys.stderr)
        sys.exit(2)
    path = sys.argv[1]
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except OSError as e:
        fail(path, f"cannot read: {e.strerror}")
    except yaml.YAMLError as e:
        fail(path, f"not valid YAML: {str(e).splitlines()[0]}")
    if not isinstance(doc, dict):
        fail(path, "must be a mapping (hosts:, averager:, workers:, ...)")
    unknown = sorted(set(doc) - TOP_KEYS)
    if unknown:
        fail(path, f"unknown key '{unknown[0]}' (known: {', '.join(sorted(TOP_KEYS))})")
    base = os.path.dirname(os.path.abspath(path))

    def local_path(key, value):
        if not isinstance(value, str) or not value:
            fail(path, f"{key} must be a path")
        return value if os.path.isabs(value) else os.path.join(base, value)

    out = []

    def emit(*fields):
        out.append(" ".join(shlex.quote(str(x)) for x in fields))

    for key in ("run-dir", "install", "data"):
        if key in doc:
            emit("set", key, local_path(key, doc[key]))
    for key in ("remote-dir", "bin"):
        if key in doc:
            if not isinstance(doc[key], str) or not doc[key]:
                fail(path, f"{key} must be a path")
            emit("set", key, doc[key])
    keys = doc.get("keys", "generate")
    if keys not in ("generate", "none"):
        keys = local_path("keys", keys)
    emit("set", "keys", keys)
    for key in ("metrics-port", "max-workers"):
        if key in doc:
            v = doc[key]
            if not isinstance(v, int) or isinstance(v, bool) or v < 0 or (key == "metrics-port" and v > 65535):
                fail(path, f"{key} must be a whole number (got {v!r})")
            emit("set", key, v)
    for opt in args_of(path, "ssh-options", doc.get("ssh-options")):
        emit("ssh", opt)
    plugins = doc.get("plugins") or []
    if not isinstance(plugins, list):
        fail(path, "plugins must be a list of paths")
    for p in plugins:
        emit("plugin", local_path("plugins", p))

    hosts = doc.get("hosts") or {}
    if not isinstance(hosts, dict):
        fail(path, "hosts must map names to {address, ssh, dir}")
    for name, h in hosts.items():
        h = h or {}
        if not isinstance(h, dict) or set(h) - HOST_KEYS:
            fail(path, f"hosts.{name}: takes address, ssh and dir")

    def host_of(where, spec):
        name = spec.get("host")
        if name is None:
            fail(path, f"{where} needs host:")
        name = str(name)
        if name in ("local", "localhost", "127.0.0.1"):
            return "local", "127.0.0.1", ""
        if name not in hosts:
            fail(path, f"{where}: host '{name}' is not under hosts:")
        h = hosts[name] or {}
        addr = str(h.get("address", name))
        target = str(h.get("ssh", name))
        return target, addr, str(h.get("dir", ""))

    def role(where, spec, role_name):
        if not isinstance(spec, dict) or set(spec) - ROLE_KEYS:
            fail(path, f"{where} takes host, args and (workers) count")
        target, addr, d = host_of(where, spec)
        a = args_of(path, where, spec.get("args"))
        for x in a:
            if any(c.isspace() for c in x):
                fail(path, f"{where}: argument '{x}' contains white space")
        count = spec.get("count", 1)
        if role_name != "worker" and "count" in spec:
            fail(path, f"{where}: count is for workers only")
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            fail(path, f"{where}.count must be a whole number >= 0")
        for _ in range(count):
            emit("proc", role_name, target, addr, d or "-", *a)
        if role_name == "worker":
            emit("slot", role_name, target, addr, d or "-", *a)

    if "head" in doc:
        role("head", doc["head"], "head")
    if "averager" not in doc:
        fail(path, "needs averager:")
    role("averager", doc["averager"], "averager")
    workers = doc.get("workers") or []
    if not isinstance(workers, list):
        fail(path, "workers must be a list of {host, count, args}")
    for i, w in enumerate(workers):
        role(f"workers[{i}]", w, "worker")
    print("\n".join(out))


if __name__ == "__main__":
    main()
