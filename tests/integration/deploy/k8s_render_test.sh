#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# k8s_render_test.sh SOURCE_DIR: every kustomization under ops/k8s renders with `kubectl kustomize`, and
# the base holds the objects the job needs, wired together (names, labels, claim, config map, image,
# disruption budgets, the exit-status policy, probes); in every overlay the averager's liveness probe
# reads the metrics port its job file sets, and the speech overlay trains kws-cnn from its data claim.
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
if kinds != ["ConfigMap", "Job", "PersistentVolumeClaim", "PodDisruptionBudget", "Service"] or len(by_kind["Job"]) != 2:
    fail(f"kinds {kinds}, {len(by_kind.get('Job', []))} Jobs")
jobs = {j["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]: j for j in by_kind["Job"]}
cm = by_kind["ConfigMap"][0]["metadata"]["name"]
pvc = by_kind["PersistentVolumeClaim"][0]["metadata"]["name"]
svc = by_kind["Service"][0]
for role, job in jobs.items():
    spec = job["spec"]["template"]["spec"]
    if spec["restartPolicy"] != "Never":
        fail(f"{role}: restartPolicy {spec['restartPolicy']} (podFailurePolicy needs Never)")
    rules = {r["action"]: r["onExitCodes"] for r in job["spec"].get("podFailurePolicy", {}).get("rules", [])}
    name = spec["containers"][0]["name"]
    if (rules.get("Ignore", {}).get("values") != [3] or rules.get("FailJob", {}).get("values") != [2]
            or any(r.get("containerName") != name for r in rules.values())):
        fail(f"{role}: podFailurePolicy {rules}: exit 3 (stopped on request) must be ignored, 2 fail the Job")
    pdbs = [b for b in by_kind["PodDisruptionBudget"]
            if all(job["spec"]["template"]["metadata"]["labels"].get(k) == v
                   for k, v in b["spec"]["selector"]["matchLabels"].items())]
    if len(pdbs) != 1:
        fail(f"{role}: {len(pdbs)} PodDisruptionBudgets select its pods")
    if not spec["containers"][0].get("resources", {}).get("requests"):
        fail(f"{role}: no resource requests")
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
python3 - "$scratch" <<'PY'
import pathlib, re, sys, yaml
def fail(msg):
    print("FAILED:", msg); sys.exit(1)
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.yaml")):
    docs = [d for d in yaml.safe_load_all(f.read_text()) if d]
    cm = next(d for d in docs if d["kind"] == "ConfigMap")
    avg_cfg = yaml.safe_load(cm["data"]["averager.yaml"])
    jobs = {d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]: d
            for d in docs if d["kind"] == "Job"}
    avg = jobs["averager"]["spec"]["template"]["spec"]["containers"][0]
    probe = avg["livenessProbe"].get("httpGet", {})
    ports = {p["name"]: p["containerPort"] for p in avg.get("ports", [])}
    bind = str(avg_cfg.get("metrics-bind", ""))
    port = ports.get(probe.get("port"))
    if probe.get("path") != "/metrics" or port is None or not bind.endswith(f":{port}") or bind.startswith("127."):
        fail(f"{f.stem}: the liveness probe ({probe}) does not read metrics-bind {bind or '(unset)'} from outside")
    notes = jobs["averager"]["spec"]["template"]["metadata"].get("annotations", {})
    if notes.get("prometheus.io/scrape") != "true" or notes.get("prometheus.io/port") != str(port):
        fail(f"{f.stem}: the averager pod's Prometheus annotations {notes} do not name port {port}")
    if f.stem == "speech":
        wrk_cfg = yaml.safe_load(cm["data"]["worker.yaml"])
        for role, cfg in (("averager", avg_cfg), ("worker", wrk_cfg)):
            if cfg.get("model") != "kws-cnn" or cfg.get("dataset") != "kws":
                fail(f"speech: the {role} does not train kws-cnn on kws")
            spec = jobs[role]["spec"]["template"]["spec"]
            claim = {v["name"] for v in spec["volumes"]
                     if v.get("persistentVolumeClaim", {}).get("claimName") == "prsgd-kws-data"}
            mounts = {m["mountPath"] for m in spec["containers"][0]["volumeMounts"] if m["name"] in claim}
            if cfg.get("data-dir") not in mounts:
                fail(f"speech: the {role}'s data-dir {cfg.get('data-dir')} is not where the claim is mounted {mounts}")
    print(f"{f.stem}: probe and scrape annotations on metrics port {port}")
PY
