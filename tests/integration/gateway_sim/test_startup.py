"""Bad settings stop the simulator at start with a message naming the setting."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.integration.gateway_sim.conftest import ROOT, free_port


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"BILLING_GATEWAY_SIM_DECLINE_RATE": "1.5"}, "BILLING_GATEWAY_SIM_DECLINE_RATE"),
        (
            {
                "BILLING_GATEWAY_SIM_LATENCY_MIN_MS": "500",
                "BILLING_GATEWAY_SIM_LATENCY_MAX_MS": "1",
            },
            "latency_min_ms",
        ),
        ({"BILLING_GATEWAY_SIM_WEBHOOK_URL": "http://127.0.0.1:1/x"}, "webhook_secret"),
    ],
)
def test_bad_settings_fail_at_start(env: dict[str, str], named: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "services.gateway_sim"],
        cwd=ROOT,
        env={**os.environ, "BILLING_GATEWAY_SIM_PORT": str(free_port()), **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert "invalid settings" in result.stderr
    assert named in result.stderr
