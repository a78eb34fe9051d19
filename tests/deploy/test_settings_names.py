"""Every BILLING_* variable the deployment sets is a setting some process reads.

A misspelt or renamed variable would otherwise be ignored silently (the settings classes accept
unknown variables), and the process would run on its default.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import yaml
from pydantic_settings import BaseSettings

from billing_core.settings import CoreSettings, RenamedSetting, current_name
from services.api.settings import ApiSettings
from services.collector.settings import CollectorSettings
from services.gateway_sim.settings import GatewaySimSettings
from services.notifier.settings import NotifierSettings
from services.relay.settings import RelaySettings
from services.renewer.settings import RenewerSettings

ROOT = Path(__file__).resolve().parents[2]
K8S_BASE = ROOT / "deploy" / "k8s" / "base"

SETTINGS: list[type[BaseSettings]] = [
    CoreSettings,
    ApiSettings,
    RenewerSettings,
    CollectorSettings,
    RelaySettings,
    NotifierSettings,
    GatewaySimSettings,
]


def _names(settings: type[BaseSettings]) -> set[str]:
    prefix = str(settings.model_config.get("env_prefix", ""))
    names = set()
    for field_name, field in settings.model_fields.items():
        alias = field.validation_alias
        names.add(alias.upper() if isinstance(alias, str) else f"{prefix}{field_name}".upper())
    return names


def _declared() -> set[str]:
    return set().union(*(_names(s) for s in SETTINGS))


def _k8s_names() -> set[str]:
    names: set[str] = set()
    for path in K8S_BASE.glob("*.yaml"):
        if path.name in {"kustomization.yaml", "secret.example.yaml"}:
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc["kind"] == "ConfigMap":
                names |= set(doc["data"])
            spec = doc.get("spec", {}).get("template", {}).get("spec", {})
            for container in spec.get("containers", []):
                names |= {env["name"] for env in container.get("env", [])}
    return names


def _compose_names() -> set[str]:
    compose = yaml.safe_load((ROOT / "deploy" / "docker-compose.yml").read_text())
    names: set[str] = set()
    for service in compose["services"].values():
        names |= {n for n in service.get("environment", {}) if n.startswith("BILLING_")}
    return names


def test_the_declared_names_are_the_ones_the_settings_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The name rule used below (prefix + field, or the alias) is how the classes read."""
    monkeypatch.setenv("BILLING_COLLECTOR_MAX_IN_FLIGHT", "7")
    monkeypatch.setenv("BILLING_GATEWAY_SIM_PORT", "8111")
    assert CollectorSettings().collector_max_in_flight == 7
    assert GatewaySimSettings().port == 8111
    assert {"BILLING_COLLECTOR_MAX_IN_FLIGHT", "BILLING_GATEWAY_SIM_PORT"} <= _declared()


def test_kubernetes_sets_only_declared_settings() -> None:
    names = _k8s_names()
    assert "BILLING_DATABASE_URL" in names
    assert names - _declared() == set()


def test_compose_sets_only_declared_settings() -> None:
    names = _compose_names()
    assert "BILLING_DATABASE_URL" in names
    assert names - _declared() == set()


def _configmap() -> dict[str, str]:
    doc = yaml.safe_load((K8S_BASE / "configmap.yaml").read_text())
    return dict(doc["data"])


def _container_port(process: str, name: str | None = None) -> int:
    """The container's port (its only one, or the one called ``name``)."""
    docs = yaml.safe_load_all((K8S_BASE / f"{process}.yaml").read_text())
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    if name is None:
        (port,) = container["ports"]
    else:
        (port,) = [p for p in container["ports"] if p["name"] == name]
    return int(port["containerPort"])


def test_processes_listen_where_the_probes_point(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each settings class, built from the ConfigMap, binds every interface on the port the
    container declares (probes and scrapes go to that port)."""
    for name, value in _configmap().items():
        monkeypatch.setenv(name, value)
    api = ApiSettings()
    renewer = RenewerSettings()
    collector = CollectorSettings()
    relay = RelaySettings()
    assert (api.health_host, api.api_internal_port) == (
        "0.0.0.0",
        _container_port("api", "metrics"),
    )
    listening = {
        "api": (api.api_host, api.api_port),
        "renewer": (renewer.health_host, renewer.renewer_health_port),
        "collector": (collector.health_host, collector.collector_health_port),
        "relay": (relay.health_host, relay.relay_health_port),
    }
    for process, (host, port) in listening.items():
        assert host == "0.0.0.0", process
        assert port == _container_port(process, "http" if process == "api" else None), process


def test_collector_drain_outlasts_a_gateway_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """On SIGTERM the collector waits BILLING_COLLECTOR_SHUTDOWN_TIMEOUT_SECONDS for its calls
    in flight: shorter than one call (connect + read timeouts), a call started just before the
    signal would be cancelled with its answer unrecorded (a needless UNKNOWN). The loop's stop
    and the drain share that one budget; the pod's grace period covers the preStop pause (5 s),
    the budget, and the cancellation of stragglers (2 s)."""
    for name, value in _configmap().items():
        monkeypatch.setenv(name, value)
    collector = CollectorSettings()
    call = collector.collector_connect_timeout_seconds + collector.collector_read_timeout_seconds
    assert collector.collector_shutdown_timeout_seconds >= call
    docs = yaml.safe_load_all((K8S_BASE / "collector.yaml").read_text())
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace >= 5 + collector.collector_shutdown_timeout_seconds + 2


def _renames() -> list[tuple[type[BaseSettings], str, str]]:
    return [
        (cls, old, field)
        for cls in SETTINGS
        for old, field in {**CoreSettings.RENAMED, **getattr(cls, "RENAMED", {})}.items()
    ]


@pytest.mark.parametrize(
    ("cls", "old", "field"),
    _renames(),
    ids=lambda v: v.__name__ if isinstance(v, type) else str(v),
)
def test_a_renamed_setting_is_still_read_under_its_old_name_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, cls: type[BaseSettings], old: str, field: str
) -> None:
    value = "0.0.0.0" if field.endswith("host") else "7"
    monkeypatch.setenv(old, value)
    with pytest.warns(RenamedSetting, match=f"{old} is a renamed setting; use BILLING_"):
        settings = cls()
    assert str(getattr(settings, field)) in (value, "7.0")
    # The current name wins over the old one, silently.
    monkeypatch.setenv(current_name(cls, field), "0.0.0.0" if field.endswith("host") else "9")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RenamedSetting)
        assert str(getattr(cls(), field)) in ("0.0.0.0", "9", "9.0")


def test_the_deployment_uses_no_old_name() -> None:
    old_names = {old for _, old, _ in _renames()}
    assert (_k8s_names() | _compose_names()) & old_names == set()


def test_the_simulator_reads_only_its_own_host_and_port(monkeypatch: pytest.MonkeyPatch) -> None:
    """The API's old BILLING_HOST/BILLING_PORT in a shared environment are not the simulator's."""
    monkeypatch.setenv("BILLING_HOST", "0.0.0.0")
    monkeypatch.setenv("BILLING_PORT", "8000")
    sim = GatewaySimSettings()
    assert (sim.host, sim.port) == ("127.0.0.1", 8100)


@pytest.mark.parametrize("prefix", ["prod-", "eu-staging-", ""])
def test_a_gateway_key_prefix_is_a_short_lowercase_name_ending_in_a_dash(prefix: str) -> None:
    assert CoreSettings(gateway_key_prefix=prefix).gateway_key_prefix == prefix


@pytest.mark.parametrize("prefix", ["prod", "Prod-", "prod_", "-", "a" * 25 + "-"])
def test_other_gateway_key_prefixes_are_refused(prefix: str) -> None:
    with pytest.raises(ValueError, match="gateway_key_prefix"):
        CoreSettings(gateway_key_prefix=prefix)
