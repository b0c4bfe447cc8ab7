#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# slurm_test.sh PRSGD SOURCE_DIR: ops/slurm/prsgd.sbatch on a one-node Slurm cluster that
# ops/slurm/local-cluster starts in a scratch directory (2 CPUs, 3 tasks overcommitted): the averager
# and two workers with CURVE keys train a job of 8 rounds; the test cancels it (scancel: SIGTERM, as at a
# time limit or a preemption) once 3 rounds are in, and the same job directory submitted again resumes
# from the checkpoint and trains the rest (8 trained rounds, each round's line once). Skipped when slurm cannot start here.
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

submit() { # submit: starts the batch job of 8 rounds; prints its id
  (cd "$scratch" && sbatch --parsable --ntasks=3 --overcommit --output="$scratch/sbatch-%j.out" \
     "$src/ops/slurm/prsgd.sbatch" --job-dir "$job" --bin "$prsgd" \
     --averager "--rounds 8 --checkpoint-every 1" --worker "--log-level warn --slowdown-ms 100" \
     2>"$scratch/submit.log") || fail_job "sbatch refused the job"
}
wait_gone() { # wait_gone ID (sbatch --wait polls slowly: squeue instead)
  while [[ -n "$(squeue -h -j "$1" -o %T 2>/dev/null)" ]]; do sleep 0.5; done
}
rounds_in() { grep -c '"round":' "$job/metrics.jsonl" 2>/dev/null || true; }

id=$(submit)
until (( $(rounds_in) >= 3 )); do
  [[ -n "$(squeue -h -j "$id" -o %T 2>/dev/null)" ]] || fail_job "job $id ended before its third round"
  sleep 0.2
done
scancel "$id"
wait_gone "$id"
[[ -f "$job/keys/worker.secret" ]] || { echo "FAILED: no CURVE keys in the job directory"; exit 1; }
(( $(rounds_in) < 8 )) || fail_job "job $id finished before it was cancelled"
echo "first submission cancelled after $(rounds_in) rounds; CURVE keys in $job/keys"

id=$(submit)
wait_gone "$id"
grep -q "averager exited with status 0" "$scratch/sbatch-$id.out" || fail_job "job $id failed"
grep -q '"event":"resumed"' "$job/metrics.jsonl" || { cat "$job/metrics.jsonl"; echo "FAILED: no resumed line"; exit 1; }
trained=$(grep '"event":"done"' "$job/metrics.jsonl" | sed 's/.*"trained_rounds":\([0-9]*\).*/\1/')
[[ "$trained" -eq 8 ]] || { cat "$job/metrics.jsonl"; echo "FAILED: $trained trained rounds, expected 8"; exit 1; }
dups=$(grep -o '^{"round":[0-9]*' "$job/metrics.jsonl" | sort | uniq -d)
[[ -z "$dups" ]] || { cat "$job/metrics.jsonl"; echo "FAILED: rounds written twice: $dups"; exit 1; }
echo "second submission resumed and trained the job's 8 rounds, each line once"
