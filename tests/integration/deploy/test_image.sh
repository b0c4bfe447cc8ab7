#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_image.sh build BUILD_DIR SOURCE_DIR | remove BUILD_DIR: makes (or removes) the image around BUILD_DIR's
# install tree (ops/container/build --prebuilt) that the container tests share, so that it is built once per
# suite run. Its tag is derived from BUILD_DIR (common.sh: test_image_tag).
set -euo pipefail
source "$(dirname "$0")/common.sh"
case "${1:-}" in
  build)
    need_root "podman's storage and debootstrap"
    need_tool podman
    need_tool debootstrap
    build=$(cd "$2" && pwd) src=$(cd "$3" && pwd)
    image=$(test_image_tag "$build")
    source "$src/ops/container/env.sh"
    cmake --install "$build" --prefix "$scratch/install" >/dev/null
    "$src/ops/container/build" --prebuilt "$scratch/install" --tag "$image" >"$scratch/build.log" 2>&1 ||
      { tail -n 30 "$scratch/build.log"; echo "FAILED: ops/container/build"; exit 1; }
    tail -n 1 "$scratch/build.log"
    ;;
  remove)
    command -v podman >/dev/null || exit 0
    build=$(cd "$2" && pwd)
    podman rmi -f "$(test_image_tag "$build")" >/dev/null 2>&1 || true
    ;;
  *) echo "usage: test_image.sh build BUILD_DIR SOURCE_DIR | remove BUILD_DIR" >&2; exit 2 ;;
esac
