#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# --upload-buffer-kib end to end on three network-namespace hosts: the coordinator on host 1, and on hosts 2
# and 3 a shard owner and a worker each, with the ring gather. The kernel's own socket table (`ss`) must
# show the coordinator's 24 KiB on exactly the connection from host 2's worker to the owner on host 3 (the
# kernel reports SO_SNDBUF doubled: tb49152), not on the worker's connection to the owner on its own host
# nor on host 2's owner's ring connection to host 3; while the job trains rounds. A job without the option
# leaves every connection autotuned. With --wire-compress zstd, the same worker's slices to the owner on
# host 3 travel compressed and those to the owner on its own host do not, and host 2's owner compresses its
# relays to host 3's (their wire traces).
# Root only (exit 77, skipped, otherwise); the hosts are removed on exit, failure or signal.
#   upload_buffer_test.sh PRSGD_BINARY SOURCE_DIR [TIME_SCALE]
set -uo pipefail
bin="${1:?prsgd binary}"
src="${2:?source dir}"
scale="${3:-${PRSGD_TEST_TIME_SCALE:-1}}"
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null || ! command -v ss >/dev/null; then
  echo "SKIP: needs root, ip and ss (network namespaces)"
  exit 77
fi
export PRSGD_NETNS_PREFIX="ub$(($$ % 100000))"
net="$src/ops/netns-cluster"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/prsgd-upload-buffer.XXXXXX")"
pids=()
stop_all() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  pids=()
  "$net" down >/dev/null 2>&1 || true
}
trap 'stop_all; rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in "$tmp"/*/*.log; do
    [[ -f "$f" ]] && { echo "--- $f (last 20 lines)" >&2; tail -n 20 "$f" >&2; }
  done
  exit 1
}

# send_buffers PORT_ADDR: "tb" of every established connection from host 2 to ADDR:7600, one per line.
send_buffers() {
  "$net" exec 2 ss -tmnH state established dst "$1:7600" | grep -o 'tb[0-9]*' | sort
}

# job NAME [COORDINATOR OPTION...]: starts the job; returns when both of host 2's connections to host 3's
# owner (the worker's and the ring's) and the worker's to its own owner are up and a round has closed.
job() {
  local dir="$tmp/$1"
  shift
  mkdir -p "$dir"
  "$net" up 3 >/dev/null || fail "netns-cluster up"
  "$net" exec 1 "$bin" averager --listen 'tcp://10.77.0.1:7500' --insecure --topology sharded --shards 2 \
    --gather ring --min-workers 2 --model fmnist-mlp --epochs 0 --rounds 100000 --interval 4 --eval-every 0 \
    --metrics-jsonl "$dir/metrics.jsonl" --progress off "$@" >"$dir/coordinator.log" 2>&1 &
  pids+=($!)
  for h in 2 3; do
    "$net" exec "$h" env PRSGD_WIRE_TRACE="$dir/owner-$h.trace" "$bin" averager --coordinator 'tcp://10.77.0.1:7500' \
      --insecure --shard "$((h - 2))/2" --listen "tcp://10.77.0.$h:7600" --progress off >"$dir/owner-$h.log" 2>&1 &
    pids+=($!)
    "$net" exec "$h" env PRSGD_WIRE_TRACE="$dir/worker-$h.trace" "$bin" worker --averager 'tcp://10.77.0.1:7500' \
      --insecure --model fmnist-mlp --progress off >"$dir/worker-$h.log" 2>&1 &
    pids+=($!)
  done
  local i
  for ((i = 0; i < 1200 * scale; i++)); do
    if [[ "$(send_buffers 10.77.0.3 | wc -l)" -ge 2 && "$(send_buffers 10.77.0.2 | wc -l)" -ge 1 ]] &&
      grep -q '^{"round":' "$dir/metrics.jsonl" 2>/dev/null; then
      return 0
    fi
    kill -0 "${pids[0]}" 2>/dev/null || fail "$1: the coordinator exited"
    sleep 0.1
  done
  fail "$1: the connections or the first round did not come within $((120 * scale)) s"
}

job capped --upload-buffer-kib 24
to_remote="$(send_buffers 10.77.0.3)"
to_local="$(send_buffers 10.77.0.2)"
[[ "$(grep -c '^tb49152$' <<<"$to_remote")" == 1 ]] ||
  fail "host 2 -> the owner on host 3: expected one connection with tb49152 (the worker's), got: $to_remote"
[[ "$(wc -l <<<"$to_remote")" == 2 ]] || fail "host 2 -> the owner on host 3: expected 2 connections, got: $to_remote"
grep -q '^tb49152$' <<<"$to_local" && fail "the worker capped its connection to the owner on its own host"
grep -q 'shard owners, 1 on this host; send buffer to the others 24576 bytes' "$tmp/capped/worker-2.log" ||
  fail "worker 2 did not say it capped its uploads"
stop_all

# relay_bytes NAME: the largest SHARD_RELAY host 2's owner sent (a chunk of 16384 values).
relay_bytes() {
  "$py" - "$tmp/$1/owner-2.trace" "$src" <<'PY'
import importlib.machinery, os, sys
timeline = importlib.machinery.SourceFileLoader("timeline", os.path.join(sys.argv[2], "bench/vs_gloo/timeline")).load_module()
try:  # the owner may be writing its trace's last line
    print(max([e["bytes"] for e in timeline.parse(sys.argv[1]) if e["dir"] == "tx" and e["type"] == 26] or [0]))
except (OSError, ValueError, IndexError, SystemExit):
    print(0)
PY
}
# wait_relay NAME: waits until host 2's owner has sent a relay (after the first combine).
wait_relay() {
  local i
  for ((i = 0; i < 600 * scale; i++)); do
    [[ "$(relay_bytes "$1")" -gt 0 ]] && return 0
    sleep 0.1
  done
  fail "$1: host 2's owner sent no relay within $((60 * scale)) s"
}
py=python3
[[ -x /usr/bin/python3 ]] && py=/usr/bin/python3

job autotuned
wait_relay autotuned
to_remote="$(send_buffers 10.77.0.3)"
grep -q '^tb49152$' <<<"$to_remote" && fail "a job without --upload-buffer-kib capped a connection: $to_remote"
grep -q 'send buffer to the others' "$tmp/autotuned/worker-2.log" && fail "worker 2 capped without the option"
stop_all

# slice_bytes NAME: the payload-carrying SHARD_SLICEs host 2's worker sent, as "connection bytes" lines.
slice_bytes() {
  "$py" - "$tmp/$1/worker-2.trace" "$src" <<'PY'
import importlib.machinery, os, sys
timeline = importlib.machinery.SourceFileLoader("timeline", os.path.join(sys.argv[2], "bench/vs_gloo/timeline")).load_module()
for e in timeline.parse(sys.argv[1]):
    if e["dir"] == "tx" and e["type"] == timeline.SHARD_SLICE and e["bytes"] > 100000:  # half of fmnist-mlp
        print(e["peer"], e["bytes"])
PY
}
# compressed_to RUN: how many connections got slices at most 0.95 of the largest slice's bytes, of how many.
compressed_to() {
  slice_bytes "$1" | awk '{ if ($2 > max) max = $2; b[$1] = ($1 in b && b[$1] > $2) ? b[$1] : $2 }
    END { n = 0; c = 0; for (p in b) { n++; if (b[p] <= 0.95 * max) c++ } print c "/" n }'
}
job compressed --wire-compress zstd
wait_relay compressed
[[ "$(compressed_to compressed)" == "1/2" ]] ||
  fail "with --wire-compress zstd, expected the slices to one of the two owners smaller: $(slice_bytes compressed)"
grep -q 'shard owners, 1 on this host; slices to the others compressed' "$tmp/compressed/worker-2.log" ||
  fail "worker 2 did not say it compresses its uploads"
[[ "$(compressed_to autotuned)" == "0/2" ]] || fail "without compression the slices differ: $(slice_bytes autotuned)"
raw_relay="$(relay_bytes autotuned)" packed_relay="$(relay_bytes compressed)"
[[ "$raw_relay" -gt 65536 && "$packed_relay" -gt 0 && $((packed_relay * 100)) -le $((raw_relay * 95)) ]] ||
  fail "host 2's owner's relays: $raw_relay bytes raw, $packed_relay with --wire-compress zstd"
stop_all
echo "ok: only the upload to the other host's owner had the 24 KiB send buffer, and only when asked for;"
echo "ok: only the slices to the other host's owner, and the relays to it, were compressed, and only when asked for"
