#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's main command: installs missing dependencies, builds `prsgd` (Release), and trains
# Fashion-MNIST with Parallel Restarted SGD on a local cluster of separate processes (one averager,
# four workers talking ZeroMQ over 127.0.0.1), printing one progress line per round.
# Extra arguments go to `prsgd local` and override the job file, e.g. `ops/main.sh --epochs 1`.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${PRSGD_JOBS:-$(nproc)}"
ops/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$jobs" --target prsgd
exec build/release/cli/prsgd local --config examples/image/fmnist-mlp.yaml "$@"
