#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The ring gather end to end, with real processes on loopback (CURVE on, as `prsgd local` always runs): a
# sharded job of 3 owners and 3 workers with `--gather ring` trains exactly the model the same job trains
# with `--gather direct` (byte for byte, f32 and bf16), every worker rebuilds the owners' x̄ of every
# round, and the wire trace shows the ring: after x̄ as of the start, each worker gets x̄ from one owner
# only, and each owner sends SHARD_RELAY on one connection only; x̄ as of the start is only confirmed, as
# every worker built it itself. With `--wire-compress zstd` both gathers train the same model again; on one
# host only the direct gather's slices to the workers (which name no home) travel compressed, in fewer
# bytes, while the ring's relays to an owner on the same host and the home's slices stay raw. A bad --gather
# is one line.
# With its own keys per role and CURVE allow lists, the ring runs when the owners' lists hold the server
# key, and each owner ends with one line when they do not.
#   ring_gather_test.sh PRSGD_BINARY SOURCE_DIR [TIME_SCALE]
set -uo pipefail
bin="${1:?prsgd binary}"
src="${2:?source dir}"
scale="${3:-1}"
py=python3
[[ -x /usr/bin/python3 ]] && py=/usr/bin/python3
tmp="$(mktemp -d "${TMPDIR:-/tmp}/prsgd-ring-gather.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

rounds=5
for dtype in f32 bf16; do
  for variant in direct ring direct-zstd ring-zstd; do
    gather="${variant%-zstd}"
    compress=none
    [[ "$variant" == *-zstd ]] && compress=zstd
    run="$tmp/$variant-$dtype"
    PRSGD_WIRE_TRACE="$run.trace" "$bin" local --topology sharded --gather "$gather" --workers 3 --shards 3 \
      --wire-compress "$compress" --wire-dtype "$dtype" --model fmnist-mlp --epochs 0 --rounds "$rounds" --interval 4 --seed 7 \
      --eval-every 0 --progress off --log-level debug --log-dir "$run" --save-model "$run.safetensors" \
      >"$run.txt" 2>&1 || {
      tail -n 20 "$run.txt" >&2
      fail "the $variant $dtype job failed"
    }
  done
  for variant in ring direct-zstd ring-zstd; do
    cmp -s "$tmp/direct-$dtype.safetensors" "$tmp/$variant-$dtype.safetensors" ||
      fail "$dtype: the $variant job trained another model than the direct gather"
  done
  "$py" - "$tmp" "$dtype" "$src" <<'PY' || fail "$dtype: compressed payloads"
import collections, importlib.machinery, os, sys
tmp, dtype, src = sys.argv[1], sys.argv[2], sys.argv[3]
timeline = importlib.machinery.SourceFileLoader("timeline", os.path.join(src, "bench/vs_gloo/timeline")).load_module()
SHARD_AVERAGE, SHARD_RELAY = timeline.SHARD_AVERAGE, 26
def sent(variant):  # payload-carrying messages the owners sent: type -> bytes
    out = collections.Counter()
    for e in timeline.parse(os.path.join(tmp, f"{variant}-{dtype}.trace")):
        if e["node"].startswith("shard-") and e["dir"] == "tx" and e["type"] in (SHARD_AVERAGE, SHARD_RELAY):
            out[e["type"]] += e["bytes"]
    return out
plain, packed = sent("ring"), sent("ring-zstd")
# Every owner is on this host: the relays and the home owners' slices go over loopback, uncompressed.
assert packed[SHARD_RELAY] == plain[SHARD_RELAY] > 0, f"relay bytes {plain[SHARD_RELAY]} -> {packed[SHARD_RELAY]}"
assert packed[SHARD_AVERAGE] == plain[SHARD_AVERAGE], f"home slices {plain[SHARD_AVERAGE]} -> {packed[SHARD_AVERAGE]}"
plain, packed = sent("direct"), sent("direct-zstd")
assert 0 < packed[SHARD_AVERAGE] < 0.95 * plain[SHARD_AVERAGE], f"slices {plain[SHARD_AVERAGE]} -> {packed[SHARD_AVERAGE]}"
print(f"{dtype}: the same model; compressed slices to workers without a home, raw relays on one host")
PY
  grep -q "ring gather to" "$tmp/ring-$dtype/owner-0.log" || fail "$dtype: the owners were not set up for the ring"
  ! grep -h "did not prove" "$tmp/ring-$dtype"/owner-*.log || fail "$dtype: an owner dropped a relay"

  "$py" - "$tmp/ring-$dtype" "$tmp/ring-$dtype.trace" "$rounds" "$src" <<'PY' || fail "$dtype: the ring's messages"
import collections, glob, importlib.machinery, os, re, sys
logs, trace, rounds, src = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
# The trace reader of bench/vs_gloo/timeline (a script without .py).
timeline = importlib.machinery.SourceFileLoader("timeline", os.path.join(src, "bench/vs_gloo/timeline")).load_module()
K = 3

# Every worker's x̄ of every round is the owners' (the debug checksum lines).
line = re.compile(r"x̄ of round (\d+) slice (\d+) checksum (\d+)")
def sums(path):
    return {(m[1], m[2]): m[3] for m in line.finditer(open(path).read())}
owners = sums(os.path.join(logs, "averager.log"))
for w in sorted(glob.glob(os.path.join(logs, "worker-*.log"))):
    got = sums(w)
    assert len(got) >= K * (rounds - 1), f"{w}: x̄ of {len(got) // K} rounds"
    for key, value in got.items():
        assert owners.get(key) == value, f"{w}: round {key[0]} slice {key[1]} differs from its owner's"

SHARD_AVERAGE, SHARD_RELAY = timeline.SHARD_AVERAGE, 26

averages = collections.defaultdict(collections.Counter)  # worker pid -> owner connection -> messages
relays = collections.defaultdict(set)                     # owner pid -> connections it relayed on
first = {}                                                # (worker pid, owner connection) -> bytes of the first
for e in timeline.parse(trace):
    if e["node"].startswith("worker-") and e["dir"] == "rx" and e["type"] == SHARD_AVERAGE:
        averages[e["pid"]][e["peer"]] += 1
        first.setdefault((e["pid"], e["peer"]), e["bytes"])
    if e["node"].startswith("shard-") and e["dir"] == "tx" and e["type"] == SHARD_RELAY:
        relays[e["pid"]].add(e["peer"])
assert len(relays) == K and all(len(p) == 1 for p in relays.values()), f"relays: {dict(relays)}"
assert len(averages) == 3, f"{len(averages)} workers got x̄"
for pid, by_owner in averages.items():
    counts = sorted(by_owner.values())
    # x̄ as of the start comes from every owner once; every later round's from the home owner alone.
    assert len(counts) == K and counts[:-1] == [1] * (K - 1) and counts[-1] >= 1 + K * (rounds - 1), \
        f"worker {pid}: SHARD_AVERAGEs per owner connection {dict(by_owner)}"
# The workers built x̄_0 themselves (the job's seed): every owner confirmed its slice instead of sending it.
assert len(first) == 3 * K and all(b < 512 for b in first.values()), f"first SHARD_AVERAGE bytes: {first}"
print(f"{len(averages)} workers, each fed by its home owner; {K} owners, each relaying on one connection")
PY
done

# Separate processes with their own keys: the owners reach each other with the job's server key pair, so
# with an allow list that holds it the job runs; without it each owner ends with one line after the
# heartbeat timeout, and the coordinator stops the job.
"$bin" keygen --out-dir "$tmp/keys" --name server >/dev/null || fail "keygen"
"$bin" keygen --out-dir "$tmp/keys" --name worker >/dev/null || fail "keygen"
timeout_ms=$((3000 * scale))
server_keys=(--curve-public-key "$tmp/keys/server.public" --curve-secret-key "$tmp/keys/server.secret")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
secure_job() {  # secure_job DIR OWNER_ALLOW...: a coordinator, two owners and two workers; the coordinator's status
  local dir="$1"
  shift
  mkdir -p "$dir"
  "$bin" averager --listen 'tcp://127.0.0.1:*' --endpoint-file "$dir/avg.ep" --topology sharded --shards 2 \
    --gather ring --mode restarted --model fmnist-mlp --epochs 0 --rounds 3 --interval 4 --min-workers 2 \
    --eval-every 0 --progress off --heartbeat-timeout-ms "$timeout_ms" --log-level debug "${server_keys[@]}" \
    --curve-allow "$tmp/keys/server.public" --curve-allow "$tmp/keys/worker.public" >"$dir/avg.txt" 2>&1 &
  local avg=$!
  pids+=("$avg")
  for ((i = 0; i < 600 * scale; i++)); do
    [[ -s "$dir/avg.ep" ]] && break
    kill -0 "$avg" 2>/dev/null || break
    sleep 0.1
  done
  [[ -s "$dir/avg.ep" ]] || fail "the coordinator did not announce its endpoint"
  local ep
  ep="$(cat "$dir/avg.ep")"
  for k in 0 1; do
    "$bin" averager --shard "$k/2" --coordinator "$ep" --listen 'tcp://127.0.0.1:*' --progress off \
      --heartbeat-timeout-ms "$timeout_ms" "${server_keys[@]}" "$@" >"$dir/owner-$k.txt" 2>&1 &
    pids+=($!)
  done
  for i in 0 1; do
    "$bin" worker --averager "$ep" --progress off --log-level debug --join-timeout-ms $((60000 * scale)) \
      --curve-public-key "$tmp/keys/worker.public" --curve-secret-key "$tmp/keys/worker.secret" \
      --curve-server-key "$tmp/keys/server.public" >"$dir/worker-$i.txt" 2>&1 &
    pids+=($!)
  done
  wait "$avg"
}
secure_job "$tmp/allowed" --curve-allow "$tmp/keys/worker.public" --curve-allow "$tmp/keys/server.public" ||
  fail "the CURVE ring job failed: $(tail -n 1 "$tmp/allowed/avg.txt")"
[[ "$(grep -c "x̄ of round" "$tmp/allowed/worker-0.txt")" -ge 4 ]] || fail "worker 0 did not restart from x̄"
secure_job "$tmp/denied" --curve-allow "$tmp/keys/worker.public" && fail "a job whose owners cannot reach each other ran"
grep -q "prsgd averager: shard owner 0/2: the next owner of the ring at tcp://127.0.0.1:[0-9]* did not answer within" \
  "$tmp/denied/owner-0.txt" || fail "owner 0 did not say why it ended: $(tail -n 1 "$tmp/denied/owner-0.txt")"
grep -q "^prsgd averager: shard owner [0-9]/2 at .*; the job stops" "$tmp/denied/avg.txt" ||
  fail "the coordinator did not stop the job: $(tail -n 1 "$tmp/denied/avg.txt")"
for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
pids=()

out="$("$bin" local --wire-compress zstd --workers 2 2>&1)" && fail "--wire-compress without --topology sharded was accepted"
[[ "$out" == *"--wire-compress zstd needs --topology sharded"* ]] || fail "unexpected message: $out"
out="$("$bin" local --topology sharded --gather tree --workers 2 2>&1)" && fail "--gather tree was accepted"
[[ "$out" == *"--gather"* ]] || fail "unexpected message: $out"
out="$("$bin" local --gather ring --workers 2 2>&1)" && fail "--gather ring without --topology sharded was accepted"
[[ "$out" == *"--gather ring needs --topology sharded"* ]] || fail "unexpected message: $out"
echo "PASS"
