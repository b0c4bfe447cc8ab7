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
