"""deploy/docker-compose.yml, parsed (no Docker engine needed): services, commands, order."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "deploy" / "docker-compose.yml"
CONFIGMAP = ROOT / "deploy" / "k8s" / "base" / "configmap.yaml"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"

# service -> the command line its container runs
PROCESSES = {
    "migrate": ["billing", "migrate"],
    "api": ["billing", "api"],
    "renewer": ["billing", "renewer"],
    "collector": ["billing", "collector"],
    "relay": ["billing", "relay"],
    "gateway-sim": ["billing", "gateway-sim"],
    "notifier": ["python", "-m", "services.notifier"],
    "mail": [
        "billing",
        "mail-server",
        "--host",
        "0.0.0.0",
        "--port",
        "2525",
        "--dir",
        "/tmp/mail",
    ],
}
USES_DATABASE = ["api", "renewer", "collector", "relay", "notifier"]


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())["services"]  # type: ignore[no-any-return]


def _image_entrypoint() -> list[str]:
    (line,) = [ln for ln in DOCKERFILE.read_text().splitlines() if ln.startswith("ENTRYPOINT")]
    return json.loads(line.removeprefix("ENTRYPOINT"))  # type: ignore[no-any-return]


def _argv(service: dict[str, Any]) -> list[str]:
    """What the container runs: the compose entrypoint, or the image's plus the command."""
    if "entrypoint" in service:
        return list(service["entrypoint"]) + list(service.get("command", []))
    assert service["build"]["dockerfile"] == "deploy/Dockerfile"
    return _image_entrypoint() + list(service["command"])


@pytest.mark.parametrize("name", list(PROCESSES))
def test_process_service_runs_its_command(services: dict[str, Any], name: str) -> None:
    assert _argv(services[name]) == PROCESSES[name]
    assert (COMPOSE.parent / services[name]["build"]["context"]).resolve() == ROOT


def test_infrastructure_images(services: dict[str, Any]) -> None:
    assert re.fullmatch(r"postgres:16(\.\d+)*(-\w+)?", services["postgres"]["image"])
    assert re.fullmatch(r"redis:7(\.\d+)*(-\w+)?", services["redis"]["image"])
    assert services["kafka"]["image"].startswith("apache/kafka:")


def test_kafka_is_a_single_kraft_node(services: dict[str, Any]) -> None:
    env = services["kafka"]["environment"]
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    node = env["KAFKA_NODE_ID"]
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"].startswith(f"{node}@kafka:")
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "1"


def test_collector_runs_two_replicas(services: dict[str, Any]) -> None:
    assert services["collector"]["deploy"]["replicas"] == 2
    assert "ports" not in services["collector"], "two replicas cannot publish one host port"


@pytest.mark.parametrize("name", USES_DATABASE)
def test_process_starts_after_the_migration(services: dict[str, Any], name: str) -> None:
    depends = services[name]["depends_on"]
    assert depends["migrate"]["condition"] == "service_completed_successfully"
    assert depends["postgres"]["condition"] == "service_healthy"


def test_migration_waits_for_a_healthy_database(services: dict[str, Any]) -> None:
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert services["migrate"]["restart"] == "no"


def test_healthy_conditions_have_healthchecks(services: dict[str, Any]) -> None:
    for name, service in services.items():
        for dependency, condition in service.get("depends_on", {}).items():
            assert dependency in services, f"{name} depends on unknown {dependency}"
            if condition["condition"] == "service_healthy":
                assert "healthcheck" in services[dependency], f"{dependency} has no healthcheck"


def test_dependencies_match_what_each_process_talks_to(services: dict[str, Any]) -> None:
    for name in ("collector", "api"):  # the gateway's limit; the API's per-client limit
        assert services[name]["depends_on"]["redis"]["condition"] == "service_healthy"
    assert "gateway-sim" in services["collector"]["depends_on"]
    for name in ("relay", "notifier"):
        assert services[name]["depends_on"]["kafka"]["condition"] == "service_healthy"


def test_stop_grace_covers_the_collector_drain(services: dict[str, Any]) -> None:
    grace = services["collector"]["stop_grace_period"]
    assert grace.endswith("s")
    env = services["collector"]["environment"]
    assert int(grace[:-1]) >= max(30, int(env["BILLING_COLLECTOR_SHUTDOWN_TIMEOUT_SECONDS"]) + 5)


def test_processes_reach_each_other_by_service_name(services: dict[str, Any]) -> None:
    env = services["api"]["environment"]
    for name in PROCESSES:
        assert services[name]["environment"] == env, "one environment for every process"
    gateway = urlsplit(env["BILLING_COLLECTOR_GATEWAY_URL"])
    assert (gateway.hostname, gateway.port) == ("gateway-sim", int(env["BILLING_GATEWAY_SIM_PORT"]))
    webhook = urlsplit(env["BILLING_GATEWAY_SIM_WEBHOOK_URL"])
    assert (webhook.hostname, webhook.port, webhook.path) == (
        "api",
        int(env["BILLING_API_PORT"]),
        "/webhooks/payments",
    )
    assert env["BILLING_GATEWAY_SIM_WEBHOOK_SECRET"] in env["BILLING_WEBHOOK_SECRETS"].split(",")
    assert urlsplit(env["BILLING_DATABASE_URL"]).hostname == "postgres"
    assert urlsplit(env["BILLING_REDIS_URL"]).hostname == "redis"
    host, port = env["BILLING_KAFKA_BOOTSTRAP"].split(":")
    assert host == "kafka"
    listeners = services["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    assert f"//kafka:{port}" in listeners


def test_compose_sets_every_setting_the_configmap_sets(services: dict[str, Any]) -> None:
    """Both deployments configure the same BILLING_* names (one list to align)."""
    configmap = yaml.safe_load(CONFIGMAP.read_text())["data"]
    assert set(configmap) <= set(services["api"]["environment"])
