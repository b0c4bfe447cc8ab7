#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's test command: installs dependencies, checks layering, builds and runs every unit and
# integration test twice (Release with -Werror, then ASan+UBSan), and builds a consumer project
# against the installed package. Prints ctest's summary for each run.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${PRSGD_JOBS:-$(nproc)}"

ops/install-deps.sh
ops/ci/check_deps.sh

echo "=== release build (-Werror) ==="
cmake --preset ci-release >/dev/null
cmake --build --preset ci-release -j "$jobs"
ctest --preset ci-release -j "$jobs"

echo "=== install + find_package(prsgd) consumer ==="
ops/ci/check_consumer.sh build/ci-release build/install build/consumer

echo "=== ASan + UBSan build ==="
cmake --preset ci >/dev/null
cmake --build --preset ci -j "$jobs"
ctest --preset ci -j "$jobs"
