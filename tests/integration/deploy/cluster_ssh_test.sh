#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# cluster_ssh_test.sh BUILD_DIR SOURCE_DIR: ops/cluster over real ssh on three network-namespace hosts
# (ops/netns-cluster), each running its own sshd that this test starts from a scratch directory (its own
# host key, client key, authorized_keys and config; nothing in /etc is read or written). The launcher runs
# inside host 1, as on a login node, and reaches every host, itself included, through ssh. The job file
# ships this build's install tree, generated CURVE keys (no --insecure) and Fashion-MNIST to per-host
# directories, then:
#   up      averager on h1, a worker on h2 and one on h3; each joined before "started"
#   status  every process runs; the averager's Prometheus endpoint, read on h1, reports 2 members
#   logs    fetched over ssh
#   scale 3 a third worker (on h2) joins: the averager reports 3 members; scale 2: it leaves (status 3)
#   stop    the workers leave (status 3), the averager checkpoints (status 3, checkpoint on h1)
#   down    the copies are removed from every host, the logs stay
#   a worker that cannot start fails `up` with the end of its log, and nothing is left running.
# Needs root (namespaces), openssh-server and python3-yaml; skipped otherwise.
set -euo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
source "$(dirname "$0")/common.sh"
need_root "network namespaces"
need_tool ip
need_tool ssh
[[ -x /usr/sbin/sshd ]] || skip "sshd not installed (apt-get install openssh-server)"
python3 -c 'import yaml' 2>/dev/null || skip "python3-yaml not installed"
need_fmnist
scale_s() { python3 -c "import sys; print(int(float(sys.argv[1]) * float('${PRSGD_TEST_TIME_SCALE:-1}')))" "$1"; }

export PRSGD_NETNS_PREFIX="cs$(($$ % 100000))"
netns="$src/ops/netns-cluster"
sshd_pids=()
cleanup() {
  local rc=$?
  # Whatever a failed step left: the job, the sshds, the namespaces (netns-cluster down also ends any
  # process still inside them), the scratch directory.
  if [[ -f "$scratch/run/state" ]]; then
    "$netns" exec 1 "$src/ops/cluster" down --run-dir "$scratch/run" --timeout 2 >/dev/null 2>&1 || true
  fi
  local p
  for p in "${sshd_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  "$netns" down >/dev/null 2>&1 || true
  rm -rf "$scratch"
  exit "$rc"
}
trap cleanup EXIT
fail() {
  echo "FAILED: $*"
  for f in "$scratch"/hosts/h*/*.log; do [[ -f "$f" ]] && { echo "--- $f"; tail -n 15 "$f"; }; done
  exit 1
}

cmake --install "$build" --prefix "$scratch/install" >/dev/null
"$netns" up 3 >/dev/null || skip "cannot create network namespaces here"

# --- the test's own sshd on each host --------------------------------------------------------------
ssh_dir="$scratch/ssh"
mkdir -p "$ssh_dir" /run/sshd  # sshd's privilege separation directory (Debian's path, compiled in)
ssh-keygen -q -t ed25519 -N '' -f "$ssh_dir/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$ssh_dir/client_key"
cp "$ssh_dir/client_key.pub" "$ssh_dir/authorized_keys"
: >"$ssh_dir/known_hosts"
: >"$ssh_dir/config"
for h in 1 2 3; do
  addr=$("$netns" addr "$h")
  cat >"$ssh_dir/sshd-h$h.conf" <<EOF
ListenAddress $addr:22
HostKey $ssh_dir/host_key
PidFile $ssh_dir/sshd-h$h.pid
AuthorizedKeysFile $ssh_dir/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
LogLevel ERROR
# bash sources ~/.bashrc for every command sshd runs (SSH_CLIENT is set) unless SHLVL says it is nested.
# The test's hosts share this machine's home directory: its shell start-up files (a version manager's
# rehash lock, say) would cost every ssh command of the test, and they are not what the test checks.
SetEnv SHLVL=1
EOF
  echo "$addr $(cut -d' ' -f1,2 "$ssh_dir/host_key.pub")" >>"$ssh_dir/known_hosts"
  cat >>"$ssh_dir/config" <<EOF
Host h$h
  HostName $addr
  User root
  IdentityFile $ssh_dir/client_key
  IdentitiesOnly yes
  UserKnownHostsFile $ssh_dir/known_hosts
  StrictHostKeyChecking yes
  ConnectTimeout 10
EOF
  "$netns" exec "$h" /usr/sbin/sshd -D -f "$ssh_dir/sshd-h$h.conf" -E "$ssh_dir/sshd-h$h.log" &
  sshd_pids+=("$!")
done
deadline=$((SECONDS + $(scale_s 30)))
for h in 1 2 3; do
  until "$netns" exec 1 ssh -F "$ssh_dir/config" -o BatchMode=yes "h$h" true 2>/dev/null; do
    ((SECONDS < deadline)) || { cat "$ssh_dir"/sshd-h*.log; fail "sshd on h$h does not answer"; }
    sleep 0.2
  done
done

# --- the job ---------------------------------------------------------------------------------------
cat >"$scratch/job.yaml" <<EOF
run-dir: run
install: install
data: ${PRSGD_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
keys: generate
metrics-port: 9400
max-workers: 3
ssh-options: [-F, $ssh_dir/config]
hosts:
  h1: {address: $("$netns" addr 1), dir: $scratch/hosts/h1}
  h2: {address: $("$netns" addr 2), dir: $scratch/hosts/h2}
  h3: {address: $("$netns" addr 3), dir: $scratch/hosts/h3}
averager:
  host: h1
  args: [--model, fmnist-mlp, --rounds, "5000", --checkpoint-dir, $scratch/hosts/h1/checkpoints]
workers:
  - {host: h2, args: [--slowdown-ms, "20"]}
  - {host: h3, args: [--slowdown-ms, "20"]}
EOF
cluster() { "$netns" exec 1 "$src/ops/cluster" "$@"; }
in_run() { cluster "$@" --run-dir "$scratch/run"; }

out=$(cluster up "$scratch/job.yaml" --start-timeout "$(scale_s 120)" 2>&1) || { echo "$out"; fail "up"; }
echo "$out"
for name in averager worker-0 worker-1; do
  grep -q "started $name on h" <<<"$out" || fail "no 'started $name'"
done
for h in 1 2 3; do
  [[ -x "$scratch/hosts/h$h/ship/bin/prsgd" ]] || fail "prsgd was not copied to h$h"
  [[ -n "$(ls -A "$scratch/hosts/h$h/ship/fashion-mnist" 2>/dev/null)" ]] || fail "the data was not copied to h$h"
done
[[ -f "$scratch/hosts/h1/ship/keys/averager.secret" && ! -f "$scratch/hosts/h2/ship/keys/averager.secret" ]] ||
  fail "the averager's secret key belongs on h1 only"
[[ -f "$scratch/hosts/h2/ship/keys/worker-h2.secret" && ! -f "$scratch/hosts/h2/ship/keys/worker-h3.secret" ]] ||
  fail "each worker host gets only its own secret key"
avg_cmd=$(cat "$scratch/run/averager.cmd")
grep -q -- "--curve-secret-key" <<<"$avg_cmd" || fail "the averager runs without CURVE keys: $avg_cmd"
grep -q -- "--insecure" <<<"$avg_cmd" && fail "the averager runs --insecure"
grep -q "worker joins as member" "$scratch/hosts/h1/averager.log" || fail "the averager logged no member"

# status asks the averager: wait until a round with both workers has closed.
members_are() { # members_are N: status reports N members and every process running
  local deadline=$((SECONDS + $(scale_s 120))) st
  while :; do
    st=$(in_run status 2>&1) && grep -q "round [1-9][0-9]* of 5000, $1 members" <<<"$st" && return 0
    ((SECONDS < deadline)) || { echo "$st"; return 1; }
    sleep 0.5
  done
}
members_are 2 || fail "status did not report 2 members"
st=$(in_run status)
echo "$st"
[[ $(grep -c " running" <<<"$st") == 3 ]] || fail "status: not 3 running"

logs=$(in_run logs worker-1 --lines 200)
grep -q "joined as member" <<<"$logs" || { echo "$logs"; fail "logs did not fetch worker-1's log"; }

out=$(in_run scale 3 2>&1) || { echo "$out"; fail "scale 3"; }
echo "$out"
grep -q "started worker-2 on h2" <<<"$out" || fail "scale 3 did not start worker-2 on h2"
members_are 3 || fail "status did not report 3 members after scale 3"
out=$(in_run scale 2 2>&1) || { echo "$out"; fail "scale 2"; }
echo "$out"
grep -q "worker-2 left (status 3)" <<<"$out" || fail "worker-2 did not leave with status 3"

out=$(in_run stop 2>&1) || { echo "$out"; fail "stop"; }
echo "$out"
for name in worker-0 worker-1 averager; do
  grep -q "$name exited with status 3 (stopped on request)" <<<"$out" || fail "stop: $name not stopped on request"
done
grep -q "checkpointing and exiting" "$scratch/hosts/h1/averager.log" || fail "the averager did not checkpoint"
ls "$scratch/hosts/h1/checkpoints" | grep -q . || fail "no checkpoint on h1"

out=$(in_run down 2>&1) || { echo "$out"; fail "down"; }
for h in 1 2 3; do
  [[ ! -e "$scratch/hosts/h$h/ship" ]] || fail "down left the copies on h$h"
done
[[ -f "$scratch/hosts/h2/worker-0.log" ]] || fail "down removed the logs"

# --- a worker that cannot start ----------------------------------------------------------------------
sed -i 's/- {host: h3, args: \[--slowdown-ms, "20"\]}/- {host: h3, args: [--no-such-option]}/' "$scratch/job.yaml"
grep -q -- --no-such-option "$scratch/job.yaml" || fail "test setup: the job file was not changed"
if out=$(cluster up "$scratch/job.yaml" --start-timeout "$(scale_s 120)" 2>&1); then
  echo "$out"
  fail "up succeeded with a worker that cannot start"
fi
echo "$out"
grep -q "worker-1 on h3 exited during its start (status 2)" <<<"$out" || fail "no failed-start report"
grep -q -- "--no-such-option" <<<"$out" || fail "the report lacks the end of the worker's log"
for h in 1 2 3; do
  [[ -z "$(ip netns pids "$PRSGD_NETNS_PREFIX-h$h" | xargs -r ps -o comm= -p | grep prsgd)" ]] ||
    fail "a prsgd process still runs on h$h after the failed up"
done
echo "PASSED"
