#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's main command: installs dependencies, builds the Release tree, and runs the main job.
# Extra arguments are passed to the job.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${PRSGD_JOBS:-$(nproc)}"
ops/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$jobs"
exec build/release/examples/hello/hello_actors "$@"
