"""The gateway simulator and collector processes, started for real on free ports."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.processes import SIMULATOR_NICE, Proc, free_port, start


class Simulator:
    def __init__(self, proc: Proc) -> None:
        self.proc = proc
        self.url = f"http://127.0.0.1:{proc.url.rsplit(':', 1)[1]}" if proc.url else ""

    def config(self, **changes: Any) -> None:
        httpx.post(f"{self.url}/v1/admin/config", json=changes, timeout=5).raise_for_status()

    def reset(self) -> None:
        httpx.post(f"{self.url}/v1/admin/reset", timeout=5).raise_for_status()

    def summary(self) -> dict[str, Any]:
        response = httpx.get(f"{self.url}/v1/ledger/summary", timeout=10)
        response.raise_for_status()
        return dict(response.json())

    def charges(self, invoice_id: int) -> list[dict[str, Any]]:
        response = httpx.get(
            f"{self.url}/v1/ledger/charges", params={"invoiceId": invoice_id}, timeout=5
        )
        response.raise_for_status()
        return list(response.json())

    def decline_until(self, customer_id: int, until: str, code: str = "insufficient_funds") -> None:
        httpx.post(
            f"{self.url}/v1/admin/customers/{customer_id}/decline-until",
            json={"until": until, "code": code},
            timeout=5,
        ).raise_for_status()


@pytest.fixture(scope="module")
def simulator_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    port = free_port()
    proc = start(
        "gateway-sim",
        "services.gateway_sim",
        {"BILLING_GATEWAY_SIM_PORT": str(port), "BILLING_GATEWAY_SIM_SEED": "7"},
        tmp_path_factory.mktemp("sim"),
        ready_url=f"http://127.0.0.1:{port}/healthz",
        nice=SIMULATOR_NICE,
    )
    yield proc
    proc.terminate()


@pytest.fixture
def simulator(simulator_process: Proc) -> Simulator:
    sim = Simulator(simulator_process)
    sim.reset()
    sim.config(latency_min_ms=10, latency_max_ms=30, rate_limit_per_second=200)
    return sim


class Collectors:
    """Starts collector processes against the simulator; stops them all at the end."""

    def __init__(self, sim: Simulator, log_dir: Path, database_url: str) -> None:
        self.sim = sim
        self.log_dir = log_dir
        self.key = f"test:{uuid.uuid4().hex[:10]}:permits"
        self.database_url = database_url
        self.procs: list[Proc] = []

    def start(self, *, clock_skew_seconds: float = 0, **env: str) -> Proc:
        """A collector process; ``clock_skew_seconds``: its host clock that far off."""
        port = free_port()
        settings = {
            "BILLING_DATABASE_URL": self.database_url,
            "BILLING_COLLECTOR_GATEWAY_URL": self.sim.url,
            "BILLING_COLLECTOR_HEALTH_PORT": str(port),
            "BILLING_COLLECTOR_RATE_LIMIT_KEY": self.key,
            "BILLING_COLLECTOR_POLL_INTERVAL_SECONDS": "0.2",
            "BILLING_COLLECTOR_RNG_SEED": "3",
            **env,
        }
        module = "services.collector"
        if clock_skew_seconds:
            settings["TEST_CLOCK_SKEW_SECONDS"] = str(clock_skew_seconds)
            settings["TEST_SKEWED_MODULE"] = module
            module = "tests.support.skewed_clock"
        proc = start(
            f"collector-{len(self.procs)}",
            module,
            settings,
            self.log_dir,
            ready_url=f"http://127.0.0.1:{port}/readyz",
        )
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.alive():
                proc.terminate()


@pytest.fixture
def collectors(
    simulator: Simulator, tmp_path: Path, database_url: str, engine: object
) -> Iterator[Collectors]:
    group = Collectors(simulator, tmp_path, database_url)
    yield group
    group.stop_all()
