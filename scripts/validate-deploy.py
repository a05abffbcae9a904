"""Validates deploy/k8s offline: core kinds against Kubernetes' schemas (kubernetes-validate,
strict: unknown fields fail), the InferencePool against the CRD's own OpenAPI schema
(deploy/crds, a copy of ../shared/k8s's; unknown fields fail, as kubectl's strict field
validation would), and the
references between manifests (labels, ports, names). Each check first proves it can fail
on a broken copy. Exit status 1 on any failure."""

import copy
import glob
import os
import subprocess
import sys
import tempfile

import jsonschema
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRD = os.path.join(ROOT, "deploy", "crds", "inferencepools.crd.yaml")
SHARED_CRD = os.path.join(ROOT, "..", "shared", "k8s", "inferencepools.crd.yaml")
CORE = {"Deployment", "Service", "HorizontalPodAutoscaler", "Job", "ConfigMap", "PersistentVolumeClaim"}
failures = []


def fail(msg):
    failures.append(msg)
    print(f"FAIL {msg}")


def workspace_version():
    with open(os.path.join(ROOT, "Cargo.toml")) as f:
        return next(line.split('"')[1] for line in f if line.startswith("version = "))


def load_all():
    docs = []
    paths = glob.glob(os.path.join(ROOT, "deploy", "k8s", "*.yaml")) + glob.glob(os.path.join(ROOT, "deploy", "bench", "*.yaml"))
    for path in sorted(paths):
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                if doc:
                    docs.append((os.path.relpath(path, ROOT), doc))
    return docs


def kubernetes_validate(doc):
    """True when kubernetes-validate --strict accepts the document."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(doc, f)
    try:
        r = subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict", "--quiet", f.name],
                           capture_output=True, text=True)
        return r.returncode == 0, (r.stdout + r.stderr).strip()
    finally:
        os.unlink(f.name)


def closed(schema):
    """The schema with unknown properties refused wherever properties are listed."""
    schema = copy.deepcopy(schema)

    def walk(s):
        if isinstance(s, dict):
            if s.get("type") == "object" and "properties" in s and "additionalProperties" not in s:
                s["additionalProperties"] = False
            for v in s.values():
                walk(v)
        elif isinstance(s, list):
            for v in s:
                walk(v)

    walk(schema)
    return schema


def pool_schema():
    with open(CRD) as f:
        crd = yaml.safe_load(f)
    version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
    schema = closed(version["schema"]["openAPIV3Schema"])
    # metadata is Kubernetes' ObjectMeta, not described by the CRD.
    schema["properties"]["metadata"] = {"type": "object"}
    group = crd["spec"]["group"]
    return f"{group}/{version['name']}", crd["spec"]["names"]["kind"], schema


def validate_pool(doc, api, kind, schema):
    if (doc.get("apiVersion"), doc.get("kind")) != (api, kind):
        return False, f"expected {api} {kind}"
    try:
        jsonschema.validate(doc, schema)
        return True, ""
    except jsonschema.ValidationError as e:
        return False, e.message


def main():
    docs = load_all()
    if os.path.exists(SHARED_CRD):
        with open(CRD) as ours, open(SHARED_CRD) as theirs:
            if yaml.safe_load(ours) != yaml.safe_load(theirs):
                fail("deploy/crds/inferencepools.crd.yaml differs from ../shared/k8s's: copy it again")
    api, kind, schema = pool_schema()
    by_kind = {}
    for path, doc in docs:
        by_kind.setdefault(doc["kind"], []).append(doc)
        if doc["kind"] in CORE:
            ok, out = kubernetes_validate(doc)
            print(f"{'ok  ' if ok else ''}{path}: {doc['kind']} against Kubernetes' schema")
            if not ok:
                fail(f"{path}: {out}")
        elif doc["kind"] == kind:
            ok, why = validate_pool(doc, api, kind, schema)
            print(f"{'ok  ' if ok else ''}{path}: {kind} against the CRD's schema")
            if not ok:
                fail(f"{path}: {why}")
        elif doc["kind"] == "HTTPRoute":
            print(f"ok  {path}: HTTPRoute (no schema offline: its references are checked below)")
        else:
            fail(f"{path}: no schema for kind {doc['kind']}")

    # The checks can fail: broken copies must be refused.
    deployment = by_kind["Deployment"][0]
    bad = copy.deepcopy(deployment)
    bad["spec"]["replica"] = 2
    if kubernetes_validate(bad)[0]:
        fail("kubernetes-validate accepted an unknown field (spec.replica): it is not validating")
    pool = by_kind[kind][0]
    for mutate in (lambda p: p["spec"].pop("targetPorts"), lambda p: p["spec"].update(selectr={})):
        bad = copy.deepcopy(pool)
        mutate(bad)
        if validate_pool(bad, api, kind, schema)[0]:
            fail("the CRD schema accepted a broken InferencePool: it is not validating")

    # References between the manifests.
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    ports = {p["containerPort"] for c in deployment["spec"]["template"]["spec"]["containers"] for p in c["ports"]}
    if not pool["spec"]["selector"]["matchLabels"].items() <= pod_labels.items():
        fail("the InferencePool's selector does not match the Deployment's pods")
    if not {p["number"] for p in pool["spec"]["targetPorts"]} <= ports:
        fail("the InferencePool's targetPorts are not container ports")
    for service in by_kind.get("Service", []):
        if not service["spec"]["selector"].items() <= pod_labels.items():
            fail(f"Service {service['metadata']['name']} selects no rillm pod")
    for route in by_kind.get("HTTPRoute", []):
        refs = [b for r in route["spec"]["rules"] for b in r["backendRefs"]]
        if not refs or any(b.get("kind") != kind or b.get("name") != pool["metadata"]["name"] for b in refs):
            fail(f"HTTPRoute {route['metadata']['name']} does not send to InferencePool {pool['metadata']['name']}")
        if not route["spec"].get("parentRefs"):
            fail(f"HTTPRoute {route['metadata']['name']} has no parent Gateway")
    for hpa in by_kind.get("HorizontalPodAutoscaler", []):
        if hpa["spec"]["scaleTargetRef"]["name"] != deployment["metadata"]["name"]:
            fail("the HPA scales something other than the Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    args = dict(a.lstrip("-").split("=", 1) for a in container["args"] if "=" in a)
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    if grace < int(args.get("shutdown-timeout", 30)):
        fail("terminationGracePeriodSeconds is shorter than --shutdown-timeout")
    if args.get("threads") != str(container["resources"]["requests"]["cpu"]):
        fail("--threads does not match the CPU request")

    for job in by_kind.get("Job", []):
        spec = job["spec"]
        args = spec["template"]["spec"]["containers"][0]["args"]
        shard = next((a for a in args if a.startswith("--shard=")), "")
        count = shard.rsplit("/", 1)[-1]
        if spec.get("completionMode") != "Indexed" or not count.isdigit():
            fail(f"Job {job['metadata']['name']}: not an Indexed Job of --shard=$(SHARD)/N")
        elif not int(count) == spec["completions"] == spec["parallelism"]:
            fail(f"Job {job['metadata']['name']}: {count} shards but {spec['completions']} completions")
        if not any(a.startswith("--start-at=") for a in args):
            fail(f"Job {job['metadata']['name']}: shards without --start-at do not start together")

    # Every pod runs the image scripts/image builds: rillm tagged with the workspace version.
    expected = f"rillm:{workspace_version()}"
    for path, doc in docs:
        for container in doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            if container["image"] != expected:
                fail(f"{path}: image {container['image']}, but scripts/image builds {expected}")

    print("deploy manifests: " + ("FAILED" if failures else f"{len(docs)} valid"))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
