#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""run_unit.py ROOT UNIT [INSTANCE]: runs the ExecStart= of a systemd unit without systemd.

ROOT is an unpacked package tree (dpkg -x) with its etc/ and var/lib/ made by systemd-sysusers and
systemd-tmpfiles --root. The unit is read from ROOT/usr/lib/systemd/system/UNIT (a template when INSTANCE
is given: %i becomes INSTANCE). What systemd would do, and this does:
  - EnvironmentFile= (a leading - : optional) read as KEY=VALUE lines, # comments, optional quotes;
  - ExecStart= split into words; $NAME becomes the words of NAME's value, ${NAME} one word;
  - WorkingDirectory= as the working directory.
The one difference, so that it runs from ROOT instead of /: every absolute path in those settings that
starts with /usr/, /etc/ or /var/lib/ is looked up under ROOT. User=, sandboxing and Restart= are not applied.
The process replaces this script (exec), so its exit status is the unit's.
"""
import os
import re
import shlex
import sys


def main():
    if len(sys.argv) not in (3, 4):
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        sys.exit(2)
    root, unit = sys.argv[1], sys.argv[2]
    instance = sys.argv[3] if len(sys.argv) == 4 else ""

    def under_root(word):
        return re.sub(r"(^|(?<==))(/usr/|/etc/|/var/lib/)", lambda m: m.group(1) + root + m.group(2), word)

    settings = {}
    with open(os.path.join(root, "usr/lib/systemd/system", unit), encoding="utf-8") as f:
        section = ""
        for line in f:
            line = line.strip()
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("["):
                section = line
                continue
            if section == "[Service]" and "=" in line:
                key, value = line.split("=", 1)
                settings.setdefault(key, []).append(value.replace("%i", instance))

    env = dict(os.environ)
    for path in settings.get("EnvironmentFile", []):
        optional = path.startswith("-")
        path = under_root(path.lstrip("-"))
        if not os.path.exists(path):
            if optional:
                continue
            sys.exit(f"run_unit: EnvironmentFile {path} does not exist")
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line or line.startswith(("#", ";")) or "=" not in line:
                    continue
                key, value = line.split("=", 1)
                value = value.strip()
                if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                    value = value[1:-1]
                env[key.strip()] = value

    if len(settings.get("ExecStart", [])) != 1:
        sys.exit(f"run_unit: {unit} needs exactly one ExecStart=")
    argv = []
    for word in shlex.split(settings["ExecStart"][0]):
        m = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if m:
            argv += env.get(m.group(1), "").split()
            continue
        word = re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: env.get(m.group(1), ""), word)
        argv.append(under_root(word))
    wd = settings.get("WorkingDirectory", [""])[-1]
    if wd:
        os.chdir(under_root(wd.lstrip("-")))
    print("run_unit: " + " ".join(shlex.quote(a) for a in argv), file=sys.stderr, flush=True)
    os.execve(argv[0], argv, env)


if __name__ == "__main__":
    main()
