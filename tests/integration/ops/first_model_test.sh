#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A fresh job does not send x̄_0 to workers that built it themselves: in a star `prsgd local` job (real
# processes on loopback) every worker's first RESTART comes without a model, only confirming the one the
# worker built from the job's seed, and every later RESTART carries x̄ whole; the job trains to the end.
# (The sharded job's slices are checked in ring_gather_test.sh.)
#   first_model_test.sh PRSGD_BINARY SOURCE_DIR
set -uo pipefail
bin="${1:?prsgd binary}"
src="${2:?source dir}"
py=python3
[[ -x /usr/bin/python3 ]] && py=/usr/bin/python3
tmp="$(mktemp -d "${TMPDIR:-/tmp}/prsgd-first-model.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: $*" >&2
  tail -n 20 "$tmp/job.txt" >&2 2>/dev/null
  exit 1
}

rounds=4
PRSGD_WIRE_TRACE="$tmp/trace" "$bin" local --workers 3 --model fmnist-mlp --epochs 0 --rounds "$rounds" \
  --interval 2 --progress off --log-dir "$tmp/logs" --metrics-jsonl "$tmp/metrics.jsonl" >"$tmp/job.txt" 2>&1 ||
  fail "the job failed"

"$py" - "$tmp/trace" "$tmp/metrics.jsonl" "$rounds" "$src" <<'PY' || fail "the RESTARTs"
import collections, importlib.machinery, json, os, sys
trace, metrics, rounds, src = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
timeline = importlib.machinery.SourceFileLoader("timeline", os.path.join(src, "bench/vs_gloo/timeline")).load_module()
RESTART = 6
model_bytes = 535818 * 4  # fmnist-mlp in f32
restarts = collections.defaultdict(list)  # worker pid -> bytes of each RESTART it received, in order
for e in timeline.parse(trace):
    if e["node"].startswith("worker-") and e["dir"] == "rx" and e["type"] == RESTART:
        restarts[e["pid"]].append(e["bytes"])
assert len(restarts) == 3, f"{len(restarts)} workers got RESTARTs"
for pid, sizes in restarts.items():
    assert len(sizes) == rounds, f"worker {pid}: {len(sizes)} RESTARTs, expected {rounds}"
    assert sizes[0] < 512, f"worker {pid}: the first RESTART has {sizes[0]} bytes: x̄_0 was sent"
    assert all(b > model_bytes for b in sizes[1:]), f"worker {pid}: RESTART sizes {sizes}"
lines = [json.loads(line) for line in open(metrics)]
done = [d for d in lines if d.get("event") == "done"]
assert done and done[0]["rounds"] == rounds, f"the job did not run its {rounds} rounds: {done}"
print(f"3 workers: x̄_0 confirmed, then {rounds - 1} RESTARTs with x̄ each")
PY
echo "PASS"
