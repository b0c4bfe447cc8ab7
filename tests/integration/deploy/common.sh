# SPDX-License-Identifier: Apache-2.0
# Shared by the deployment tests: skipping with a reason (exit 77) and a scratch directory.
# shellcheck shell=bash
skip() { echo "SKIPPED: $*"; exit 77; }
need_root() { [[ $(id -u) -eq 0 ]] || skip "needs root ($1)"; }
need_tool() { command -v "$1" >/dev/null || skip "$1 not installed (ops/install-deps.sh installs it)"; }
need_fmnist() {
  [[ -d "${PRSGD_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}" ]] ||
    skip "no Fashion-MNIST (apt-get install dataset-fashion-mnist)"
}
scratch=$(mktemp -d "${TMPDIR:-/tmp}/prsgd-deploy-test.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

# build_test_image BUILD_DIR SOURCE_DIR: sets IMAGE to an image made around BUILD_DIR's install tree
# (ops/container/build --prebuilt), removed again when the test exits.
build_test_image() {
  IMAGE="localhost/prsgd-test:$(basename "$0" .sh)-$$"
  trap 'podman rmi -f "$IMAGE" >/dev/null 2>&1 || true; rm -rf "$scratch"' EXIT
  source "$2/ops/container/env.sh"
  cmake --install "$1" --prefix "$scratch/install" >/dev/null
  "$2/ops/container/build" --prebuilt "$scratch/install" --tag "$IMAGE" >"$scratch/build.log" 2>&1 ||
    { tail -n 30 "$scratch/build.log"; echo "FAILED: ops/container/build"; exit 1; }
  tail -n 1 "$scratch/build.log"
}
