"""The Kubernetes manifests, rendered from the example overlay (no cluster needed).

Every check runs on our own rendering of ``deploy/k8s/overlays/example``; the first test
proves that rendering equals kubectl's kustomize output, so the checks hold for what
``kubectl apply -k`` would send.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.kustomize import Resource, pod_spec, render, render_with_kubectl

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
BASE = K8S / "base"
OVERLAY = K8S / "overlays" / "example"

SECRET_NAME = "billing-secrets"
# Settings whose values are credentials: only ever read from the Secret.
SECRET_SETTINGS = {
    "BILLING_DATABASE_URL",
    "BILLING_REDIS_URL",
    "BILLING_WEBHOOK_SECRETS",
    "BILLING_STRIPE_API_KEY",
    "BILLING_STRIPE_WEBHOOK_SECRETS",
}


class Process:
    def __init__(
        self,
        name: str,
        *,
        port_setting: str,
        bind_setting: str,
        shutdown_s: float,
        shutdown_setting: str | None,
        shutdown_extra_s: float,
        secrets: set[str],
        metrics_port_setting: str | None = None,
    ) -> None:
        self.name = name
        self.port_setting = port_setting  # where the process reads the port it listens on
        # where it reads the port of /metrics (the API's internal port; the workers' only one)
        self.metrics_port_setting = metrics_port_setting or port_setting
        self.bind_setting = bind_setting  # the interface it binds (must be 0.0.0.0 in a pod)
        self.shutdown_s = shutdown_s  # the least time a graceful stop needs
        self.shutdown_setting = shutdown_setting  # the configured drain timeout, if any
        self.shutdown_extra_s = shutdown_extra_s  # work around that timeout (loop stop, preStop)
        self.secrets = secrets


PROCESSES = [
    # uvicorn drains for 10 s after the 5 s preStop pause.
    Process(
        "api",
        port_setting="BILLING_API_PORT",
        bind_setting="BILLING_API_HOST",
        shutdown_s=15,
        shutdown_setting=None,
        shutdown_extra_s=0,
        secrets={
            "BILLING_DATABASE_URL",
            "BILLING_WEBHOOK_SECRETS",
            "BILLING_STRIPE_WEBHOOK_SECRETS",
            "BILLING_STRIPE_API_KEY",
            "BILLING_CONSOLE_SECRET",
            "BILLING_REDIS_URL",
        },
        metrics_port_setting="BILLING_API_INTERNAL_PORT",
    ),
    Process(
        "renewer",
        port_setting="BILLING_RENEWER_HEALTH_PORT",
        bind_setting="BILLING_HEALTH_HOST",
        shutdown_s=10,
        shutdown_setting="BILLING_RENEWER_SHUTDOWN_TIMEOUT_SECONDS",
        shutdown_extra_s=0,
        secrets={"BILLING_DATABASE_URL"},
    ),
    # The loop stops (5 s), then in-flight gateway calls (2 s connect + 10 s read) finish and
    # are recorded within the drain timeout; calls still running are cancelled (2 s). At least
    # 40 s in any case: a gateway call and its recording must fit, with room for a slow database.
    Process(
        "collector",
        port_setting="BILLING_COLLECTOR_HEALTH_PORT",
        bind_setting="BILLING_HEALTH_HOST",
        shutdown_s=40,
        shutdown_setting="BILLING_COLLECTOR_SHUTDOWN_TIMEOUT_SECONDS",
        shutdown_extra_s=7,
        secrets={"BILLING_DATABASE_URL", "BILLING_REDIS_URL", "BILLING_STRIPE_API_KEY"},
    ),
    Process(
        "relay",
        port_setting="BILLING_RELAY_HEALTH_PORT",
        bind_setting="BILLING_HEALTH_HOST",
        shutdown_s=10,
        shutdown_setting="BILLING_RELAY_SHUTDOWN_TIMEOUT_SECONDS",
        shutdown_extra_s=0,
        secrets={"BILLING_DATABASE_URL"},
    ),
]
PROCESS_IDS = [p.name for p in PROCESSES]


def _key(resource: Resource) -> tuple[str, str, str]:
    meta = resource["metadata"]
    return (resource["kind"], meta.get("namespace", ""), meta["name"])


@pytest.fixture(scope="module")
def rendered() -> list[Resource]:
    return render(OVERLAY)


@pytest.fixture(scope="module")
def config(rendered: list[Resource]) -> dict[str, str]:
    maps = [r for r in rendered if r["kind"] == "ConfigMap"]
    assert [m["metadata"]["name"] for m in maps] == ["billing-config"]
    return dict(maps[0]["data"])


def _one(rendered: list[Resource], kind: str, name: str) -> Resource:
    found = [r for r in rendered if r["kind"] == kind and r["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def _container(deployment: Resource) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]  # type: ignore[no-any-return]


def _resolve_port(container: dict[str, Any], port: int | str) -> int:
    declared = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    if isinstance(port, str):
        assert port in declared, f"probe port {port!r} is not a port of the container"
        return int(declared[port])
    assert port in declared.values(), f"probe port {port} is not exposed by the container"
    return port


def _quantity(value: str | int) -> float:
    text = str(value)
    units = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "k": 1e3, "M": 1e6, "G": 1e9}
    match = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", text)
    assert match, f"bad quantity {text!r}"
    number, unit = match.groups()
    return float(number) * units.get(unit, 1.0) if unit else float(number)


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


# -- the rendering itself ----------------------------------------------------------------------


def test_our_rendering_equals_kubectl_kustomize(rendered: list[Resource]) -> None:
    real = render_with_kubectl(OVERLAY)
    ours = {_key(r): r for r in rendered}
    theirs = {_key(r): r for r in real}
    assert sorted(ours) == sorted(theirs)
    for key, resource in ours.items():
        assert resource == theirs[key], f"{key} differs from kubectl kustomize"


def test_overlay_sets_namespace_and_image_everywhere(rendered: list[Resource]) -> None:
    overlay = yaml.safe_load((OVERLAY / "kustomization.yaml").read_text())
    (image,) = overlay["images"]
    expected_image = f"{image['newName']}:{image['newTag']}"
    for resource in rendered:
        if resource["kind"] != "Namespace":
            assert resource["metadata"]["namespace"] == overlay["namespace"], _key(resource)
        spec = pod_spec(resource)
        if spec is not None:
            for container in spec["containers"] + spec.get("initContainers", []):
                assert container["image"] == expected_image, _key(resource)


# -- each process ------------------------------------------------------------------------------


@pytest.mark.parametrize("process", PROCESSES, ids=PROCESS_IDS)
def test_process_runs_its_billing_command(rendered: list[Resource], process: Process) -> None:
    container = _container(_one(rendered, "Deployment", f"billing-{process.name}"))
    assert container["command"] + container["args"] == ["billing", process.name]


@pytest.mark.parametrize("process", PROCESSES, ids=PROCESS_IDS)
def test_probes_hit_the_port_the_process_listens_on(
    rendered: list[Resource], config: dict[str, str], process: Process
) -> None:
    container = _container(_one(rendered, "Deployment", f"billing-{process.name}"))
    listens_on = int(config[process.port_setting])
    assert config[process.bind_setting] == "0.0.0.0", "the kubelet cannot reach 127.0.0.1"
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        http = container[probe]["httpGet"]
        assert http["path"] == path
        assert _resolve_port(container, http["port"]) == listens_on


@pytest.mark.parametrize("process", PROCESSES, ids=PROCESS_IDS)
def test_metrics_are_scraped_on_the_process_port(
    rendered: list[Resource], config: dict[str, str], process: Process
) -> None:
    annotations = _one(rendered, "Deployment", f"billing-{process.name}")["spec"]["template"][
        "metadata"
    ]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/path"] == "/metrics"
    assert int(annotations["prometheus.io/port"]) == int(config[process.metrics_port_setting])


@pytest.mark.parametrize("process", PROCESSES, ids=PROCESS_IDS)
def test_resources_have_requests_within_limits(rendered: list[Resource], process: Process) -> None:
    resources = _container(_one(rendered, "Deployment", f"billing-{process.name}"))["resources"]
    for kind in ("cpu", "memory"):
        request = _quantity(resources["requests"][kind])
        limit = _quantity(resources["limits"][kind])
        assert 0 < request <= limit, f"{kind}: request {request} limit {limit}"


@pytest.mark.parametrize("process", PROCESSES, ids=PROCESS_IDS)
def test_grace_period_covers_the_graceful_shutdown(
    rendered: list[Resource], config: dict[str, str], process: Process
) -> None:
    spec = _one(rendered, "Deployment", f"billing-{process.name}")["spec"]["template"]["spec"]
    needed = process.shutdown_s
    if process.shutdown_setting is not None:
        configured = float(config[process.shutdown_setting]) + process.shutdown_extra_s
        needed = max(needed, configured)
    assert spec["terminationGracePeriodSeconds"] >= needed


@pytest.mark.parametrize("process", PROCESSES, ids=PROCESS_IDS)
def test_process_has_a_disruption_budget(rendered: list[Resource], process: Process) -> None:
    deployment = _one(rendered, "Deployment", f"billing-{process.name}")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    budgets = [
        r
        for r in rendered
        if r["kind"] == "PodDisruptionBudget"
        and _selects(r["spec"]["selector"]["matchLabels"], pod_labels)
    ]
    assert len(budgets) == 1
    spec = budgets[0]["spec"]
    # A budget of minAvailable == replicas would block every node drain.
    assert (
        spec.get("maxUnavailable", 0) >= 1 or spec["minAvailable"] < deployment["spec"]["replicas"]
    )


@pytest.mark.parametrize("process", PROCESSES, ids=PROCESS_IDS)
def test_process_has_an_autoscaler(rendered: list[Resource], process: Process) -> None:
    deployment = _one(rendered, "Deployment", f"billing-{process.name}")
    scalers = [
        r
        for r in rendered
        if r["kind"] == "HorizontalPodAutoscaler"
        and r["spec"]["scaleTargetRef"]
        == {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": deployment["metadata"]["name"],
        }
    ]
    assert len(scalers) == 1
    spec = scalers[0]["spec"]
    assert 1 <= spec["minReplicas"] <= deployment["spec"]["replicas"] <= spec["maxReplicas"]
    (metric,) = spec["metrics"]
    if process.name == "api":
        assert metric["type"] == "Resource"
        assert metric["resource"]["name"] == "cpu"
    else:
        assert metric["type"] == "External"
        assert metric["external"]["metric"]["name"].startswith(f"billing_{process.name}_")
        assert metric["external"]["target"]["type"] == "AverageValue"


def test_worker_autoscaling_metrics_are_served_by_the_adapter_rules(
    rendered: list[Resource],
) -> None:
    rules = yaml.safe_load((K8S / "prometheus-adapter-rules.yaml").read_text())
    served = {rule["name"]["as"] for rule in rules["rules"]["external"]}
    wanted = {
        m["external"]["metric"]["name"]
        for r in rendered
        if r["kind"] == "HorizontalPodAutoscaler"
        for m in r["spec"]["metrics"]
        if m["type"] == "External"
    }
    assert wanted == served


@pytest.mark.parametrize("process", PROCESSES, ids=PROCESS_IDS)
def test_pods_run_as_non_root(rendered: list[Resource], process: Process) -> None:
    spec = _one(rendered, "Deployment", f"billing-{process.name}")["spec"]["template"]["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] != 0
    assert spec["containers"][0]["securityContext"]["allowPrivilegeEscalation"] is False


def test_api_service_routes_to_the_api_port(
    rendered: list[Resource], config: dict[str, str]
) -> None:
    deployment = _one(rendered, "Deployment", "billing-api")
    service = _one(rendered, "Service", "billing-api")
    assert _selects(
        service["spec"]["selector"], deployment["spec"]["template"]["metadata"]["labels"]
    )
    (port,) = service["spec"]["ports"]
    assert _resolve_port(_container(deployment), port["targetPort"]) == int(
        config["BILLING_API_PORT"]
    )


# -- migrations --------------------------------------------------------------------------------


def test_migration_job_runs_billing_migrate(rendered: list[Resource]) -> None:
    job = _one(rendered, "Job", "billing-migrate")
    spec = job["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert container["command"] + container["args"] == ["billing", "migrate"]
    assert spec["restartPolicy"] == "Never"
    assert "BILLING_DATABASE_URL" in {e["name"] for e in container["env"]}


def test_rollout_applies_the_migration_before_any_process(rendered: list[Resource]) -> None:
    """rollout.sh first applies what its selector picks and waits for the Job: that must be the
    Job and its dependencies (ConfigMap, service account, namespace), and no process."""
    script = (K8S / "rollout.sh").read_text()
    match = re.search(r"processes='app\.kubernetes\.io/component notin \(([a-z,]+)\)'", script)
    assert match is not None
    excluded = set(match.group(1).split(","))
    first = [
        r
        for r in rendered
        if r["metadata"].get("labels", {}).get("app.kubernetes.io/component") not in excluded
    ]
    assert {r["kind"] for r in first} == {"Namespace", "ServiceAccount", "ConfigMap", "Job"}
    assert excluded == set(PROCESS_IDS)
    assert "wait" in script or "Complete" in script
    subprocess.run(["bash", "-n", str(K8S / "rollout.sh")], check=True)


# -- secrets -----------------------------------------------------------------------------------


def test_no_secret_is_rendered(rendered: list[Resource]) -> None:
    assert [r for r in rendered if r["kind"] == "Secret"] == []
    for kustomization in K8S.rglob("kustomization.yaml"):
        listed = yaml.safe_load(kustomization.read_text()).get("resources", [])
        assert not any("secret" in str(entry).lower() for entry in listed), kustomization


def test_configmap_holds_no_credentials(config: dict[str, str]) -> None:
    assert SECRET_SETTINGS.isdisjoint(config)


def _containers(rendered: list[Resource]) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for resource in rendered:
        spec = pod_spec(resource)
        if spec is not None:
            for container in spec["containers"] + spec.get("initContainers", []):
                found.append((resource["metadata"]["name"], container))
    return found


def test_secret_values_come_only_from_secret_key_refs(rendered: list[Resource]) -> None:
    example = yaml.safe_load((BASE / "secret.example.yaml").read_text())
    keys = set(example["stringData"])
    for owner, container in _containers(rendered):
        for source in container.get("envFrom", []):
            assert "secretRef" not in source, f"{owner}: whole-Secret envFrom"
        for env in container.get("env", []):
            if env["name"] in SECRET_SETTINGS:
                assert "value" not in env, f"{owner}: {env['name']} given in clear"
            ref = env.get("valueFrom", {}).get("secretKeyRef")
            if env["name"] in SECRET_SETTINGS or ref is not None:
                assert ref is not None, f"{owner}: {env['name']} not from a secretKeyRef"
                assert ref["name"] == SECRET_NAME
                assert ref["key"] in keys, f"{owner}: unknown key {ref['key']}"


@pytest.mark.parametrize("process", PROCESSES, ids=PROCESS_IDS)
def test_process_gets_the_secrets_it_needs(rendered: list[Resource], process: Process) -> None:
    container = _container(_one(rendered, "Deployment", f"billing-{process.name}"))
    from_secret = {
        e["name"] for e in container.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})
    }
    assert from_secret == process.secrets


def test_api_network_policy_opens_the_api_to_the_ingress_and_metrics_to_monitoring(
    rendered: list[Resource], config: dict[str, str]
) -> None:
    deployment = _one(rendered, "Deployment", "billing-api")
    container = _container(deployment)
    policy = _one(rendered, "NetworkPolicy", "billing-api")
    spec = policy["spec"]
    assert _selects(
        spec["podSelector"]["matchLabels"], deployment["spec"]["template"]["metadata"]["labels"]
    )
    assert spec["policyTypes"] == ["Ingress"]
    allowed: dict[int, list[dict[str, Any]]] = {}
    for rule in spec["ingress"]:
        assert rule.get("from"), "a rule without 'from' would open its ports to every pod"
        assert rule.get("ports"), "a rule without 'ports' would open every port"
        for port in rule["ports"]:
            allowed.setdefault(_resolve_port(container, port["port"]), []).extend(rule["from"])
    api_port = int(config["BILLING_API_PORT"])
    metrics_port = int(config["BILLING_API_INTERNAL_PORT"])
    assert set(allowed) == {api_port, metrics_port}
    namespaces = {
        port: [peer["namespaceSelector"]["matchLabels"] for peer in peers]
        for port, peers in allowed.items()
    }
    assert namespaces[api_port] == [{"kubernetes.io/metadata.name": "ingress-nginx"}]
    assert namespaces[metrics_port] == [{"kubernetes.io/metadata.name": "monitoring"}]
    assert config["BILLING_HEALTH_HOST"] == "0.0.0.0", "Prometheus cannot reach 127.0.0.1"
    assert config["BILLING_API_PUBLIC_DOCS"] == "false"
