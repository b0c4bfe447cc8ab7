#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# kube_play_test.sh BUILD_DIR SOURCE_DIR: the job rendered from ops/k8s/base runs to completion as pods
# under `podman kube play` (ops/k8s/kube-play says what it substitutes for Jobs, the Service, the claim and
# the ConfigMap), with the image of this build; a third worker pod played after round 3 joins the job
# and, stopped again, leaves it.
set -euo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
source "$(dirname "$0")/common.sh"
need_root "podman's storage"
need_tool podman
need_tool debootstrap
need_tool kubectl
need_fmnist
build_test_image "$build" "$src"
# 60 rounds of 8 steps slowed to 20 ms each: at least 10 s, so a third worker can join and leave again
# while the job runs.
"$src/ops/k8s/kube-play" --image "$IMAGE" --rounds 60 --slowdown-ms 20 --join-after 3 --leave
