#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Heartbeats behind a model on a slow link (docs/decisions/0024): an averager and one worker on two
# network-namespace hosts whose links tc tbf limits to 2 Mbit/s, fmnist-mlp (2.1 MB a model, about 9 s per
# transfer) and a heartbeat timeout of 1.5 s, far shorter than a transfer.
#   1. With the default --slowest-link-mbit 1 the job finishes both rounds with the worker in each and the
#      averager never times it out.
#   2. Control: with --slowest-link-mbit 100000 (no allowance to speak of) a side times the other out while a
#      model is in flight (the averager removes the worker during its MODEL, or the worker, whose first RESTART
#      only confirms the model it built, takes the averager for gone while its MODEL fills the uplink), so the
#      setup really is one where heartbeats wait behind models.
# Root only (exit 77, skipped, otherwise). ops/netns-cluster tears its hosts down on exit, failure or signal;
# the trap below removes them too if this script is killed in between.
#   slow_link_heartbeat_test.sh PRSGD_BINARY SOURCE_DIR [TIME_SCALE]
set -uo pipefail
bin="${1:?prsgd binary}"
src="${2:?source dir}"
scale="${3:-${PRSGD_TEST_TIME_SCALE:-1}}"
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
  echo "SKIP: needs root, ip and tc (network namespaces with tbf)"
  exit 77
fi
export PRSGD_NETNS_PREFIX="hb$(($$ % 100000))"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/prsgd-slow-link.XXXXXX")"
cleanup() {
  "$src/ops/netns-cluster" down >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in "$tmp"/logs-*/h*.log; do
    [[ -f "$f" ]] && { echo "--- $f (last 30 lines)" >&2; tail -n 30 "$f" >&2; }
  done
  exit 1
}

"$bin" keygen --out-dir "$tmp/keys" --name averager >/dev/null || fail "keygen"
"$bin" keygen --out-dir "$tmp/keys" --name worker >/dev/null || fail "keygen"
k="$tmp/keys"
live=(--heartbeat-ms 200 --heartbeat-timeout-ms 1500)

# run NAME SLOWEST_MBIT LIMIT_S: the job on two hosts; the averager's status (124 when LIMIT_S ran out).
run() {
  local name="$1" mbit="$2" limit="$3"
  PRSGD_NETNS_LOG_DIR="$tmp/logs-$name" timeout --signal=TERM "$((limit * scale))" \
    "$src/ops/netns-cluster" run 2 --rate 2mbit --grace 30 -- \
    "$bin" averager --listen 'tcp://{addr}:7500' --model fmnist-mlp --rounds 2 --min-workers 1 --interval 1 \
    "${live[@]}" --slowest-link-mbit "$mbit" --metrics-jsonl "$tmp/$name.jsonl" --progress off \
    --curve-public-key "$k/averager.public" --curve-secret-key "$k/averager.secret" \
    --curve-allow "$k/worker.public" -- \
    "$bin" worker --averager 'tcp://{averager}:7500' --model fmnist-mlp "${live[@]}" --slowest-link-mbit "$mbit" \
    --progress off --curve-public-key "$k/worker.public" --curve-secret-key "$k/worker.secret" \
    --curve-server-key "$k/averager.public" >"$tmp/$name.out" 2>&1
}

st=0
run kept 1 240 || st=$?
((st == 0)) || { cat "$tmp/kept.out" >&2; fail "the job on the slow link exited with status $st"; }
grep -q 'heartbeat timeout' "$tmp/logs-kept/h1.log" && fail "the averager timed the worker out"
rounds="$(grep -c '^{"round":' "$tmp/kept.jsonl")"
[[ "$rounds" == 2 ]] || fail "$rounds round lines in the metrics, expected 2"
grep '^{"round":' "$tmp/kept.jsonl" | grep -qv '"submissions":1[,}]' && fail "a round closed without the worker"

# The control: the same job without the allowance. It need not finish (it stalls as peers rejoin), so it gets
# 45 s: one model takes about 9 s on this link.
st=0
run control 100000 45 || st=$?
grep -q 'heartbeat timeout' "$tmp/logs-control/h1.log" || grep -q 'averager silent' "$tmp/logs-control/h2.log" ||
  fail "control: no timeout without the allowance (status $st): the link is not slow enough to test"
echo "ok: 2 rounds with the worker kept on a 2 Mbit/s link; without the allowance a peer timed the other out"
