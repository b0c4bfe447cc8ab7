#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""bench/links.counters() on a real two-host ops/netns-cluster with 100 Mbit/s tbf links: host 1 sends 2 MB
to host 2 over TCP and 1 MB to itself over loopback, and the counters show at least those bytes, in packets
and segments of a plausible size, with nothing negative. Root only (exit 77, skipped, otherwise); the hosts
are removed on exit, also when a check fails.
  links_counters_test.py SOURCE_DIR"""
import os
import subprocess
import sys

src = sys.argv[1]
sys.path.insert(0, os.path.join(src, "bench"))
import links  # noqa: E402

NETNS = os.path.join(src, "ops", "netns-cluster")
ENV = dict(os.environ, PRSGD_NETNS_PREFIX=f"lc{os.getpid() % 100000}")
PY = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
LINK_BYTES = 2_000_000
LOOP_BYTES = 1_000_000

# Host 2: listens, says so on stdout, then reads one connection to its end and prints the count.
SERVER = r'''
import socket
ls = socket.socket(); ls.bind(("10.77.0.2", 9200)); ls.listen(1)
print("ready", flush=True)
c, _ = ls.accept(); n = 0
while True:
    b = c.recv(1 << 16)
    if not b:
        break
    n += len(b)
print(n, flush=True)
'''
# Host 1: sends to host 2, then to itself over loopback, reading its own bytes back as it goes.
CLIENT = r'''
import socket, sys
s = socket.create_connection(("10.77.0.2", 9200)); s.sendall(b"x" * int(sys.argv[1])); s.close()
ls = socket.socket(); ls.bind(("127.0.0.1", 9201)); ls.listen(1)
a = socket.create_connection(("127.0.0.1", 9201)); b, _ = ls.accept()
left = int(sys.argv[2])
while left:
    k = a.send(b"y" * min(left, 1 << 16)); left -= k; got = 0
    while got < k:
        got += len(b.recv(k - got))
'''


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def main():
    if os.geteuid() != 0:
        print("SKIP: needs root (network namespaces with tbf)")
        return 77
    subprocess.run([NETNS, "up", "2", "--rate", "100mbit"], env=ENV, check=True, stdout=subprocess.DEVNULL)
    try:
        before = links.counters(NETNS, ENV, 2)
        server = subprocess.Popen([NETNS, "exec", "2", PY, "-c", SERVER], env=ENV, stdout=subprocess.PIPE, text=True)
        if server.stdout.readline().strip() != "ready":
            fail("host 2's server did not start")
        subprocess.run([NETNS, "exec", "1", PY, "-c", CLIENT, str(LINK_BYTES), str(LOOP_BYTES)], env=ENV,
                       check=True, timeout=120)
        received = server.stdout.readline().strip()
        server.wait(timeout=120)
        if received != str(LINK_BYTES):
            fail(f"host 2 received {received} bytes, expected {LINK_BYTES}")
        after = links.counters(NETNS, ENV, 2)
    finally:
        subprocess.run([NETNS, "down"], env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print("before", before)
    print("after ", after)
    d = links.since(before, after)
    if any(v < 0 for v in d.values()) or any(v < 0 for v in before.values()):
        fail(f"a counter went down or is negative: {d}")
    if not LINK_BYTES <= d["link_bytes"] <= 2 * LINK_BYTES:
        fail(f"the links sent {d['link_bytes']} bytes for {LINK_BYTES} of payload")
    # A packet at the qdisc is at most a 64 KiB GSO packet and at least one segment of the 1500-byte MTU.
    if not LINK_BYTES // 65536 <= d["link_packets"] <= 2 * LINK_BYTES // 1000:
        fail(f"{d['link_packets']} packets for {d['link_bytes']} bytes")
    if not LINK_BYTES // 65536 <= d["tcp_out_segments"]:
        fail(f"{d['tcp_out_segments']} TCP segments sent for {LINK_BYTES} bytes")
    if d["loopback_bytes"] < LOOP_BYTES:
        fail(f"loopback sent {d['loopback_bytes']} bytes, expected at least {LOOP_BYTES}")
    print("PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
