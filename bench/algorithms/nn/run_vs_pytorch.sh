#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs prsgd_nn_bench and torch_bench.py side by side, alternating, and prints medians and ratios.
#   bench/algorithms/nn/run_vs_pytorch.sh [build-dir] [reps] [steps]        training throughput
#   PRSGD_NN_ACCURACY=1 bench/algorithms/nn/run_vs_pytorch.sh [build-dir]   + 3-epoch accuracy and peak RSS
# Models: $PRSGD_NN_MODELS (default "fmnist-mlp fmnist-cnn"). Needs ops/install-deps.sh --bench.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-build/release}"
reps="${2:-5}"
steps="${3:-200}"
models="${PRSGD_NN_MODELS:-fmnist-mlp fmnist-cnn}"
bin="$build/bench/algorithms/prsgd_nn_bench"
[[ -x "$bin" ]] || { echo "missing $bin: build target prsgd_nn_bench first" >&2; exit 1; }
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1   # one thread each; torch also calls set_num_threads(1)

field() { python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['$1'])"; }
median() { python3 -c "import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))" "$@"; }

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc --all) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)'), $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3)"
printf '%-16s %14s %14s %8s\n' model "prsgd samp/s" "torch samp/s" ratio
for m in $models; do
  ours=(); theirs=()
  for ((r = 0; r < reps; r++)); do
    ours+=("$("$bin" throughput "$m" "$steps" | field samples_per_s)")
    theirs+=("$(/usr/bin/python3 "$here/torch_bench.py" throughput "$m" "$steps" | field samples_per_s)")
  done
  a=$(median "${ours[@]}"); b=$(median "${theirs[@]}")
  printf '%-16s %14.1f %14.1f %8.2f   (prsgd runs: %s | torch runs: %s)\n' "$m" "$a" "$b" \
    "$(python3 -c "print($a / $b)")" "${ours[*]}" "${theirs[*]}"
done

if [[ "${PRSGD_NN_ACCURACY:-0}" == 1 ]]; then
  echo "3 epochs, batch 64, lr 0.05, momentum 0.9, one thread (peak RSS from /usr/bin/time -v):"
  for m in $models; do
    for impl in prsgd torch; do
      if [[ $impl == prsgd ]]; then cmd=("$bin" train "$m" 3); else cmd=(/usr/bin/python3 "$here/torch_bench.py" train "$m" 3); fi
      out=$(/usr/bin/time -v "${cmd[@]}" 2> /tmp/run_vs_pytorch.time)
      rss=$(awk -F: '/Maximum resident/ {print $2/1024}' /tmp/run_vs_pytorch.time)
      echo "$out" | python3 -c "import json,sys; d=json.loads(sys.stdin.readline()); print(f\"{d['model']:16s} {'$impl':6s} test acc {d['test_accuracy']*100:.2f}%  loss {d['test_loss']:.4f}  train {d['train_seconds']}s  peak RSS {float('$rss'):.0f} MiB\")"
    done
  done
fi
