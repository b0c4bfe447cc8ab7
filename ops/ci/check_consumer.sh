#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs a configured and built prsgd tree and builds tests/consumer against the installed package with
# find_package(prsgd), then runs the consumer programs (the embedded runtime; 20 rounds of embedded training).
#   ops/ci/check_consumer.sh BUILD_DIR INSTALL_DIR CONSUMER_DIR     (INSTALL_DIR and CONSUMER_DIR are recreated)
set -euo pipefail
cd "$(dirname "$0")/../.."
if (($# != 3)); then
  echo "usage: ops/ci/check_consumer.sh BUILD_DIR INSTALL_DIR CONSUMER_DIR" >&2
  exit 2
fi
build="$1" install="$2" consumer="$3"
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  echo "check_consumer: $build is not a configured build tree" >&2
  exit 2
fi
rm -rf "$install" "$consumer"
cmake --install "$build" --prefix "$install" >/dev/null
cmake -S tests/consumer -B "$consumer" -G Ninja -DCMAKE_PREFIX_PATH="$(realpath "$install")" >/dev/null
cmake --build "$consumer"
"$consumer/prsgd_consumer"
"$consumer/prsgd_embed_training" 20
