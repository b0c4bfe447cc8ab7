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

# test_image_tag BUILD_DIR: the tag of the image that test_image.sh makes around BUILD_DIR's install tree.
test_image_tag() { echo "localhost/prsgd-test:$(printf '%s' "$1" | sha1sum | cut -c1-12)"; }

# use_test_image BUILD_DIR SOURCE_DIR: sets IMAGE to the image the deploy_test_image fixture made for
# BUILD_DIR (ctest runs that fixture first, also for a test run alone) and points podman at the project's
# configuration.
use_test_image() {
  IMAGE=$(test_image_tag "$1")
  source "$2/ops/container/env.sh"
  podman image exists "$IMAGE" ||
    { echo "FAILED: no image $IMAGE (the deploy_test_image test makes it; run this test through ctest)"; exit 1; }
}
