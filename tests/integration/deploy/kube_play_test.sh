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
use_test_image "$build" "$src"
mkdir "$scratch/keys"
chown 10001:10001 "$scratch/keys"  # the image's user writes them
for name in averager worker; do
  podman run --rm -v "$scratch/keys:/keys" "$IMAGE" keygen --out-dir /keys --name "$name" >/dev/null
done
# One epoch (about 60 rounds of 8 steps with two workers) slowed to 20 ms a step: at least 10 s, so a third
# worker can join and leave again while the job runs.
"$src/ops/k8s/kube-play" --kustomize "$src/ops/k8s/overlays/curve" --keys "$scratch/keys" --image "$IMAGE" \
  --epochs 1 --slowdown-ms 20 --join-after 3 --leave | tee "$scratch/play.out"
# The elastic path costs no accuracy: the same job (the curve overlay's model, interval and two workers; the
# same seed; one pass over the data, however many members share it) with fixed membership, run by this
# build's prsgd local, ends within 1 point.
elastic=$(sed -n 's/.*test accuracy \([0-9.]*\)$/\1/p' "$scratch/play.out")
"$build/cli/prsgd" local --workers 2 --model fmnist-mlp --interval 8 --epochs 1 --progress off \
  --log-dir "$scratch/fixed" --metrics-jsonl "$scratch/fixed/metrics.jsonl" >/dev/null
fixed=$(python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if "done" in l][-1]["test_acc"])' \
  "$scratch/fixed/metrics.jsonl")
python3 - "$elastic" "$fixed" <<'PY'
import sys
elastic, fixed = (float(x) for x in sys.argv[1:])
print(f"kube_play_test: elastic job {elastic:.4f}, fixed membership {fixed:.4f}")
if abs(elastic - fixed) > 0.01:
    sys.exit("FAILED: the elastic job's accuracy is more than 1 point from the fixed job's")
PY
