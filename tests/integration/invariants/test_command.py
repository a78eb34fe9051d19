"""``billing check`` against the test database and topic: exit 0, or 1 with the offenders."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest
from sqlalchemy import text

from tests.integration.invariants.conftest import Scene
from tests.support.processes import ROOT


async def billing_check(scene: Scene) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable,
        "-m",
        "services.cli",
        "check",
        "--gateway-url",
        "",
        "--topic",
        scene.topic,
        "--now",
        scene.world.now.isoformat(),
    ]
    env = {**os.environ, "COLUMNS": "250", "BILLING_LOG_JSON": "false"}
    return await asyncio.to_thread(
        subprocess.run, command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
async def test_billing_check_exits_1_on_a_violation(scene: Scene) -> None:
    await scene.world.publish(scene.bootstrap, scene.topic)
    clean = await billing_check(scene)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "no violation" in clean.stdout

    inv = scene.world.invoices[("a", 1)]
    async with scene.engine.begin() as conn:
        await conn.execute(text("DELETE FROM payment_attempt WHERE invoice_id = :i"), {"i": inv})
    broken = await billing_check(scene)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert f"invoice {inv}: PAID (990) with no SUCCESS payment attempt" in broken.stdout
    assert "1 VIOLATION(S)" in broken.stdout
