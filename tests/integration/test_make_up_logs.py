"""``make up`` with BILLING_LOG_JSON=true logs JSON lines only, each with its logger name: the
processes' own lines, uvicorn's, the libraries' and the supervisor's."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.infra import Services
from tests.support.system import System, running_system

RUN_SECONDS = 20


@pytest.fixture
def system(services: Services, tmp_path: Path) -> Iterator[System]:
    with running_system(services, "logs", tmp_path, log_json=True) as up:
        yield up


@pytest.mark.slow
def test_make_up_logs_are_json_lines_with_a_logger_name(system: System) -> None:
    key = system.cli("create-api-key", "logs").stdout.strip().splitlines()[-1]
    auth = {"Authorization": f"Bearer {key}"}
    deadline = time.monotonic() + RUN_SECONDS
    n = 1
    while time.monotonic() < deadline:  # some traffic: requests, invoices, charges, webhooks
        customer = httpx.post(
            f"{system.api_url}/customers",
            json={"externalId": f"logs-{n}"},
            headers={**auth, "Idempotency-Key": f"logs-customer-{n}"},
            timeout=10,
        )
        assert customer.status_code == 201, customer.text
        httpx.post(
            f"{system.api_url}/subscriptions",
            json={"customerId": customer.json()["id"], "planCode": "PRO_MONTHLY"},
            headers={**auth, "Idempotency-Key": f"logs-{n}"},
            timeout=10,
        )
        httpx.get(f"{system.api_url}/nowhere", headers=auth, timeout=10)
        n += 1
        time.sleep(0.5)
    assert system.stop()

    lines = system.log_path.read_text().splitlines()
    assert len(lines) > 20
    records = []
    for line in lines:
        record = json.loads(line)
        assert isinstance(record, dict), line
        assert record.get("logger"), line
        assert record.get("process"), line
        records.append(record)
    loggers = {r["logger"] for r in records}
    assert "uvicorn.error" in loggers  # uvicorn's own lines, through the same pipeline
    assert "supervisor" in loggers  # the supervisor's "started"/"stopped" lines
    assert any(name.startswith("services.") for name in loggers)
    assert {r["process"] for r in records} >= {"billing.api", "run-all"}
    if Path("/proc/self/autogroup").exists():  # Linux shares the CPU between sessions first
        # the notifier's `nice -n 10` counts: its session (of its own) took the value
        assert any(
            r["event"] == "session_priority" and r.get("nice") == 10
            for r in records
            if r["process"] == "billing.notifier"
        ), [r for r in records if r["process"] == "billing.notifier"][:5]
