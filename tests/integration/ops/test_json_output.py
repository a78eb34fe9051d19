"""``billing status --json`` and ``billing check --json``: one JSON document on stdout for
scripts and CI, the same figures as the tables, and check's exit code unchanged."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

from billing_core.db import pg
from tests.support.factories import create_invoice, create_subscription
from tests.support.processes import ROOT

NOW = datetime(2026, 12, 5, 8, tzinfo=UTC)


async def billing(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BILLING_LOG_JSON": "true"}
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "services.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def document(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(done.stdout)  # stdout is the document and nothing else
    return parsed


async def test_status_json_has_the_backlogs(pool: pg.Pool) -> None:
    async with pg.transaction(pool) as conn:
        for customer in (1, 2):
            await create_subscription(conn, customer_id=customer, start=NOW - timedelta(days=40))
        await create_subscription(conn, customer_id=3, start=NOW, status="CANCELED")
    done = await billing("status", "--json")
    assert done.returncode == 0, done.stderr
    status = document(done)
    by_status = {row["status"]: row for row in status["subscriptions"]}
    assert by_status["ACTIVE"]["n"] == 2
    assert by_status["ACTIVE"]["due"] == 2  # their 30-day periods are over
    assert by_status["CANCELED"]["n"] == 1
    assert status["outbox"]["unpublished"] == 0
    assert status["gateway"]["redis_reachable"] is True
    assert status["at"].endswith("Z")


async def test_check_json_lists_every_violation_and_keeps_the_exit_code(
    pool: pg.Pool,
) -> None:
    args = ("check", "--json", "--no-kafka", "--gateway-url", "", "--now", NOW.isoformat())
    clean = await billing(*args)
    assert clean.returncode == 0, clean.stderr
    assert document(clean)["ok"] is True

    async with pg.transaction(pool) as conn:
        sub = await create_subscription(conn, customer_id=9, start=NOW - timedelta(days=10))
        paid = await create_invoice(
            conn,
            subscription_id=sub,
            customer_id=9,
            amount=990,
            next_attempt_at=NOW,
            period_start=NOW - timedelta(days=10),
            status="PAID",
        )
        await conn.execute(
            "UPDATE invoice SET paid_at = $1, closed_at = $1 WHERE id = $2",
            NOW - timedelta(days=9),
            paid,
        )
    broken = await billing(*args)
    assert broken.returncode == 1, broken.stderr
    report = document(broken)
    assert report["ok"] is False and report["violation_count"] >= 1
    offenders = [v for c in report["checks"] for v in c["violations"]]
    assert any(v["subject"] == "invoice" and v["id"] == paid for v in offenders), offenders
    assert {"name", "description", "checked", "skipped", "violations"} <= set(report["checks"][0])
