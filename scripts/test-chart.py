#!/usr/bin/env python3
"""Tests the Helm chart config/helm/rustqueue with the pinned helm, without a cluster
(docs/install.md; `make chart-test`, about 10 s):

- `helm lint --strict`, with the default values and with a queue;
- `helm template` with the defaults renders exactly config/'s objects: the ClusterRole and the
  Role grant the same calls as config/rbac (which the operator's tests hold to calls.rs), and
  the operator's Pod is config/manager's, names and labels aside;
- non-default values reach what they name (replicas, image, namespaces, the RustQueue, PDB,
  the console values as the RustQueue's spec.console and consoleManagementEnabled),
  and the monitoring switches render config/prometheus's objects in the release namespace;
  the NOTES are checked by the testbed's `helm install` (e2e/k8s/tests/install);
- bad values are refused by values.schema.json, each with a message naming the value.

Usage: scripts/test-chart.py [--helm PATH]   (default: the pinned helm in the cache)
"""
import argparse
import copy
import os
import pathlib
import re
import subprocess
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
CHART = ROOT / "config/helm/rustqueue"
FAILURES = []


def pinned(key):
    for line in (ROOT / "scripts/versions.env").read_text().splitlines():
        if line.startswith(key + "="):
            return line.split("=", 1)[1]
    sys.exit(f"{key} missing from scripts/versions.env")


def check(ok, what):
    print(("ok      " if ok else "FAILED  ") + what)
    if not ok:
        FAILURES.append(what)


def helm(*args, expect_ok=True):
    p = subprocess.run([HELM, *args], capture_output=True, text=True)
    if expect_ok and p.returncode != 0:
        sys.exit(f"helm {' '.join(args)} failed:\n{p.stdout}{p.stderr}")
    return p


def template(*sets, namespace="rustqueue-system"):
    args = ["template", "rustqueue", str(CHART), "--namespace", namespace, "--include-crds", "--kube-version", KUBE]
    for s in sets:
        args += ["--set", s]
    docs = [d for d in yaml.safe_load_all(helm(*args).stdout) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def config(path):
    return yaml.safe_load((ROOT / "config" / path).read_text())


def grants(rules):
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def strip_pod(spec):
    """A pod template's spec without what names the install (the ServiceAccount's name, the
    release's instance label in the spread constraints' selectors)."""
    spec = copy.deepcopy(spec)
    spec.pop("serviceAccountName")
    for c in spec.get("topologySpreadConstraints", []):
        c["labelSelector"]["matchLabels"].pop("app.kubernetes.io/instance", None)
    return spec


def main():
    # -- lint ------------------------------------------------------------------------------------
    for extra in ([], ["--set", "queue.create=true"]):
        p = helm("lint", "--strict", str(CHART), *extra, expect_ok=False)
        check(p.returncode == 0, f"helm lint --strict {' '.join(extra)}".strip() + ("" if p.returncode == 0 else f"\n{p.stdout}{p.stderr}"))

    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    workspace = re.search(r'^\[workspace\.package\][^\[]*?^version\s*=\s*"([^"]+)"',
                          (ROOT / "Cargo.toml").read_text(), re.M | re.S).group(1)
    check(chart["version"] == chart["appVersion"] == workspace,
          f"the chart's version and appVersion are the workspace's ({workspace})")

    # -- defaults: config/'s objects ---------------------------------------------------------
    objs = template()
    kinds = sorted(k for k, _ in objs)
    check(kinds == sorted(["CustomResourceDefinition"] * 3 + ["ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                           "Role", "RoleBinding", "Deployment", "PodDisruptionBudget"]),
          f"the defaults render the operator and nothing else: {kinds}")
    for plural in ("rustqueues", "rustqueuetopics", "rustqueuechannels"):
        crd = objs.get(("CustomResourceDefinition", f"{plural}.rustqueue.io"))
        check(crd == yaml.safe_load((ROOT / f"crds/rustqueue.io_{plural}.yaml").read_text()),
              f"the chart's {plural} CRD is the generated crds/ one")
    name = "rustqueue-operator"
    check(grants(objs[("ClusterRole", name)]["rules"]) == grants(config("rbac/cluster_role.yaml")["rules"]),
          "the ClusterRole grants exactly config/rbac/cluster_role.yaml's calls")
    check(grants(objs[("Role", name)]["rules"]) == grants(config("rbac/role.yaml")["rules"]),
          "the Role grants exactly config/rbac/role.yaml's calls (the Lease)")
    for kind, ref in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        b = objs[(kind, name)]
        check(b["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": ref, "name": name}
              and b["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": "rustqueue-system"}],
              f"the {kind} binds the chart's ServiceAccount")
    dep = objs[("Deployment", name)]
    want = config("manager/deployment.yaml")
    check(dep["spec"]["replicas"] == want["spec"]["replicas"] == 2, "two operator replicas, as config/manager")
    check(strip_pod(dep["spec"]["template"]["spec"]) == strip_pod(want["spec"]["template"]["spec"]),
          "the operator's Pod (image, args, env, probes, resources, securityContexts) is config/manager's")
    check(dep["spec"]["template"]["spec"]["serviceAccountName"] == name, "the Pod runs as the chart's ServiceAccount")

    # -- non-default values reach the objects ----------------------------------------------------
    objs = template("operator.replicas=3", "operator.image.repository=registry.example/rq", "operator.image.tag=1.2.3",
                    "operator.watchNamespaces=team-a\\,team-b", "operator.log=rustqueue_operator=debug",
                    "operator.podDisruptionBudget.enabled=false", "queue.create=true", "queue.name=orders",
                    "queue.spec.minBrokers=3", "queue.spec.maxBrokers=5", "queue.spec.publishAckMode=write_ack",
                    "fullnameOverride=rq", namespace="queues")
    dep = objs[("Deployment", "rq-operator")]
    pod = dep["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    check(dep["spec"]["replicas"] == 3, "operator.replicas reaches the Deployment")
    check(pod["containers"][0]["image"] == "registry.example/rq:1.2.3", "operator.image reaches the container")
    check(env["WATCH_NAMESPACES"] == "team-a,team-b" and env["RUST_LOG"] == "rustqueue_operator=debug",
          "watchNamespaces and log reach the environment")
    check(("PodDisruptionBudget", "rq-operator") not in objs, "podDisruptionBudget.enabled=false drops the PDB")
    rq = objs.get(("RustQueue", "orders"))
    check(rq is not None and rq["metadata"]["namespace"] == "queues" and rq["spec"]["image"] == "registry.example/rq:1.2.3"
          and rq["spec"]["minBrokers"] == 3 and rq["spec"]["maxBrokers"] == 5 and rq["spec"]["publishAckMode"] == "write_ack",
          "queue.create renders the RustQueue in the release namespace, its image defaulting to the operator's")
    check(objs[("ClusterRoleBinding", "rq-operator")]["subjects"][0]["namespace"] == "queues",
          "the bindings follow the release namespace")

    # -- the console values become the RustQueue's spec.console ----------------------------------
    spec = template("queue.create=true")[("RustQueue", "queue")]["spec"]
    check(spec["consoleManagementEnabled"] is False and spec["console"] == {
        "enabled": True, "pollIntervalSeconds": 2, "catalogRefreshSeconds": 30, "historyMinutes": 15,
        "management": {"unlockSeconds": 1800, "tombstoneSeconds": 600},
        "resources": {"cpuRequest": "50m", "memoryRequest": "96Mi", "cpuLimit": "500m", "memoryLimit": "256Mi"}},
          f"the console defaults reach the RustQueue, management off: {spec.get('console')}")
    spec = template("queue.create=true", "console.management.enabled=true", "console.pollIntervalSeconds=5",
                    "console.catalogRefreshSeconds=60", "console.historyMinutes=30",
                    "console.management.unlockSeconds=600", "console.management.tombstoneSeconds=120",
                    "console.resources.limits.cpu=null")[("RustQueue", "queue")]["spec"]
    c = spec["console"]
    check(spec["consoleManagementEnabled"] is True and c["pollIntervalSeconds"] == 5 and c["catalogRefreshSeconds"] == 60
          and c["historyMinutes"] == 30 and c["management"] == {"unlockSeconds": 600, "tombstoneSeconds": 120}
          and c["resources"]["cpuLimit"] is None and c["resources"]["memoryLimit"] == "256Mi",
          f"console.* values reach spec.console and management spec.consoleManagementEnabled: {spec.get('console')}")
    spec = template("queue.create=true", "console.enabled=false",
                    "console.management.enabled=true")[("RustQueue", "queue")]["spec"]
    check(spec["console"]["enabled"] is False and spec["consoleManagementEnabled"] is False,
          "console.enabled=false turns the console and its management off")

    # -- monitoring: config/prometheus's own objects, in the release namespace ------------------
    sources = {}
    for f in sorted((ROOT / "config/prometheus").glob("*.yaml")):
        if f.name != "kustomization.yaml":
            for d in yaml.safe_load_all(f.read_text()):
                if d:
                    sources[(d["kind"], d["metadata"]["name"])] = d
    objs = template("monitoring.serviceMonitor.enabled=true", "monitoring.prometheusRule.enabled=true",
                    namespace="queues")
    rendered = {k: v for k, v in objs.items() if k in sources}
    check(sources and set(rendered) == set(sources),
          f"both monitoring switches render every object of config/prometheus: {sorted(sources)}")
    check(all(v["spec"] == sources[k]["spec"] and v["metadata"]["namespace"] == "queues"
              for k, v in rendered.items()),
          "each is config/prometheus's object unchanged, placed in the release namespace")
    objs = template("monitoring.prometheusRule.enabled=true")
    check([k for k in objs if k in sources] == [k for k in sources if k[0] == "PrometheusRule"],
          "prometheusRule alone renders only the PrometheusRule")
    objs = template("monitoring.serviceMonitor.enabled=true", "monitoring.serviceMonitor.interval=15s")
    intervals = [ep.get("interval") for (kind, _), o in objs.items() if kind in ("ServiceMonitor", "PodMonitor")
                 for ep in o["spec"].get("endpoints", o["spec"].get("podMetricsEndpoints", []))]
    check(intervals and set(intervals) == {"15s"} and not any(k[0] == "PrometheusRule" for k in objs),
          f"serviceMonitor alone renders the scrape targets, every endpoint at its interval: {intervals}")

    # -- bad values are refused with a message naming them --------------------------------------
    for value, needle in [
        ("operator.replicas=0", "replicas"),
        ("operator.replica=2", "replica"),
        ("operator.image.pullPolicy=Sometimes", "pullPolicy"),
        ("operator.watchNamespaces=Team_A", "watchNamespaces"),
        ("queue.name=Bad_Name", "name"),
        ("queue.spec.minBrokers=0", "minBrokers"),
        ("queue.spec.publishAckMode=fast", "publishAckMode"),
        ("queue.spec.storageSiz=1Gi", "storageSiz"),
        ("queue.spec.diskHighWatermarkPercent=101", "diskHighWatermarkPercent"),
        ("queue.spec.rollout.paused=yes", "paused"),
        ("monitoring.serviceMonitor.interval=often", "interval"),
        ("console.pollIntervalSeconds=9", "pollIntervalSeconds"),
        ("console.historyMinutes=0", "historyMinutes"),
        ("console.management.unlockSeconds=3600", "unlockSeconds"),
        ("console.management.enable=true", "enable"),
        ("queue.spec.consoleManagementEnabled=true", "consoleManagementEnabled"),
    ]:
        p = helm("template", "rustqueue", str(CHART), "--kube-version", KUBE, "--set", value, expect_ok=False)
        message = (p.stderr.strip().splitlines() or [""])[-1] if p.returncode else ""
        check(p.returncode != 0 and "values don't meet the specifications of the schema" in p.stderr and needle in p.stderr,
              f"--set {value} is refused: {message[:150] or p.stdout[:100]}")

    if FAILURES:
        sys.exit(f"{len(FAILURES)} chart check(s) failed")
    print("chart: all checks passed")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    cache = pathlib.Path(os.environ.get("RUSTQUEUE_CACHE", pathlib.Path.home() / ".cache/rustqueue"))
    ap.add_argument("--helm", default=str(cache / f"helm-{pinned('HELM_VERSION')}/bin/helm"))
    HELM = ap.parse_args().helm
    KUBE = pinned("K8S_VERSION")
    main()
