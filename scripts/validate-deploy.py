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
CORE = {"Deployment", "Service", "HorizontalPodAutoscaler", "Job", "ConfigMap", "PersistentVolumeClaim",
        "ServiceAccount", "Role", "RoleBinding"}
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


def check_router(router, rillm_labels, rillm_ports, by_kind):
    """What keeps the router from finding the rillm pods (its selector, port and namespace,
    the rights its service account is given) or from checking their /ready."""
    problems = []
    spec = router["spec"]["template"]["spec"]
    command = " ".join(spec["containers"][0]["args"]).split()
    def flag(name):
        return command[command.index(name) + 1] if name in command else None
    selector = dict(s.split("=", 1) for s in [flag("--selector") or ""] if "=" in s)
    if "--service-discovery" not in command or not selector or not selector.items() <= rillm_labels.items():
        problems.append("the router's --selector does not find the rillm pods")
    if int(flag("--service-discovery-port") or 0) not in rillm_ports:
        problems.append("the router's --service-discovery-port is not rillm's container port")
    if flag("--health-check-endpoint") != "/ready":
        problems.append("the router checks a replica's health elsewhere than /ready (a draining pod would get requests)")
    if flag("--service-discovery-namespace") is None:
        problems.append("without --service-discovery-namespace the router watches every namespace (a Role does not allow it)")
    account = spec.get("serviceAccountName")
    bindings = [b for b in by_kind.get("RoleBinding", []) if any(s["name"] == account for s in b["subjects"])]
    roles = {r["metadata"]["name"]: r for r in by_kind.get("Role", [])}
    verbs = {v for b in bindings for rule in roles.get(b["roleRef"]["name"], {}).get("rules", [])
             if "pods" in rule["resources"] for v in rule["verbs"]}
    if not {"list", "watch"} <= verbs:
        problems.append(f"the router's service account {account} may not list and watch pods")
    return problems


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
    deployments = {d["metadata"]["name"]: d for d in by_kind["Deployment"]}
    deployment = deployments["rillm"]
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
    pods = {name: d["spec"]["template"]["metadata"]["labels"] for name, d in deployments.items()}
    for service in by_kind.get("Service", []):
        if not any(service["spec"]["selector"].items() <= labels.items() for labels in pods.values()):
            fail(f"Service {service['metadata']['name']} selects no pod of the manifests")
    if "rillm-router" in deployments:
        router = deployments["rillm-router"]
        for problem in check_router(router, pod_labels, ports, by_kind):
            fail(problem)
        # A router that would find no replica must be refused.
        bad = copy.deepcopy(router)
        container = bad["spec"]["template"]["spec"]["containers"][0]
        container["args"] = [a.replace("app.kubernetes.io/name=rillm", "app=other") for a in container["args"]]
        if not check_router(bad, pod_labels, ports, by_kind):
            fail("the router check accepted a selector that finds no rillm pod: it is not validating")
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

    # Every rillm pod runs the image scripts/image builds: rillm tagged with the workspace version.
    expected = f"rillm:{workspace_version()}"
    for path, doc in docs:
        for container in doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            if container["name"] != "router" and container["image"] != expected:
                fail(f"{path}: image {container['image']}, but scripts/image builds {expected}")

    print("deploy manifests: " + ("FAILED" if failures else f"{len(docs)} valid"))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
