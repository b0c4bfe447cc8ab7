#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds prsgd's libraries as static archives (BUILD_SHARED_LIBS=OFF, Release, no tests, benchmarks or
# examples) in build/static, installs them and builds and runs tests/consumer against that package: checks
# that prsgdConfig.cmake finds every library the archives leave to the program that links them.
# PRSGD_JOBS sets the build's parallelism (default: all cores).
set -euo pipefail
cd "$(dirname "$0")/../.."
jobs="${PRSGD_JOBS:-$(nproc)}"
cmake -S . -B build/static -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DPRSGD_WERROR=ON \
  -DPRSGD_BUILD_TESTS=OFF -DPRSGD_BUILD_BENCH=OFF -DPRSGD_BUILD_EXAMPLES=OFF >/dev/null
cmake --build build/static -j "$jobs"
ops/ci/check_consumer.sh build/static build/static-install build/static-consumer
echo "check_static_package: the static package links and runs"
