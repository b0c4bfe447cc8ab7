#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# k8s_render_test.sh SOURCE_DIR: every kustomization under ops/k8s renders with `kubectl kustomize`, and
# the base holds the objects the job needs, wired together (names, labels, claim, config map, image).
set -euo pipefail
src="$1"
source "$(dirname "$0")/common.sh"
need_tool kubectl
for k in "$src"/ops/k8s/base "$src"/ops/k8s/overlays/*/; do
  kubectl kustomize "$k" >"$scratch/$(basename "$k").yaml" 2>"$scratch/err" ||
    { cat "$scratch/err"; echo "FAILED: kubectl kustomize $k"; exit 1; }
  echo "rendered $k"
done
python3 - "$scratch/base.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
by_kind = {}
for d in docs:
    by_kind.setdefault(d["kind"], []).append(d)
def fail(msg):
    print("FAILED:", msg); sys.exit(1)
kinds = sorted(by_kind)
if kinds != ["ConfigMap", "Job", "PersistentVolumeClaim", "Service"] or len(by_kind["Job"]) != 2:
    fail(f"kinds {kinds}, {len(by_kind.get('Job', []))} Jobs")
jobs = {j["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]: j for j in by_kind["Job"]}
cm = by_kind["ConfigMap"][0]["metadata"]["name"]
pvc = by_kind["PersistentVolumeClaim"][0]["metadata"]["name"]
svc = by_kind["Service"][0]
for role, job in jobs.items():
    spec = job["spec"]["template"]["spec"]
    if spec["restartPolicy"] != "OnFailure":
        fail(f"{role}: restartPolicy {spec['restartPolicy']}")
    if job["spec"].get("selector"):
        fail(f"{role}: a Job must not carry a selector (the API server makes it)")
    vols = {v["name"]: v for v in spec["volumes"]}
    if not any(v.get("configMap", {}).get("name") == cm for v in vols.values()):
        fail(f"{role}: does not mount the ConfigMap {cm}")
    args = spec["containers"][0]["args"]
    if args[0] != role:
        fail(f"{role}: container args {args}")
if not any(v.get("persistentVolumeClaim", {}).get("claimName") == pvc
           for v in jobs["averager"]["spec"]["template"]["spec"]["volumes"]):
    fail("the averager does not mount the claim")
labels = jobs["averager"]["spec"]["template"]["metadata"]["labels"]
if any(labels.get(k) != v for k, v in svc["spec"]["selector"].items()):
    fail(f"the Service selector {svc['spec']['selector']} does not match the averager pod {labels}")
worker_cfg = yaml.safe_load(by_kind["ConfigMap"][0]["data"]["worker.yaml"])
if worker_cfg["averager"] != f"tcp://{svc['metadata']['name']}:{svc['spec']['ports'][0]['port']}":
    fail(f"workers connect to {worker_cfg['averager']}, not the Service")
if "parallelism" not in jobs["worker"]["spec"]:
    fail("the workers Job has no parallelism")
print(f"base: {len(docs)} objects, consistent")
PY
