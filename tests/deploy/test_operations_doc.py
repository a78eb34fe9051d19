"""docs/OPERATIONS.md names the metrics the code emits, and the autoscalers scale on real gauges.

A renamed metric silently breaks a dashboard, an alert or an autoscaler (Prometheus answers an
unknown name with an empty result, not an error), so the names are checked against the code.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import prometheus_client
import pytest
import yaml

from tests.deploy.kustomize import render

ROOT = Path(__file__).resolve().parents[2]
OPERATIONS = ROOT / "docs" / "OPERATIONS.md"
OVERLAY = ROOT / "deploy" / "k8s" / "overlays" / "example"

DEFINITION = re.compile(r"\b(Counter|Gauge|Histogram|Summary)\(\s*\"(billing_[a-z0-9_]+)\"")
# Modules that define metrics on the default registry (the simulator uses registries of its own).
METRIC_MODULES = [
    "billing_core.runtime.build_info",
    "billing_core.runtime.garbage_collection",
    "services.api.middleware",
    "services.renewer.metrics",
    "services.collector.metrics",
    "services.relay.metrics",
    "billing_core.consumer",
]
METRIC_PREFIXES = (
    "api",
    "renewer",
    "collector",
    "relay",
    "consumer",
    "gateway_sim",
    "build",
    "gc",
)
# Series PromQL derives from a histogram or summary.
DERIVED_SUFFIXES = ("_bucket", "_sum", "_count")


def _defined_in_code() -> dict[str, str]:
    """Metric name -> type, for every metric defined in libs/ and services/."""
    found: dict[str, str] = {}
    for folder in ("libs", "services"):
        for path in (ROOT / folder).rglob("*.py"):
            for kind, name in DEFINITION.findall(path.read_text()):
                assert name not in found, f"{name} defined twice"
                found[name] = kind.lower()
    return found


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n{heading}\n")
    end = text.find("\n#", start + len(heading) + 2)
    return text[start : end if end != -1 else len(text)]


def _documented() -> dict[str, str]:
    """Metric name -> type, from the table under "### Metric names"."""
    table = _section(OPERATIONS.read_text(), "### Metric names")
    documented: dict[str, str] = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not cells[0].startswith("`billing_"):
            continue
        name = cells[0].strip("`").split("{", 1)[0]
        assert name not in documented, f"{name} listed twice"
        documented[name] = cells[1]
    return documented


def _metric_names_mentioned(text: str) -> set[str]:
    prefixes = "|".join(METRIC_PREFIXES)
    names = set(re.findall(rf"\bbilling_(?:{prefixes})_[a-z0-9_]+", text))
    return {_series_to_metric(n) for n in names}


def _series_to_metric(series: str) -> str:
    for suffix in DERIVED_SUFFIXES:
        if series.endswith(suffix):
            return series.removesuffix(suffix)
    return series


def test_the_source_scan_finds_every_registered_metric() -> None:
    """The scan above is the source of truth for the other tests: it must not miss a metric
    defined some other way (the registry is what /metrics actually serves)."""
    for module in METRIC_MODULES:
        importlib.import_module(module)
    registered = {
        family.name
        for family in prometheus_client.REGISTRY.collect()
        if family.name.startswith("billing_")
    }
    scanned = {name.removesuffix("_total") for name in _defined_in_code()}
    assert registered, "no billing_ metric registered: the modules above moved"
    assert registered <= scanned


def test_every_metric_in_code_is_documented_with_its_type() -> None:
    assert _documented() == _defined_in_code()


def test_the_document_mentions_no_metric_the_code_lacks() -> None:
    """Alerts, scaling notes and outage notes name only metrics that exist."""
    mentioned = _metric_names_mentioned(OPERATIONS.read_text())
    assert mentioned - set(_defined_in_code()) == set()


@pytest.mark.parametrize(
    "path",
    [
        ROOT / "deploy" / "k8s" / "prometheus-adapter-rules.yaml",
        *sorted((ROOT / "deploy" / "k8s" / "base").glob("*.yaml")),
    ],
    ids=lambda p: p.name,
)
def test_deploy_files_mention_no_metric_the_code_lacks(path: Path) -> None:
    assert _metric_names_mentioned(path.read_text()) - set(_defined_in_code()) == set()


def test_worker_autoscalers_scale_on_a_gauge_of_their_own_process() -> None:
    """An external metric the process does not export leaves the HPA without data (it then
    stops scaling); a counter would scale on a total that only grows."""
    defined = _defined_in_code()
    scalers = [r for r in render(OVERLAY) if r["kind"] == "HorizontalPodAutoscaler"]
    checked = 0
    for scaler in scalers:
        process = scaler["spec"]["scaleTargetRef"]["name"].removeprefix("billing-")
        for metric in scaler["spec"]["metrics"]:
            if metric["type"] != "External":
                continue
            name = metric["external"]["metric"]["name"]
            assert defined.get(name) == "gauge", f"{name}: not a gauge in the code"
            module = importlib.import_module(f"services.{process}.metrics")
            exported = {
                family.name
                for value in vars(module).values()
                if isinstance(value, prometheus_client.Gauge)
                for family in value.describe()
            }
            assert name in exported, f"{name} is not exported by the {process}"
            checked += 1
    assert checked == 3  # renewer, collector, relay


def test_adapter_rules_serve_each_metric_as_one_value() -> None:
    """Every replica reports the same database-wide gauge: the adapter must take the max, not a
    sum (which would multiply the backlog by the replica count and scale up without end)."""
    rules = yaml.safe_load((ROOT / "deploy" / "k8s" / "prometheus-adapter-rules.yaml").read_text())
    for rule in rules["rules"]["external"]:
        assert rule["metricsQuery"].startswith("max("), rule["name"]["as"]


# The unit (or counted thing) a gauge or histogram name ends with; `info` and `closed` are the
# two conventional exceptions (an info metric, a 0/1 state).
UNIT_NOUNS = (
    "_seconds",
    "_subscriptions",
    "_invoices",
    "_events",
    "_calls",
    "_results",
    "_shards",
    "_members",
    "_deliveries",
    "_info",
    "_closed",
)


def test_metric_names_follow_the_prometheus_conventions() -> None:
    """Counters end in `_total`, nothing else does; times are in `_seconds`; every other name
    ends with what it counts."""
    for name, kind in _defined_in_code().items():
        if kind == "counter":
            assert name.endswith("_total"), name
            continue
        assert not name.endswith("_total"), f"{name}: a {kind} named like a counter"
        assert name.endswith(UNIT_NOUNS), f"{name}: no unit noun"
        if any(word in name for word in ("duration", "latency", "wait", "age")):
            assert name.endswith("_seconds"), name


def test_every_process_exports_its_build() -> None:
    from billing_core.runtime import build_info  # noqa: PLC0415

    build_info.publish("tests")
    samples = [
        s
        for family in prometheus_client.REGISTRY.collect()
        if family.name == "billing_build_info"
        for s in family.samples
        if s.labels["process"] == "tests"
    ]
    assert [(s.value, s.labels["version"]) for s in samples] == [(1.0, build_info.version())]
    assert build_info.version() != "unknown"  # the package is installed (make venv)
