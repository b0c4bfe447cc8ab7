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
use_test_image "$build" "$src"
"$src/ops/container/smoke" --image "$IMAGE" --rounds 4
