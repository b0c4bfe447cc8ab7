#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# slurm_test.sh PRSGD SOURCE_DIR: ops/slurm/prsgd.sbatch on a one-node Slurm cluster that
# ops/slurm/local-cluster starts in a scratch directory (2 CPUs, 3 tasks overcommitted): the averager
# and two workers with CURVE keys complete 4 rounds; then the same job directory submitted again with
# 8 rounds resumes from the checkpoint and finishes the other 4. Skipped when slurm cannot start here.
set -euo pipefail
prsgd=$(realpath "$1") src=$(cd "$2" && pwd)
source "$(dirname "$0")/common.sh"
need_root "slurmd"
for t in slurmctld slurmd munged sbatch; do need_tool "$t"; done
need_fmnist
cluster="$scratch/cluster"
trap '"$src/ops/slurm/local-cluster" stop "$cluster" >/dev/null 2>&1 || true; rm -rf "$scratch"' EXIT
"$src/ops/slurm/local-cluster" start "$cluster" >"$scratch/start.log" 2>&1 ||
  skip "slurm did not start here: $(tail -n 3 "$scratch/start.log" | tr '\n' ' ')"
export SLURM_CONF="$cluster/slurm.conf"
job="$scratch/job"

fail_job() {
  cat "$scratch/submit.log" "$scratch"/sbatch-*.out 2>/dev/null || true
  tail -n 20 "$job"/logs/*.log 2>/dev/null || true
  echo "FAILED: $*"
  exit 1
}

submit() { # submit ROUNDS: runs the batch job to its end (sbatch --wait polls slowly: squeue instead)
  local id state
  id=$(cd "$scratch" && sbatch --parsable --ntasks=3 --overcommit --output="$scratch/sbatch-%j.out" \
       "$src/ops/slurm/prsgd.sbatch" --job-dir "$job" --bin "$prsgd" \
       --averager "--rounds $1 --checkpoint-every 2" --worker "--log-level warn" 2>"$scratch/submit.log") ||
    fail_job "sbatch refused the job"
  while [[ -n "$(squeue -h -j "$id" -o %T 2>/dev/null)" ]]; do sleep 0.5; done
  state=$(sacct -n -X -j "$id" -o State 2>/dev/null | tr -d ' ' || true)
  [[ -z "$state" || "$state" == COMPLETED ]] || fail_job "job $id of $1 rounds ended $state"
  grep -q "averager exited with status 0" "$scratch/sbatch-$id.out" || fail_job "job $id of $1 rounds failed"
}

submit 4
rounds=$(grep -c '"round":' "$job/metrics.jsonl")
[[ "$rounds" -eq 4 ]] || { cat "$job/metrics.jsonl"; echo "FAILED: $rounds rounds, expected 4"; exit 1; }
[[ -f "$job/keys/worker.secret" ]] || { echo "FAILED: no CURVE keys in the job directory"; exit 1; }
echo "first submission: 4 rounds, CURVE keys in $job/keys"

submit 8
grep -q '"event":"resumed"' "$job/metrics.jsonl" || { cat "$job/metrics.jsonl"; echo "FAILED: no resumed line"; exit 1; }
last=$(grep '"round":' "$job/metrics.jsonl" | tail -n 1 | sed 's/.*"round":\([0-9]*\).*/\1/')
[[ "$last" -eq 7 ]] || { cat "$job/metrics.jsonl"; echo "FAILED: last round $last, expected 7"; exit 1; }
echo "second submission resumed and ran to round 7"
