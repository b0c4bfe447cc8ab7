#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# container_test.sh BUILD_DIR SOURCE_DIR: the image around this build's install tree
# (ops/container/build --prebuilt) passes ops/container/smoke: --version, `prsgd local` in one container,
# and an averager + two workers in three containers with CURVE keys.
set -euo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
source "$(dirname "$0")/common.sh"
need_root "podman's storage and debootstrap"
need_tool podman
need_tool debootstrap
need_fmnist
image="localhost/prsgd-test:container-$$"
trap 'podman rmi -f "$image" >/dev/null 2>&1 || true; rm -rf "$scratch"' EXIT
source "$src/ops/container/env.sh"
cmake --install "$build" --prefix "$scratch/install" >/dev/null
"$src/ops/container/build" --prebuilt "$scratch/install" --tag "$image" >"$scratch/build.log" 2>&1 ||
  { tail -n 30 "$scratch/build.log"; echo "FAILED: ops/container/build"; exit 1; }
tail -n 1 "$scratch/build.log"
"$src/ops/container/smoke" --image "$image" --rounds 4
