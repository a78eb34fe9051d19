"""The Kubernetes manifests: ``deploy/k8s/overlays/example`` rendered by kubectl's kustomize,
what ``kubectl apply -k`` would send (no cluster needed)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from services.api.settings import ApiSettings
from tests.deploy.kustomize import Resource, pod_spec, render

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
BASE = K8S / "base"
OVERLAY = K8S / "overlays" / "example"
OPERATIONS = ROOT / "docs" / "OPERATIONS.md"

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


# -- the overlay -------------------------------------------------------------------------------


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
    Job and its dependencies (ConfigMap, service account, namespace, the network policies that
    select it), and no process."""
    script = (K8S / "rollout.sh").read_text()
    match = re.search(r"processes='app\.kubernetes\.io/component notin \(([a-z,]+)\)'", script)
    assert match is not None
    excluded = set(match.group(1).split(","))
    first = [
        r
        for r in rendered
        if r["metadata"].get("labels", {}).get("app.kubernetes.io/component") not in excluded
    ]
    assert {r["kind"] for r in first} == {
        "Namespace",
        "ServiceAccount",
        "ConfigMap",
        "Job",
        "NetworkPolicy",
    }
    job_labels, _ = _workloads(rendered)["migrate"]
    job_policies = _policies(rendered, job_labels, "Ingress") + _policies(
        rendered, job_labels, "Egress"
    )
    assert {_key(p) for p in job_policies} <= {_key(r) for r in first}
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


def _secret_keys_referenced(rendered: list[Resource]) -> set[str]:
    return {
        ref["key"]
        for _, container in _containers(rendered)
        for env in container.get("env", [])
        if (ref := env.get("valueFrom", {}).get("secretKeyRef")) is not None
    }


def _create_secret_keys(text: str) -> set[str]:
    """The keys of the one documented ``kubectl create secret generic billing-secrets``."""
    joined = re.sub(r"\\\n[#\s]*", " ", text)
    (command,) = [
        line for line in joined.splitlines() if f"create secret generic {SECRET_NAME}" in line
    ]
    return set(re.findall(r"--from-literal=([a-z0-9-]+)=", command))


@pytest.mark.parametrize(
    "document", [OPERATIONS, BASE / "secret.example.yaml"], ids=lambda p: p.name
)
def test_the_documented_create_secret_command_has_every_referenced_key(
    rendered: list[Resource], document: Path
) -> None:
    assert _create_secret_keys(document.read_text()) == _secret_keys_referenced(rendered)


def test_the_secret_example_has_every_referenced_key(rendered: list[Resource]) -> None:
    example = yaml.safe_load((BASE / "secret.example.yaml").read_text())
    assert set(example["stringData"]) == _secret_keys_referenced(rendered)


# -- network -----------------------------------------------------------------------------------

MONITORING = [
    {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
    }
]
INGRESS_CONTROLLER = [
    {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}
]
# What each workload (by its component label) connects to, besides DNS.
TALKS_TO = {
    "api": {"postgresql", "redis"},
    "renewer": {"postgresql"},
    "collector": {"postgresql", "redis", "gateway"},
    "relay": {"postgresql", "kafka"},
    "migrate": {"postgresql"},
}
Peer = dict[str, Any]


def _workloads(rendered: list[Resource]) -> dict[str, tuple[dict[str, str], dict[str, Any]]]:
    """component -> (pod labels, container) of every workload."""
    found = {}
    for resource in rendered:
        spec = pod_spec(resource)
        if spec is not None:
            labels = resource["spec"]["template"]["metadata"]["labels"]
            (container,) = spec["containers"]
            found[labels["app.kubernetes.io/component"]] = (labels, container)
    return found


def _expression_holds(expression: dict[str, Any], labels: dict[str, str]) -> bool:
    value = labels.get(expression["key"])
    match expression["operator"]:
        case "In":
            return value in expression["values"]
        case "NotIn":
            return value not in expression["values"]
        case "Exists":
            return value is not None
        case "DoesNotExist":
            return value is None
    raise AssertionError(f"unknown selector operator {expression['operator']!r}")


def _label_selector_matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return _selects(selector.get("matchLabels", {}), labels) and all(
        _expression_holds(e, labels) for e in selector.get("matchExpressions", [])
    )


def _policies(rendered: list[Resource], labels: dict[str, str], kind: str) -> list[Resource]:
    """The NetworkPolicies that select these pod labels for Ingress or Egress."""
    return [
        r
        for r in rendered
        if r["kind"] == "NetworkPolicy"
        and kind in r["spec"]["policyTypes"]
        and _label_selector_matches(r["spec"]["podSelector"], labels)
    ]


def _policy_port(container: dict[str, Any], port: int | str) -> int | None:
    """The container port a policy port stands for; a name the container lacks selects none."""
    declared = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    if isinstance(port, str):
        return declared.get(port)
    assert port in declared.values(), f"port {port} is not a port of the container"
    return port


def _ingress(rendered: list[Resource], component: str) -> dict[int, list[Peer]]:
    """Container port -> the peers allowed to connect to it, over every policy."""
    labels, container = _workloads(rendered)[component]
    allowed: dict[int, list[Peer]] = {}
    for policy in _policies(rendered, labels, "Ingress"):
        for rule in policy["spec"].get("ingress", []):
            assert rule.get("from"), "a rule without 'from' would open its ports to every pod"
            assert rule.get("ports"), "a rule without 'ports' would open every port"
            for port in rule["ports"]:
                number = _policy_port(container, port["port"])
                if number is not None:
                    allowed.setdefault(number, []).extend(rule["from"])
    return allowed


def _egress(rendered: list[Resource], component: str) -> dict[tuple[int, str], list[Peer]]:
    """(port, protocol) -> the peers the workload may connect to on it, over every policy."""
    labels, _ = _workloads(rendered)[component]
    allowed: dict[tuple[int, str], list[Peer]] = {}
    for policy in _policies(rendered, labels, "Egress"):
        for rule in policy["spec"].get("egress", []):
            assert rule.get("to"), "a rule without 'to' would open its ports to every address"
            assert rule.get("ports"), "a rule without 'ports' would open every port"
            for port in rule["ports"]:
                allowed.setdefault((port["port"], port["protocol"]), []).extend(rule["to"])
    return allowed


def _url_port(url: str) -> int:
    parts = urlsplit(url)
    return parts.port or {"https": 443, "http": 80}[parts.scheme]


def _endpoint_ports(config: dict[str, str]) -> dict[str, set[tuple[int, str]]]:
    """What each endpoint listens on, read from the settings that point at it."""
    secrets = yaml.safe_load((BASE / "secret.example.yaml").read_text())["stringData"]
    return {
        "dns": {(53, "UDP"), (53, "TCP")},
        "postgresql": {(_url_port(secrets["database-url"]), "TCP")},
        "redis": {(_url_port(secrets["redis-url"]), "TCP")},
        "kafka": {
            (int(server.rsplit(":", 1)[1]), "TCP")
            for server in config["BILLING_KAFKA_BOOTSTRAP"].split(",")
        },
        "gateway": {(_url_port(config["BILLING_COLLECTOR_GATEWAY_URL"]), "TCP")},
    }


def test_every_workload_is_denied_what_no_policy_allows(rendered: list[Resource]) -> None:
    workloads = _workloads(rendered)
    assert set(workloads) == set(TALKS_TO)
    for component, (labels, _) in workloads.items():
        both = [
            p
            for p in _policies(rendered, labels, "Ingress")
            if "Egress" in p["spec"]["policyTypes"]
        ]
        assert both, f"{component}: no policy for both directions"


@pytest.mark.parametrize("process", PROCESSES, ids=PROCESS_IDS)
def test_ingress_reaches_the_metrics_port_from_monitoring_and_the_api_from_the_ingress(
    rendered: list[Resource], config: dict[str, str], process: Process
) -> None:
    expected = {int(config[process.metrics_port_setting]): MONITORING}
    if process.name == "api":
        expected[int(config["BILLING_API_PORT"])] = INGRESS_CONTROLLER
        assert config["BILLING_API_PUBLIC_DOCS"] == "false", "the docs belong to the internal port"
    assert _ingress(rendered, process.name) == expected
    assert config["BILLING_HEALTH_HOST"] == "0.0.0.0", "Prometheus cannot reach 127.0.0.1"


@pytest.mark.parametrize("component", sorted(TALKS_TO))
def test_egress_reaches_only_what_the_workload_talks_to(
    rendered: list[Resource], config: dict[str, str], component: str
) -> None:
    ports = _endpoint_ports(config)
    wanted = set().union(*(ports[endpoint] for endpoint in TALKS_TO[component] | {"dns"}))
    assert set(_egress(rendered, component)) == wanted


def _namespace_of(host: str, own: str) -> str:
    """The namespace of a cluster DNS name (``<service>.<namespace>.svc``, with or without a
    pod in front), else the pod's own."""
    labels = host.split(".")
    return labels[labels.index("svc") - 1] if "svc" in labels else own


def test_kafka_egress_reaches_the_namespace_of_the_bootstrap_servers(
    rendered: list[Resource], config: dict[str, str]
) -> None:
    own = _one(rendered, "Deployment", "billing-relay")["metadata"]["namespace"]
    servers = {
        _namespace_of(server.rsplit(":", 1)[0], own)
        for server in config["BILLING_KAFKA_BOOTSTRAP"].split(",")
    }
    (port,) = _endpoint_ports(config)["kafka"]
    reached = {
        peer.get("namespaceSelector", {})
        .get("matchLabels", {})
        .get("kubernetes.io/metadata.name", own)
        for peer in _egress(rendered, "relay")[port]
    }
    assert reached == servers


def test_the_api_trusts_forwarded_addresses_only_from_a_range(rendered: list[Resource]) -> None:
    container = _container(_one(rendered, "Deployment", "billing-api"))
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    value = env["BILLING_API_FORWARDED_ALLOW_IPS"]
    assert ApiSettings(api_forwarded_allow_ips=value).api_forwarded_allow_ips == value
    assert "*" not in value
