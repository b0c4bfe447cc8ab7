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
bin="${PRSGD_NN_BENCH:-$build/bench/algorithms/prsgd_nn_bench}"   # PRSGD_NN_BENCH: another binary, e.g. a baseline
[[ -x "$bin" ]] || { echo "missing $bin: build target prsgd_nn_bench first" >&2; exit 1; }
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1   # one thread each; torch also calls set_num_threads(1)
# glibc keeps freed memory instead of unmapping it, for both sides: PyTorch otherwise gets fresh pages for
# its large per-step tensors and pays a page fault per 4 KiB (on the AMD EPYC VM of 2026-12-04 that made
# oneDNN's reorder of conv1's output 6.5 ms of a 41 ms fmnist-cnn step; PyTorch's CPU rate 1,250-2,000 ->
# 4,900-5,700 samples/s with these). They are the mallopt() settings prsgd's own processes make
# (retain_freed_memory_for_large_frames); PRSGD_NN_MALLOC_DEFAULTS=1 measures with glibc's defaults.
if [[ "${PRSGD_NN_MALLOC_DEFAULTS:-0}" != 1 ]]; then
  export MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1073741824
fi

field() { python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['$1'])"; }
median() { python3 -c "import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))" "$@"; }

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc --all) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "glibc malloc: MALLOC_MMAP_MAX_=${MALLOC_MMAP_MAX_:-default} MALLOC_TRIM_THRESHOLD_=${MALLOC_TRIM_THRESHOLD_:-default}"
echo "torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)'), $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3)"
# Rates from wall time and from process CPU time (every thread): with more runnable jobs than cores the
# wall rate mostly measures the scheduler's share, the CPU rate the work. Ratios are of medians.
printf '%-12s %-5s %13s %13s %7s\n' model clock "prsgd samp/s" "torch samp/s" ratio
for m in $models; do
  ours=(); theirs=(); ours_cpu=(); theirs_cpu=()
  for ((r = 0; r < reps; r++)); do
    line=$("$bin" throughput "$m" "$steps")
    ours+=("$(field samples_per_s <<< "$line")"); ours_cpu+=("$(field samples_per_cpu_s <<< "$line")")
    line=$(/usr/bin/python3 "$here/torch_bench.py" throughput "$m" "$steps")
    theirs+=("$(field samples_per_s <<< "$line")"); theirs_cpu+=("$(field samples_per_cpu_s <<< "$line")")
  done
  for clock in wall cpu; do
    if [[ $clock == wall ]]; then o=("${ours[@]}"); t=("${theirs[@]}"); else o=("${ours_cpu[@]}"); t=("${theirs_cpu[@]}"); fi
    a=$(median "${o[@]}"); b=$(median "${t[@]}")
    printf '%-12s %-5s %13.1f %13.1f %7.2f   (prsgd: %s | torch: %s)\n' "$m" "$clock" "$a" "$b" \
      "$(python3 -c "print($a / $b)")" "${o[*]}" "${t[*]}"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

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
