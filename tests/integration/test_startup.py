"""Workers fail fast at start, with a clear message: bad settings (2), no database (3)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.support.processes import ROOT, free_port

WORKERS = ["services.renewer", "services.collector", "services.relay"]


def run(module: str, env: dict[str, str]) -> tuple[int, str, float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", module],
        check=False,
        cwd=ROOT,
        env={**os.environ, "BILLING_LOG_JSON": "false", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, done.stderr, time.monotonic() - started


@pytest.mark.slow
@pytest.mark.parametrize("module", WORKERS)
def test_an_unreachable_database_stops_the_worker_at_start(module: str) -> None:
    closed = free_port()
    code, stderr, took = run(
        module,
        {
            "BILLING_DATABASE_URL": f"postgresql+asyncpg://billing@127.0.0.1:{closed}/billing",
            "BILLING_STARTUP_TIMEOUT_SECONDS": "2",
        },
    )
    assert code == 3
    assert "did not answer within 2 s" in stderr
    assert "BILLING_DATABASE_URL" in stderr
    assert "Traceback" not in stderr
    assert took < 30


@pytest.mark.parametrize("module", WORKERS)
def test_an_invalid_setting_is_named_and_stops_the_worker(module: str) -> None:
    code, stderr, _ = run(module, {"BILLING_DB_POOL_SIZE": "not-a-number"})
    assert code == 2
    assert "invalid settings" in stderr and "db_pool_size" in stderr
    assert "Traceback" not in stderr
