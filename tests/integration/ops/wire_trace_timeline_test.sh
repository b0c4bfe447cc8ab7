#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The wire trace end to end: a sharded `prsgd local` job (averager, two shard owners, two workers, all real
# processes on loopback) runs with PRSGD_WIRE_TRACE set, every role writes its lines to the one file, and
# bench/vs_gloo/timeline splits the job's rounds into phases in the order they happen. A file that is not a
# trace is refused with one line.
#   wire_trace_timeline_test.sh PRSGD_BINARY SOURCE_DIR
set -uo pipefail
bin="${1:?prsgd binary}"
src="${2:?source dir}"
py=python3
[[ -x /usr/bin/python3 ]] && py=/usr/bin/python3
tmp="$(mktemp -d "${TMPDIR:-/tmp}/prsgd-wire-trace.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: $*" >&2
  tail -n 20 "$tmp/job.txt" >&2 2>/dev/null
  exit 1
}

PRSGD_WIRE_TRACE="$tmp/trace" "$bin" local --topology sharded --workers 2 --model fmnist-mlp --epochs 0 \
  --rounds 6 --interval 4 --progress off --log-dir "$tmp/logs" >"$tmp/job.txt" 2>&1 || fail "the job failed"
[[ -s "$tmp/trace" ]] || fail "no trace written"

# time pid node tx|rx peer bytes frames head: every line whole, every role present.
awk 'NF != 8 || ($4 != "tx" && $4 != "rx") {print "bad line " NR ": " $0; bad = 1} END {exit bad}' "$tmp/trace" ||
  fail "malformed trace lines"
for role in averager shard-0 shard-1 worker-; do
  grep -q " $role" "$tmp/trace" || fail "no line from $role"
done

"$py" "$src/bench/vs_gloo/timeline" "$tmp/trace" --skip 0 --json >"$tmp/rounds.jsonl" || fail "timeline failed"
"$py" - "$tmp/rounds.jsonl" <<'PY' || fail "timeline's rounds"
import json, math, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
assert len(rows) >= 4, f"{len(rows)} rounds analysed, expected at least 4 of 6"
for r in rows:
    seq = [r["done_first"], r["done_last"], r["in"], r["order"], r["out"]]
    assert all(math.isfinite(x) and x >= 0 for x in seq), r
    assert seq == sorted(seq), f"phases out of order: {r}"
    assert r["upload"] >= 0 and r["decide"] >= 0 and r["download"] >= 0, r
print(f"{len(rows)} rounds in order")
PY

echo "not a trace" >"$tmp/garbage"
out="$("$py" "$src/bench/vs_gloo/timeline" "$tmp/garbage" 2>&1)" && fail "timeline accepted a file that is not a trace"
[[ "$out" == "timeline: $tmp/garbage:1: not a wire-trace line" ]] || fail "unexpected message: $out"
echo "PASS"
