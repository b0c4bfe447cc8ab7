#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the libFuzzer targets of tests/fuzz (the fuzz preset: clang, ASan + UBSan) and runs each one for a
# while, starting from its committed seed corpus. Prints the executions each target reached; exits 1 when a
# target crashes, leaks or breaks a property, naming the reproducer file (replay it: build/fuzz/tests/fuzz/
# fuzz_<target> <file>).
#   ops/fuzz.sh [--seconds N] [--runs N] [--parallel N] [--report FILE] [target...]
#                                            fuzz each target N seconds (default 600), or until it has run
#                                            --runs inputs when that comes first; default: every target.
#                                            --parallel N: fuzz up to N targets at once (default 1).
#                                            --report FILE: also write each target's result as a row of the
#                                            table in FILE (docs/fuzzing.md)
#   ops/fuzz.sh --make-seeds [target...]     regenerate the committed seed corpora (tests/fuzz/corpus/)
#   ops/fuzz.sh --build-only [target...]     build the targets and stop (ops/test.sh builds them early)
#   ops/fuzz.sh --list                       print the target names
# New inputs the fuzzer finds go to build/fuzz/corpus/<target>/ (kept between runs, never committed by this
# script); crash reproducers to build/fuzz/artifacts/<target>/; each run's output to build/fuzz/logs/.
set -euo pipefail
cd "$(dirname "$0")/.."
targets_all=(codec envelope checkpoint safetensors npy csv)
jobs="${PRSGD_JOBS:-$(nproc)}"
seconds=600
max_runs=-1
parallel=1
make_seeds=0
build_only=0
report=""
targets=()
usage() { sed -n '3,17p' "$0" | sed 's/^# \{0,1\}//'; }
while (($#)); do
  case "$1" in
    --seconds)
      [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]*$ ]] || { echo "ops/fuzz.sh: --seconds needs a whole number >= 1" >&2; exit 2; }
      seconds="$2"; shift 2 ;;
    --runs)
      [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]*$ ]] || { echo "ops/fuzz.sh: --runs needs a whole number >= 1" >&2; exit 2; }
      max_runs="$2"; shift 2 ;;
    --parallel)
      [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]*$ ]] || { echo "ops/fuzz.sh: --parallel needs a whole number >= 1" >&2; exit 2; }
      parallel="$2"; shift 2 ;;
    --report)
      [[ $# -ge 2 && -f "$2" ]] || { echo "ops/fuzz.sh: --report needs an existing file (docs/fuzzing.md)" >&2; exit 2; }
      report="$2"; shift 2 ;;
    --make-seeds) make_seeds=1; shift ;;
    --build-only) build_only=1; shift ;;
    --list) printf '%s\n' "${targets_all[@]}"; exit 0 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "ops/fuzz.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *)
      if [[ ! " ${targets_all[*]} " =~ " $1 " ]]; then
        echo "ops/fuzz.sh: unknown target '$1' (targets: ${targets_all[*]})" >&2
        exit 2
      fi
      targets+=("$1"); shift ;;
  esac
done
((${#targets[@]})) || targets=("${targets_all[@]}")

if ! command -v clang++ >/dev/null; then
  echo "ops/fuzz.sh: clang++ not found (ops/install-deps.sh installs it)" >&2
  exit 2
fi
build=build/fuzz
cmake --preset fuzz >/dev/null
# The commit the targets are built from, marked when the sources differ from it.
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- CMakeLists.txt ops/cmake actors algorithms common runtime transport tests/fuzz \
  2>/dev/null || commit="$commit+changes"
cmake --build --preset fuzz -j "$jobs" --target "${targets[@]/#/fuzz_}"
if ((build_only)); then
  exit 0
fi
if ((make_seeds)); then
  # Each target writes its own seeds (LLVMFuzzerInitialize, from the real encoder) and exits.
  for t in "${targets[@]}"; do
    PRSGD_FUZZ_WRITE_SEEDS=tests/fuzz/corpus "$build/tests/fuzz/fuzz_$t"
  done
  exit 0
fi

# The npy and csv targets write their inputs to files: keep those in memory when /dev/shm is there.
if [[ -d /dev/shm && -w /dev/shm ]]; then
  export TMPDIR=/dev/shm
fi
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# Replaces (or appends) target $1's row in the table between the report markers of $report: executions,
# speed, corpus, result, and where the figures come from (commit, date, CPUs and load average).
write_report_row() {
  local t="$1" runs="$2" speed="$3" size="$4" seeds="$5" result="$6" took="$7"
  local date machine row
  date=$(date -u +%Y-%m-%d)
  machine="$(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg), nice $(nice)"
  row="| $t | $runs | $took | ${speed:-?} | $size found + $seeds seeds | $result | $commit | $date | $machine |"
  grep -q '^<!-- fuzz.sh report: begin -->$' "$report" && grep -q '^<!-- fuzz.sh report: end -->$' "$report" || {
    echo "ops/fuzz.sh: $report has no '<!-- fuzz.sh report: begin/end -->' markers" >&2
    return 1
  }
  ROW="$row" TARGET="$t" awk '
    /^<!-- fuzz\.sh report: begin -->$/ { inside = 1 }
    /^<!-- fuzz\.sh report: end -->$/ { if (!done) { print ENVIRON["ROW"] } inside = 0 }
    inside && index($0, "| " ENVIRON["TARGET"] " |") == 1 { print ENVIRON["ROW"]; done = 1; next }
    { print }
  ' "$report" >"$report.tmp" && mv "$report.tmp" "$report"
}

# Runs one target; its exit status goes to its log directory's <target>.status, its time to <target>.took.
fuzz_one() {
  local t="$1" corpus="$build/corpus/$1" artifacts="$build/artifacts/$1" log="$build/logs/$1.log"
  local status=0 started=$SECONDS
  mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
  # New inputs go to the first directory (the build's corpus); the committed seeds are only read.
  # -timeout: one input taking this long is reported as a hang.
  "$build/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -runs="$max_runs" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "$corpus" "tests/fuzz/corpus/$t" >"$log" 2>&1 || status=$?
  echo "$status" >"$build/logs/$t.status"
  echo $((SECONDS - started)) >"$build/logs/$t.took"
}

# Up to --parallel targets at once; the results are read in the order the targets were named.
mkdir -p "$build/logs"
for t in "${targets[@]}"; do
  rm -f "$build/logs/$t.status" "$build/logs/$t.took"
done
running=0
for t in "${targets[@]}"; do
  if ((running >= parallel)); then
    wait -n
    running=$((running - 1))
  fi
  fuzz_one "$t" &
  running=$((running + 1))
done
wait

failed=()
for t in "${targets[@]}"; do
  corpus="$build/corpus/$t" log="$build/logs/$t.log"
  # A target whose run left no status (its setup failed) counts as failed.
  status=$(cat "$build/logs/$t.status" 2>/dev/null || echo 125) took=$(cat "$build/logs/$t.took" 2>/dev/null || echo 0)
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  size=$(find "$corpus" -type f | wc -l)
  seeds=$(find "tests/fuzz/corpus/$t" -type f | wc -l)
  if ((status == 0)); then
    echo "fuzz $t: ${runs:-?} executions in ${took} s (${speed:-?}/s), $size inputs in $corpus"
    result="no crash, leak or property failure"
  else
    echo "fuzz $t: FAILED (exit $status) after ${runs:-?} executions; log $log"
    grep -E '^(==[0-9]+==ERROR|SUMMARY|fuzz property failed)|runtime error' "$log" | head -5 | sed 's/^/  /' || true
    grep -E 'Test unit written to|artifact_prefix' "$log" | sed 's/^/  /' || true
    result="FAILED: $(grep -m1 -oE 'SUMMARY: [^(]*|fuzz property failed[^(]*' "$log" | tr -d '|' || echo "exit $status")"
    failed+=("$t")
  fi
  if [[ -n "$report" ]]; then
    write_report_row "$t" "${runs:-?}" "$speed" "$size" "$seeds" "$result" "$took"
  fi
done
if ((${#failed[@]})); then
  echo "ops/fuzz.sh: ${#failed[@]} target(s) failed: ${failed[*]}" >&2
  exit 1
fi
