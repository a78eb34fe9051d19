"""API writes race with the renewer. A write that names the version it read (If-Match or
``expectedVersion``) and commits second gets 409, nothing is overwritten; a write that names no
version runs again on the row as the renewal left it.

The "renewer" here is a real concurrent transaction doing the renewer's kind of write (advance
the period, bump the version, stamp it with its clock) on its own connection, not a mock.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timedelta

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
           updated_at = :now
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


async def test_a_cancel_at_a_version_loses_to_a_concurrently_committed_renewal(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    sub = await subscribe(client)
    cancel_key = str(uuid.uuid4())
    async with engine.connect() as renewer:
        await renewer.execute(
            RENEWAL_STYLE_UPDATE, {"id": sub["id"], "now": clock.now()}
        )  # holds the row lock
        cancel = asyncio.create_task(
            client.post(
                f"/subscriptions/{sub['id']}/cancel",
                json={"atPeriodEnd": False},
                headers={"Idempotency-Key": cancel_key, "If-Match": '"0"'},
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


async def test_a_cancel_without_a_version_applies_after_a_concurrent_renewal(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    sub = await subscribe(client)
    async with engine.connect() as renewer:
        await renewer.execute(RENEWAL_STYLE_UPDATE, {"id": sub["id"], "now": clock.now()})
        cancel = asyncio.create_task(
            client.post(f"/subscriptions/{sub['id']}/cancel", json={"atPeriodEnd": True})
        )
        await wait_until_blocked(engine, renewer)  # the API read version 0 and now waits
        await renewer.commit()
        response = await cancel
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["version"], body["periodIndex"], body["cancelAtPeriodEnd"]) == (2, 1, True)
    audit = await rows(
        engine,
        "SELECT version_before, version_after FROM audit_event WHERE subject_id = :i",
        i=sub["id"],
    )
    assert [(a["version_before"], a["version_after"]) for a in audit][-1:] == [(1, 2)]


async def test_a_plan_change_at_a_version_loses_to_a_concurrently_committed_renewal(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    sub = await subscribe(client)
    clock.advance(timedelta(days=2))
    async with engine.connect() as renewer:
        await renewer.execute(RENEWAL_STYLE_UPDATE, {"id": sub["id"], "now": clock.now()})
        change = asyncio.create_task(
            client.post(
                f"/subscriptions/{sub['id']}/change-plan",
                json={"planCode": "PRO_MONTHLY", "expectedVersion": 0},
            )
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


async def test_a_plan_change_without_a_version_is_prorated_in_the_renewed_period(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    # Asked a second before the period ends; the renewal commits first, stamped a second after.
    sub = await subscribe(client)
    period_end = datetime.fromisoformat(sub["currentPeriodEnd"].replace("Z", "+00:00"))
    clock.set(period_end - timedelta(seconds=1))
    renewed_at = period_end + timedelta(seconds=1)
    async with engine.connect() as renewer:
        await renewer.execute(RENEWAL_STYLE_UPDATE, {"id": sub["id"], "now": renewed_at})
        change = asyncio.create_task(
            client.post(f"/subscriptions/{sub['id']}/change-plan", json={"planCode": "PRO_MONTHLY"})
        )
        await wait_until_blocked(engine, renewer)
        await renewer.commit()
        response = await change
    assert response.status_code == 200, response.text
    assert response.json()["subscription"]["plan"]["code"] == "PRO_MONTHLY"
    proration = await rows(
        engine,
        "SELECT period_index, period_start FROM invoice "
        "WHERE kind = 'PRORATION' AND subscription_id = :i",
        i=sub["id"],
    )
    # Applied after the renewal it met: in period 1, at the renewal's instant.
    assert [(p["period_index"], p["period_start"]) for p in proration] == [(1, renewed_at)]


async def test_stale_expected_version_is_409_before_any_write(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    sub = await subscribe(client)
    async with engine.begin() as renewer:
        await renewer.execute(RENEWAL_STYLE_UPDATE, {"id": sub["id"], "now": clock.now()})
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
