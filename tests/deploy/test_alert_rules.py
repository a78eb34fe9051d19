"""Alerts and dashboards as code: the rules pass `promtool check rules`, their unit tests pass
`promtool test rules`, and the rules, the PrometheusRule, the PodMonitor and the dashboard name
only metrics, ports and alerts that exist.

promtool comes from scripts/promtool.sh, which installs it (the Debian `prometheus` package)
when the machine lacks it: these tests never skip for want of it.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from services.ops.contracts import monitoring
from tests.deploy.kustomize import render
from tests.deploy.test_operations_doc import (
    OPERATIONS,
    _defined_in_code,
    _metric_names_mentioned,
    _section,
)

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "rules.yaml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "rules.test.yaml"
MONITORING = ROOT / "deploy" / "k8s" / "monitoring"
DASHBOARD = MONITORING / "dashboards" / "first-of-month.json"
OVERLAY = ROOT / "deploy" / "k8s" / "overlays" / "example"


@pytest.fixture(scope="module")
def promtool() -> str:
    found = subprocess.run(
        [str(ROOT / "scripts" / "promtool.sh")], capture_output=True, text=True, check=False
    )
    assert found.returncode == 0, f"scripts/promtool.sh could not provide promtool:\n{found.stderr}"
    return found.stdout.strip()


def _run(promtool: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def _rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def _alert_names() -> set[str]:
    return {rule["alert"] for rule in _rules()}


def test_promtool_check_rules_accepts_the_rules(promtool: str) -> None:
    done = _run(promtool, "check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in done.stdout


def test_promtool_check_rules_rejects_a_broken_expression(promtool: str, tmp_path: Path) -> None:
    broken = tmp_path / "rules.yaml"
    broken.write_text(RULES.read_text().replace("max(billing_relay_parked_events) > 0", "max(("))
    done = _run(promtool, "check", "rules", str(broken))
    assert done.returncode != 0


def test_promtool_test_rules_passes_the_alert_unit_tests(promtool: str) -> None:
    done = _run(promtool, "test", "rules", str(RULE_TESTS), cwd=RULE_TESTS.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_promtool_test_rules_fails_when_a_threshold_changes(promtool: str, tmp_path: Path) -> None:
    """The unit tests pin the thresholds: raising one makes them fail."""
    (tmp_path / "rules.yaml").write_text(
        RULES.read_text().replace("billing_collector_oldest_due_age_seconds) > 1200", "x) > 1e9")
    )
    (tmp_path / "rules.test.yaml").write_text(RULE_TESTS.read_text())
    done = _run(promtool, "test", "rules", "rules.test.yaml", cwd=tmp_path)
    assert done.returncode != 0
    assert "BillingCollectionLate" in done.stdout + done.stderr


def test_every_alert_has_unit_tests() -> None:
    cases = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    tested = {
        check["alertname"]
        for case in cases
        for check in case["alert_rule_test"]
        if check.get("exp_alerts")
    }
    assert tested == _alert_names()


def test_rules_and_dashboard_name_only_metrics_the_code_exports() -> None:
    defined = set(_defined_in_code())
    for path in (RULES, DASHBOARD):
        assert _metric_names_mentioned(path.read_text()) - defined == set(), path.name


def test_the_operations_alert_table_and_the_rules_agree() -> None:
    """Every rule is described in docs/OPERATIONS.md ("Alerts"), and every alert name there is
    a rule."""
    section = _section(OPERATIONS.read_text(), "### Alerts")
    named = set(re.findall(r"`(Billing[A-Za-z]+)`", section))
    assert named == _alert_names()


def test_the_prometheus_rule_carries_exactly_the_rules_file() -> None:
    rendered = yaml.safe_load((ROOT / monitoring.PROMETHEUS_RULE_PATH).read_text())
    assert rendered["kind"] == "PrometheusRule"
    assert rendered["spec"] == yaml.safe_load(RULES.read_text())


def test_the_monitoring_kustomization_renders_rules_podmonitor_and_dashboard() -> None:
    resources = {r["kind"]: r for r in render(MONITORING)}
    assert set(resources) == {"PrometheusRule", "PodMonitor", "ConfigMap"}
    dashboard = json.loads(resources["ConfigMap"]["data"]["first-of-month.json"])
    assert dashboard["uid"] == "billing-first-of-month"
    assert resources["ConfigMap"]["metadata"]["labels"]["grafana_dashboard"] == "1"


def test_the_podmonitor_scrapes_the_metrics_port_of_every_billing_pod() -> None:
    """Each pod's /metrics is on the port its prometheus.io/port annotation names (the API's
    internal port, a worker's health port), and only there."""
    podmonitor = yaml.safe_load((MONITORING / "podmonitor.yaml").read_text())
    ports = {e["port"] for e in podmonitor["spec"]["podMetricsEndpoints"]}
    selector = podmonitor["spec"]["selector"]["matchLabels"]
    deployments = [r for r in render(OVERLAY) if r["kind"] == "Deployment"]
    assert len(deployments) == 4
    for deployment in deployments:
        template = deployment["spec"]["template"]
        assert selector.items() <= template["metadata"]["labels"].items()
        scraped = {
            p["containerPort"]
            for c in template["spec"]["containers"]
            for p in c.get("ports", [])
            if p["name"] in ports
        }
        metrics_port = int(template["metadata"]["annotations"]["prometheus.io/port"])
        assert scraped == {metrics_port}, deployment["metadata"]["name"]
