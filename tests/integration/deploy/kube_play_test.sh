#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# kube_play_test.sh BUILD_DIR SOURCE_DIR: the job rendered from ops/k8s/overlays/curve (the base with
# CURVE keys from a Secret) runs to completion as pods under `podman kube play` (ops/k8s/kube-play says
# what it substitutes for Jobs, the Service, the claim, the ConfigMap and the Secret), with the image of
# this build and keys made by its `prsgd keygen`; a third worker pod played after round 3 joins the
# job and, stopped again, leaves it.
set -euo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
source "$(dirname "$0")/common.sh"
need_root "podman's storage"
need_tool podman
need_tool debootstrap
need_tool kubectl
need_fmnist
build_test_image "$build" "$src"
mkdir "$scratch/keys"
chown 10001:10001 "$scratch/keys"  # the image's user writes them
for name in averager worker; do
  podman run --rm -v "$scratch/keys:/keys" "$IMAGE" keygen --out-dir /keys --name "$name" >/dev/null
done
# 60 rounds of 8 steps slowed to 20 ms each: at least 10 s, so a third worker can join and leave again
# while the job runs.
"$src/ops/k8s/kube-play" --kustomize "$src/ops/k8s/overlays/curve" --keys "$scratch/keys" --image "$IMAGE" \
  --rounds 60 --slowdown-ms 20 --join-after 3 --leave
