#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's test command: installs dependencies, checks layering, documentation links and the C++
# formatting (.clang-format), builds and runs the unit and integration tests twice (Release with GCC and
# -Werror, then ASan+UBSan with clang and -Werror, which leaves a few tests to the Release run, see
# CONTRIBUTING.md; each build after the first runs beside the previous suite at the lowest priority),
# builds a consumer project against the installed package, and fuzzes the decoders that need no library
# briefly (ops/fuzz.sh). Prints ctest's summaries.
#   ops/test.sh          the suite CI runs (about 33 minutes on an idle 2-core machine)
#   ops/test.sh --full   also the whole suite under ThreadSanitizer (the tsan preset; about as long again),
#                        the container image built from source, the .deb installed in a container,
#                        five minutes of fuzzing per target and the seeded kill -9 recovery schedule over
#                        8 seeds instead of 3
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${PRSGD_JOBS:-$(nproc)}"
full=0
# The default run fuzzes the targets that compile only their decoder (the training codec, the checkpoint
# and safetensors readers), all three at once for 22 s (on two cores about 15 s of CPU each); --full fuzzes
# all six for 300 s each, one after another.
fuzz_seconds=22
fuzz_quick=(codec checkpoint safetensors)
for arg in "$@"; do
  case "$arg" in
    --full) full=1 ;;
    -h|--help) sed -n '3,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "ops/test.sh: unknown argument '$arg' (use --full or --help)" >&2; exit 2 ;;
  esac
done

# Each phase's header names the time since the script started, so a CI log shows where the time goes.
phase() { printf '=== %s (at %d:%02d) ===\n' "$1" $((SECONDS / 60)) $((SECONDS % 60)); }

phase "dependencies; layering, links and formatting checks"
ops/install-deps.sh
ops/ci/check_deps.sh
python3 ops/ci/check_links.py
ops/ci/check_format.sh

# While a suite runs, its tests leave much of the CPU idle (they wait on sockets, child processes and
# training rounds), so the next build runs beside it at the lowest priority (nice 19) and gets only that
# idle time; the tests keep the CPU whenever they want it. A background build's output goes to a log file,
# whose last lines are printed if it fails.
bg_pid="" bg_log="" bg_name=""
start_background() {
  bg_name="$1" bg_log="$2"
  shift 2
  # Its own process group, so that an early exit stops the whole build (cmake, ninja and the compilers).
  setsid nice -n 19 "$@" >"$bg_log" 2>&1 &
  bg_pid=$!
}
finish_background() {
  local status=0
  wait "$bg_pid" || status=$?
  bg_pid=""
  if ((status != 0)); then
    echo "ops/test.sh: the $bg_name failed (exit $status); the end of $bg_log:" >&2
    tail -n 60 "$bg_log" >&2
    exit 1
  fi
  echo "$bg_name: done (log $bg_log)"
}
stop_background() {
  if [[ -n "$bg_pid" ]]; then
    kill -- "-$bg_pid" 2>/dev/null || true
    wait "$bg_pid" 2>/dev/null || true
  fi
}
trap stop_background EXIT
mkdir -p build

# Runs a test preset (extra arguments go to ctest). When tests fail, the run ends with their failure
# messages (GoogleTest's failures with the lines after them and their traces, sanitizer reports), so the
# end of a CI log says what went wrong; the whole output is in build/<preset>-suite.log.
run_suite() {
  local preset="$1" status=0
  shift
  ctest --preset "$preset" "$@" 2>&1 | tee "build/$preset-suite.log" || status=$?
  if ((status != 0)); then
    echo "ops/test.sh: the $preset suite failed (exit $status); its failure messages:" >&2
    awk '/: Failure$/ {n = 8} /^Google Test trace:/ {n = 3} /(Address|Undefined|Thread|Leak)Sanitizer|runtime error:/ {n = 12}
         n > 0 {print; n--}' "build/$preset-suite.log" | tail -n 80 >&2
    exit "$status"
  fi
}

phase "release build (-Werror)"
cmake --preset ci-release >/dev/null
cmake --build --preset ci-release -j "$jobs"

phase "release suite; the ASan + UBSan build beside it"
cmake --preset ci >/dev/null
start_background "ASan + UBSan build" build/ci-build.log cmake --build --preset ci -j "$jobs"
run_suite ci-release -j "$jobs"

phase "install + find_package(prsgd) consumer"
ops/ci/check_consumer.sh build/ci-release build/install build/consumer
finish_background

phase "ASan + UBSan suite; the fuzz targets' build beside it"
start_background "fuzz targets' build" build/fuzz-build.log ops/fuzz.sh --build-only "${fuzz_quick[@]}"
run_suite ci -j "$jobs"
finish_background

phase "fuzz targets ${fuzz_quick[*]}, ${fuzz_seconds} s at once (clang, ASan + UBSan)"
ops/fuzz.sh --seconds "$fuzz_seconds" --parallel "${#fuzz_quick[@]}" "${fuzz_quick[@]}"

if ((full)); then
  phase "container image from source; the .deb installed in a container (docs/deployment.md)"
  ops/container/build --tag localhost/prsgd:full-test
  ops/container/smoke --image localhost/prsgd:full-test
  rm -rf build/package
  cpack -G DEB --config build/ci-release/CPackConfig.cmake -B build/package >/dev/null
  ops/container/deb-install-test build/package/prsgd_*.deb

  phase "fuzz targets, 300 s each"
  ops/fuzz.sh --seconds 300

  phase "seeded kill -9 recovery schedule, 8 seeds"
  PRSGD_RECOVERY_SEEDS=8 run_suite ci-release -R RecoveryTest.SeededKillSchedule

  phase "ThreadSanitizer build"
  cmake --preset tsan >/dev/null
  cmake --build --preset tsan -j "$jobs"
  run_suite tsan -j "$jobs"
fi
printf "ops/test.sh: passed in %d:%02d\n" $((SECONDS / 60)) $((SECONDS % 60))
