"""API writes race with the renewer: whoever commits second gets 409, nothing is overwritten.

The "renewer" here is a real concurrent transaction doing the renewer's kind of write (advance
the period, bump the version) on its own connection, not a mock.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from billing_core.clock import ManualClock
from tests.integration.api.helpers import assert_problem, rows, scalar, subscribe

RENEWAL_STYLE_UPDATE = text(
    """
    UPDATE subscription
       SET period_index = period_index + 1,
           current_period_start = current_period_end,
           current_period_end = current_period_end + interval '1 month',
           version = version + 1,
           updated_at = now()
     WHERE id = :id
    """
)


async def wait_until_blocked(engine: AsyncEngine, blocker: AsyncConnection) -> None:
    pid = (await blocker.execute(text("SELECT pg_backend_pid()"))).scalar_one()
    async with asyncio.timeout(10):
        while True:
            waiting = await scalar(
                engine,
                "SELECT count(*) FROM pg_stat_activity WHERE :pid = ANY(pg_blocking_pids(pid))",
                pid=pid,
            )
            if waiting:
                return
            await asyncio.sleep(0.02)


async def test_cancel_loses_to_a_concurrently_committed_renewal(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    sub = await subscribe(client)
    cancel_key = str(uuid.uuid4())
    async with engine.connect() as renewer:
        await renewer.execute(RENEWAL_STYLE_UPDATE, {"id": sub["id"]})  # holds the row lock
        cancel = asyncio.create_task(
            client.post(
                f"/subscriptions/{sub['id']}/cancel",
                json={"atPeriodEnd": False},
                headers={"Idempotency-Key": cancel_key},
            )
        )
        await wait_until_blocked(engine, renewer)  # the API read version 0 and now waits
        await renewer.commit()
        response = await cancel
    problem = assert_problem(response, 409, "version-conflict")
    assert problem["currentVersion"] == 1
    state = (await rows(engine, "SELECT * FROM subscription WHERE id = :i", i=sub["id"]))[0]
    assert (state["status"], state["period_index"], state["version"]) == ("ACTIVE", 1, 1)
    # The cancel's other effects rolled back with it.
    invoice_status = "SELECT status FROM invoice WHERE subscription_id = :i"
    assert await scalar(engine, invoice_status, i=sub["id"]) == "OPEN"
    assert (
        await scalar(engine, "SELECT count(*) FROM idempotency_key WHERE key = :k", k=cancel_key)
        == 0
    )

    # The client re-reads and retries: now it applies.
    retry = await client.post(
        f"/subscriptions/{sub['id']}/cancel",
        json={"atPeriodEnd": False},
        headers={"If-Match": '"1"'},
    )
    assert retry.status_code == 200, retry.text
    assert (retry.json()["status"], retry.json()["version"]) == ("CANCELED", 2)


async def test_change_plan_loses_to_a_concurrently_committed_renewal(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    sub = await subscribe(client)
    clock.advance(timedelta(days=2))
    async with engine.connect() as renewer:
        await renewer.execute(RENEWAL_STYLE_UPDATE, {"id": sub["id"]})
        change = asyncio.create_task(
            client.post(f"/subscriptions/{sub['id']}/change-plan", json={"planCode": "PRO_MONTHLY"})
        )
        await wait_until_blocked(engine, renewer)
        await renewer.commit()
        response = await change
    assert assert_problem(response, 409, "version-conflict")["currentVersion"] == 1
    assert await scalar(engine, "SELECT count(*) FROM invoice WHERE kind = 'PRORATION'") == 0
    assert await scalar(engine, "SELECT count(*) FROM credit_entry") == 0
    plan = await scalar(
        engine,
        "SELECT p.code FROM subscription s JOIN plan p ON p.id = s.plan_id WHERE s.id = :i",
        i=sub["id"],
    )
    assert plan == "BASIC_MONTHLY"


async def test_stale_expected_version_is_409_before_any_write(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    sub = await subscribe(client)
    async with engine.begin() as renewer:
        await renewer.execute(RENEWAL_STYLE_UPDATE, {"id": sub["id"]})
    by_header = await client.post(
        f"/subscriptions/{sub['id']}/cancel",
        json={"atPeriodEnd": True},
        headers={"If-Match": '"0"'},
    )
    assert assert_problem(by_header, 409, "version-conflict")["currentVersion"] == 1
    by_body = await client.post(
        f"/subscriptions/{sub['id']}/change-plan",
        json={"planCode": "PRO_MONTHLY", "expectedVersion": 0},
    )
    assert assert_problem(by_body, 409, "version-conflict")["currentVersion"] == 1
    bad = await client.post(
        f"/subscriptions/{sub['id']}/cancel", json={"atPeriodEnd": True}, headers={"If-Match": "x"}
    )
    assert_problem(bad, 400, "invalid-if-match")
    current = await client.post(
        f"/subscriptions/{sub['id']}/cancel",
        json={"atPeriodEnd": True},
        headers={"If-Match": '"1"'},
    )
    assert current.status_code == 200
    assert current.json()["version"] == 2
