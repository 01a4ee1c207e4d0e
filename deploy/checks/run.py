#!/usr/bin/env python3
"""Offline checks of everything a platform team installs, with no cluster:

- the Helm chart renders with its default values, with ci/full-values.yaml,
  with ci/standard-servers-values.yaml (standard servers, tenants' limits) and
  with the full example of docs/configuration.md's reference, every key of the
  config file coming out as written,
  and every rendered manifest validates against the Kubernetes schemas (strict);
- the kustomize base (`kubectl kustomize`, where kubectl is installed; else its
  resources as written) validates too;
- every bad values file in deploy/checks/bad-values/ is rejected by values.schema.json;
- every file in deploy/checks/unrenderable-values/ is refused when the chart
  renders, with the error its `expectedError` names;
- the pods keep the restricted security profile, probes and a grace period that
  covers the drain;
- the gateway config each renders (and its keys) passes `mcp-gateway check`;
- the chart's alert rules are the ones in deploy/prometheus/alerts.yaml.

    python3 deploy/checks/run.py --gateway target/debug/mcp-gateway
Exits non-zero, naming each failure, when anything is broken.
"""
import argparse
import base64
import pathlib
import shutil
import subprocess
import sys
import tempfile

import helm_python as helm
import kubernetes_validate
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "mcp-gateway"
K8S_VERSION = "1.33.0"
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}
failures = []


def fail(what):
    failures.append(what)
    print("FAIL", what)


def ok(what):
    print("ok  ", what)


def documents(text):
    return [d for d in yaml.safe_load_all(text) if d]


def validate(where, doc):
    kind = doc.get("kind")
    name = f"{where}: {kind}/{doc.get('metadata', {}).get('name')}"
    if kind in CRD_KINDS:
        # No schema ships for CRDs: check their shape by hand.
        if not (doc.get("apiVersion", "").startswith("monitoring.coreos.com/") and doc.get("spec")):
            fail(f"{name} is not a well-formed {kind}")
        return
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    except (kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError) as e:
        fail(f"{name} does not validate: {str(e).splitlines()[0]}")


def check_pod(where, deployment, shutdown_ms):
    spec = deployment["spec"]["template"]["spec"]
    pod_sc = spec.get("securityContext", {})
    (c,) = [c for c in spec["containers"] if c["name"] == "gateway"]
    sc = c.get("securityContext", {})
    checks = {
        "runs as non-root": pod_sc.get("runAsNonRoot") is True,
        "seccomp RuntimeDefault": pod_sc.get("seccompProfile", {}).get("type") == "RuntimeDefault",
        "no service-account token": spec.get("automountServiceAccountToken") is False,
        "no privilege escalation": sc.get("allowPrivilegeEscalation") is False,
        "read-only root filesystem": sc.get("readOnlyRootFilesystem") is True,
        "all capabilities dropped": sc.get("capabilities", {}).get("drop") == ["ALL"],
        "an emptyDir for /tmp": any(m["mountPath"] == "/tmp" for m in c.get("volumeMounts", []))
        and any(v["name"] == "tmp" and "emptyDir" in v for v in spec.get("volumes", [])),
        "liveness, readiness and startup probes": all(k in c for k in ("livenessProbe", "readinessProbe", "startupProbe")),
        "probes on /healthz and /readyz": c["livenessProbe"]["httpGet"]["path"] == "/healthz"
        and c["readinessProbe"]["httpGet"]["path"] == "/readyz",
    }
    pre_stop = c.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
    grace = spec.get("terminationGracePeriodSeconds", 30)
    checks["a preStop delay"] = pre_stop > 0
    checks[f"grace {grace}s covers preStop {pre_stop}s + drain {shutdown_ms / 1000:.0f}s"] = grace >= pre_stop + shutdown_ms / 1000
    for what, good in checks.items():
        (ok if good else fail)(f"{where}: {what}")


def gateway_check(where, gateway, config_text, keys):
    """Writes the config and its keys as the pod would see them, and runs `mcp-gateway check`."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        (tmp / "config").mkdir()
        (tmp / "keys").mkdir()
        (tmp / "config" / "gateway.yaml").write_text(config_text)
        for name, value in keys.items():
            (tmp / "keys" / name).write_text(value)
        # The commands are the image's: not looked up on this machine.
        r = subprocess.run([gateway, "check", "--elsewhere", "--config", str(tmp / "config" / "gateway.yaml")],
                           capture_output=True, text=True)
        (ok if r.returncode == 0 else fail)(f"{where}: mcp-gateway check: {(r.stdout + r.stderr).strip()}")


def check_chart(gateway, chart, label, values):
    try:
        chart.validate_schema(values)
        rendered = chart.render(values, name="gw", namespace="tools", is_install=True)
    except helm.HelmError as e:
        return fail(f"chart ({label}) does not render: {e}")
    ok(f"chart ({label}) renders {len(rendered)} templates")
    docs = []
    merged = chart.merge_values(values)
    store = merged["store"]
    shared = bool(store["url"] or store["redis"]["enabled"])
    several = merged["autoscaling"]["enabled"] or int(merged["replicaCount"]) > 1
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            if "/mcp" not in text:
                fail(f"chart ({label}): NOTES.txt does not say how to reach the gateway")
            warned = "No store is set" in text
            (ok if warned == (several and not shared) else fail)(
                f"chart ({label}): NOTES.txt says what is per replica exactly when several replicas share no store")
            continue
        for doc in documents(text):
            validate(f"chart ({label}) {path}", doc)
            docs.append(doc)
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    check_pod(f"chart ({label})", by_kind["Deployment"][0], merged["gateway"]["shutdownTimeoutMs"])
    annotations = by_kind["Deployment"][0]["spec"]["template"]["metadata"].get("annotations", {})
    (ok if "checksum/config" in annotations else fail)(f"chart ({label}): a config change rolls the pods")
    config = by_kind["ConfigMap"][0]["data"]["gateway.yaml"]
    keys = {k: base64.b64decode(v).decode() for k, v in by_kind["Secret"][0]["data"].items()} if "Secret" in by_kind else {}
    gateway_check(f"chart ({label})", gateway, config, keys)
    return docs


def docs_reference_values():
    """The full example of docs/configuration.md's reference, as chart values:
    its upstreams, tenants (their keys are the chart's), limits and auth."""
    text = (ROOT / "docs" / "configuration.md").read_text()
    block = text.split("### Configuration reference", 1)[1].split("```yaml\n", 1)[1].split("\n```", 1)[0]
    config = yaml.safe_load(block)
    tenants = {name: {k: v for k, v in t.items() if k != "api_keys"} for name, t in config["tenants"].items()}
    g = config["gateway"]
    return {"gateway": {"upstreams": config["upstreams"], "tenants": tenants,
                        "limits": g["limits"], "auth": g["auth"]}}, config


def rendered_config(docs):
    return yaml.safe_load(next(d for d in docs if d["kind"] == "ConfigMap")["data"]["gateway.yaml"])


def check_every_key(gateway, chart):
    """The chart renders every key of the config file: the docs' full example
    and standard servers with a tenant's limits come out in the config as given."""
    values, config = docs_reference_values()
    docs = check_chart(gateway, chart, "the docs' full example", values) or []
    if docs:
        out = rendered_config(docs)
        same = out["upstreams"] == config["upstreams"] and out["gateway"]["limits"] == config["gateway"]["limits"]
        for name, tenant in values["gateway"]["tenants"].items():
            same &= {k: v for k, v in out["tenants"][name].items() if k != "api_keys"} == tenant
        (ok if same else fail)("chart (the docs' full example): every upstream, tenant and limit key as written")
    servers = yaml.safe_load((CHART / "ci" / "standard-servers-values.yaml").read_text())
    docs = check_chart(gateway, chart, "standard servers", servers) or []
    if docs:
        out = rendered_config(docs)
        acme = out["tenants"]["acme"]
        limits = (acme.get("rate_limit"), acme.get("max_concurrency"), acme.get("max_sessions"))
        (ok if limits == ({"per_second": 50, "burst": 100}, 20, 32) else fail)(
            f"chart (standard servers): a tenant's limits reach the config: {limits}")
        ev = out["upstreams"]["everything"]
        (ok if ev.get("per_session") and "protocol" not in ev else fail)(
            "chart (standard servers): per_session kept, protocol left to the handshake")
        (ok if out["upstreams"]["time"].get("pin") and out["gateway"].get("pins_file") else fail)(
            "chart (standard servers): a pinned upstream gets a pins file")


def kustomize_documents(base):
    """The base's objects: rendered by `kubectl kustomize` where kubectl is
    installed; otherwise its resources as written and the ConfigMap its
    generator makes (labels and the generated name's hash are kubectl's own,
    and go unchecked: said so)."""
    if shutil.which("kubectl"):
        r = subprocess.run(["kubectl", "kustomize", str(base)], capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"kubectl kustomize: {r.stderr.strip()}")
            return None
        docs = documents(r.stdout)
        ok(f"kustomize base renders {len(docs)} objects")
        return docs
    print("skip kubectl kustomize: kubectl is not installed (not packaged by Debian); the base's resources "
          "are validated as written instead, its labels and generated names are not", flush=True)
    kustomization = yaml.safe_load((base / "kustomization.yaml").read_text())
    docs = [d for r in kustomization["resources"] for d in documents((base / r).read_text())]
    for gen in kustomization.get("configMapGenerator", []):
        data = {f: (base / f).read_text() for f in gen["files"]}
        docs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": gen["name"]}, "data": data})
    ok(f"kustomize base: {len(docs)} objects as written")
    return docs


def check_kustomize(gateway):
    docs = kustomize_documents(ROOT / "deploy" / "kustomize" / "base")
    if docs is None:
        return
    for d in docs:
        validate("kustomize", d)
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    config = next(d for d in docs if d["kind"] == "ConfigMap")["data"]["gateway.yaml"]
    check_pod("kustomize", deployment, yaml.safe_load(config)["gateway"]["shutdown_timeout_ms"])
    gateway_check("kustomize", gateway, config, {
        "default": "a-key-from-the-secret",
        "admin.token": "an-admin-token-from-the-secret",
        "session.secret": "a-session-secret-from-the-secret-of-32-chars",
    })


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gateway", required=True, help="the mcp-gateway binary")
    gateway = ap.parse_args().gateway

    with helm.Chart.load(str(CHART)) as chart:
        check_chart(gateway, chart, "default values", None)
        check_every_key(gateway, chart)
        full = yaml.safe_load((CHART / "ci" / "full-values.yaml").read_text())
        docs = check_chart(gateway, chart, "full values", full) or []
        kinds = {d["kind"] for d in docs}
        for kind in ["Deployment", "Service", "ConfigMap", "Secret", "ServiceAccount", "PodDisruptionBudget",
                     "HorizontalPodAutoscaler", "ServiceMonitor", "PrometheusRule", "NetworkPolicy"]:
            (ok if kind in kinds else fail)(f"chart (full values) renders a {kind}")
        rules = [d for d in docs if d["kind"] == "PrometheusRule"]
        shipped = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yaml").read_text())
        alerts = lambda groups: sorted(r["alert"] for g in groups for r in g["rules"])
        if rules:
            same = alerts(rules[0]["spec"]["groups"]) == alerts(shipped["groups"])
            (ok if same else fail)("the chart's alert rules are deploy/prometheus/alerts.yaml's")
        for bad in sorted((ROOT / "deploy" / "checks" / "bad-values").glob("*.yaml")):
            try:
                chart.validate_schema(yaml.safe_load(bad.read_text()))
                fail(f"values.schema.json accepts {bad.name}")
            except helm.HelmError as e:
                ok(f"values.schema.json rejects {bad.name}: {' '.join(str(e).split())[:160]}")
        # What the schema cannot say (a tenant naming an upstream that is not
        # defined) the chart refuses when it renders, naming the value.
        for bad in sorted((ROOT / "deploy" / "checks" / "unrenderable-values").glob("*.yaml")):
            values = yaml.safe_load(bad.read_text())
            expected = values.pop("expectedError")
            try:
                chart.render(values, name="gw", namespace="tools", is_install=True)
                fail(f"the chart renders {bad.name}")
            except helm.HelmError as e:
                said = " ".join(str(e).split())
                (ok if expected in said else fail)(f"the chart refuses {bad.name}: {said[:200]}")

    lint = helm.lint(str(CHART), strict=True)
    errors = [m for m in lint.get("messages", []) if m.get("severity", 0) >= 2] + lint.get("errors", [])
    (ok if not errors else fail)(f"helm lint --strict: {errors or 'clean'}")

    check_kustomize(gateway)

    print(f"{len(failures)} failed" if failures else "all offline deployment checks passed")
    sys.exit(1 if failures else 0)


main()
