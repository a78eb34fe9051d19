"""``make up`` with BILLING_LOG_JSON=true logs JSON lines only, each with its logger name: the
processes' own lines, uvicorn's, the libraries' and the supervisor's; the Procfile's nice values
count, for each process and its session."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.infra import Services
from tests.support.system import System, running_system

RUN_SECONDS = 20
AUTOGROUP = Path("/proc/self/autogroup")
# The Procfile's `nice -n` values (a negative one is granted to root only).
NICED = {
    name: nice
    for name, nice in {"notifier": 10, "gateway": -10}.items()
    if nice > 0 or os.geteuid() == 0
}


def started_pid(log_path: Path, name: str) -> int:
    """The pid the supervisor said it started the Procfile's process ``name`` with."""
    started = re.compile(rf"{name}\.1 started \(pid=(\d+)\)")
    for line in log_path.read_text().splitlines():
        found = started.search(json.loads(line)["event"])
        if found:
            return int(found[1])
    raise AssertionError(f"{name} never started")


def nice_values(pid: int) -> tuple[int, int | None]:
    """A running process's nice value, and its session's where the kernel groups by session."""
    autogroup = Path(f"/proc/{pid}/autogroup")
    session = int(autogroup.read_text().split()[-1]) if AUTOGROUP.exists() else None
    return os.getpriority(os.PRIO_PROCESS, pid), session


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
    niced = {name: nice_values(started_pid(system.log_path, name)) for name in NICED}
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
    base = os.getpriority(os.PRIO_PROCESS, 0)
    for name, nice in NICED.items():  # the Procfile's `nice -n`, for the process and its session
        expected = max(-20, min(19, base + nice))
        assert niced[name] == (expected, expected if AUTOGROUP.exists() else None), name
