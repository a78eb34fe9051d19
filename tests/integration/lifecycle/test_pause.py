"""Pausing collection: periods keep renewing into VOID or DRAFT invoices, nothing is collected,
and the renewer resumes a pause at its resumesAt, once."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from billing_core.db import pg
from billing_core.invariants.pauses import check_pauses
from billing_core.invariants.stuck import DEFAULT_RETRY_BOUND, check_stuck
from billing_core.repo.collection import claim_due_invoices
from tests.integration.api.helpers import assert_problem, rows, scalar, subscribe
from tests.integration.lifecycle.helpers import renew


def key() -> dict[str, str]:
    return {"Idempotency-Key": str(uuid.uuid4())}


async def invoices(engine: AsyncEngine, subscription_id: int) -> list[dict[str, Any]]:
    return await rows(
        engine,
        "SELECT id, period_index, period_start, status, subtotal, credit_applied, amount, "
        "next_attempt_at, closed_at FROM invoice WHERE subscription_id = :s ORDER BY period_index",
        s=subscription_id,
    )


async def events(engine: AsyncEngine, subscription_id: int) -> list[str]:
    found = await rows(
        engine,
        "SELECT event_type FROM outbox_event WHERE aggregate_id = :s ORDER BY sequence",
        s=subscription_id,
    )
    return [r["event_type"] for r in found]


@asynccontextmanager
async def rolled_back(pool: pg.Pool) -> AsyncIterator[pg.Connection]:
    """A driver connection in a transaction that is rolled back at the end."""
    async with pool.acquire() as conn:
        transaction = conn.transaction()
        await transaction.start()
        try:
            yield conn
        finally:
            await transaction.rollback()


async def collectible(pool: pg.Pool, clock: ManualClock) -> set[int]:
    """The invoices the collector would claim now (claimed in a transaction rolled back)."""
    async with rolled_back(pool) as conn:
        leased = await claim_due_invoices(
            conn, limit=100, lease=timedelta(seconds=60), now=clock.now()
        )
    return {i.id for i in leased}


async def test_paused_periods_renew_void_and_the_renewer_resumes_at_resumes_at(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock, pool: pg.Pool
) -> None:
    sub = await subscribe(client)
    (first,) = await invoices(engine, sub["id"])
    resumes_at = clock.now() + timedelta(days=45)  # during period 1 (period 2 starts after)
    response = await client.post(
        f"/subscriptions/{sub['id']}/pause",
        json={"behavior": "void", "resumesAt": resumes_at.isoformat()},
        headers={**key(), "If-Match": f'"{sub["version"]}"'},
    )
    assert response.status_code == 200, response.text
    paused = response.json()
    assert paused["status"] == "ACTIVE" and paused["version"] == sub["version"] + 1
    assert paused["pause"] == {
        "behavior": "void",
        "pausedAt": clock.now().isoformat().replace("+00:00", "Z"),
        "resumesAt": resumes_at.isoformat().replace("+00:00", "Z"),
    }
    # The OPEN invoice of period 0 waits: the collector leaves a paused subscription alone.
    assert first["id"] not in await collectible(pool, clock)

    # The renewer catches up two periods and the resume time at once: period 1 started while
    # paused (VOID), period 2 after resumesAt (OPEN); then the pause ends, once.
    clock.set(clock.now() + timedelta(days=62))
    await renew(engine, clock)
    found = await invoices(engine, sub["id"])
    assert [(i["period_index"], i["status"]) for i in found] == [
        (0, "OPEN"),
        (1, "VOID"),
        (2, "OPEN"),
    ]
    void = found[1]
    assert void["period_start"] < resumes_at <= found[2]["period_start"]
    assert (void["credit_applied"], void["amount"], void["next_attempt_at"]) == (0, 990, None)
    assert void["closed_at"] is not None
    after = (await client.get(f"/subscriptions/{sub['id']}")).json()
    assert after["pause"] is None and after["periodIndex"] == 2
    assert await events(engine, sub["id"]) == [
        "SubscriptionCreated",
        "InvoiceCreated",
        "SubscriptionPaused",
        "InvoiceCreated",
        "InvoiceVoided",
        "InvoiceCreated",
        "SubscriptionResumed",
    ]
    payload = await scalar(
        engine,
        "SELECT payload FROM outbox_event WHERE aggregate_id = :s "
        "AND event_type = 'SubscriptionResumed'",
        s=sub["id"],
    )
    assert payload["automatic"] is True
    assert payload["resumedAt"] == resumes_at.isoformat().replace("+00:00", "Z")
    await renew(engine, clock)
    assert (await events(engine, sub["id"])).count("SubscriptionResumed") == 1
    assert {first["id"], found[2]["id"]} <= await collectible(pool, clock)


async def test_keep_as_draft_and_a_resume_on_request(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock, pool: pg.Pool
) -> None:
    sub = await subscribe(client)
    paused = (
        await client.post(
            f"/subscriptions/{sub['id']}/pause", json={"behavior": "keep_as_draft"}, headers=key()
        )
    ).json()
    assert paused["pause"]["resumesAt"] is None
    clock.set(clock.now() + timedelta(days=95))  # three periods, still paused
    await renew(engine, clock)
    found = await invoices(engine, sub["id"])
    assert [i["status"] for i in found] == ["OPEN", "DRAFT", "DRAFT", "DRAFT"]
    assert all(i["next_attempt_at"] is None for i in found[1:])
    assert await collectible(pool, clock) & {i["id"] for i in found} == set()
    async with pool.acquire() as conn:
        assert (await check_pauses(conn)).ok
        assert (await check_stuck(conn, now=clock.now(), retry_bound=DEFAULT_RETRY_BOUND)).ok

    response = await client.post(f"/subscriptions/{sub['id']}/resume", json={}, headers=key())
    assert response.status_code == 200, response.text
    assert response.json()["pause"] is None
    # The OPEN invoice held during the pause is due again at once; the drafts stay drafts.
    assert await collectible(pool, clock) & {i["id"] for i in found} == {found[0]["id"]}
    again = await client.post(f"/subscriptions/{sub['id']}/resume", json={}, headers=key())
    assert again.json()["version"] == response.json()["version"]  # not paused: no change
    audit = await rows(
        engine,
        "SELECT action, detail FROM audit_event WHERE subject_id = :s ORDER BY id",
        s=sub["id"],
    )
    assert [a["action"] for a in audit][-3:] == [
        "subscription.pause",
        "subscription.resume",
        "subscription.resume",
    ]
    assert audit[-1]["detail"] == {"changed": False}


async def test_pause_requests_are_idempotent_and_versioned(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    sub = await subscribe(client)
    headers = key()
    body = {"behavior": "void", "expectedVersion": sub["version"]}
    first = await client.post(f"/subscriptions/{sub['id']}/pause", json=body, headers=headers)
    replay = await client.post(f"/subscriptions/{sub['id']}/pause", json=body, headers=headers)
    assert first.status_code == replay.status_code == 200
    assert first.json() == replay.json()
    assert (await events(engine, sub["id"])).count("SubscriptionPaused") == 1
    stale = await client.post(
        f"/subscriptions/{sub['id']}/pause",
        json={"behavior": "keep_as_draft", **{"expectedVersion": sub["version"]}},
        headers=key(),
    )
    assert_problem(stale, 409, "version-conflict")
    same = await client.post(
        f"/subscriptions/{sub['id']}/pause", json={"behavior": "void"}, headers=key()
    )
    assert same.json()["version"] == first.json()["version"]  # already paused so: no change


async def test_refusals_and_a_cancel_while_paused(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    sub = await subscribe(client)
    past = await client.post(
        f"/subscriptions/{sub['id']}/pause",
        json={"behavior": "void", "resumesAt": clock.now().isoformat()},
        headers=key(),
    )
    assert_problem(past, 422, "business-rule-violated")
    assert_problem(
        await client.post(
            f"/subscriptions/{sub['id']}/pause", json={"behavior": "nope"}, headers=key()
        ),
        422,
        "validation-error",
    )
    trial = await subscribe(client, trialEnd=(clock.now() + timedelta(days=14)).isoformat())
    assert_problem(
        await client.post(
            f"/subscriptions/{trial['id']}/pause", json={"behavior": "void"}, headers=key()
        ),
        409,
        "state-conflict",
    )
    await client.post(f"/subscriptions/{sub['id']}/pause", json={"behavior": "void"}, headers=key())
    canceled = await client.post(
        f"/subscriptions/{sub['id']}/cancel", json={"atPeriodEnd": False}, headers=key()
    )
    assert canceled.status_code == 200, canceled.text
    assert (canceled.json()["status"], canceled.json()["pause"]) == ("CANCELED", None)
    assert [i["status"] for i in await invoices(engine, sub["id"])] == ["VOID"]
    assert_problem(
        await client.post(f"/subscriptions/{sub['id']}/resume", json={}, headers=key()),
        409,
        "state-conflict",
    )
    assert_problem(
        await client.post("/subscriptions/999999/pause", json={"behavior": "void"}, headers=key()),
        404,
        "subscription-not-found",
    )


async def test_the_invariants_see_a_collectible_paused_period_and_a_charged_draft(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock, pool: pg.Pool
) -> None:
    sub = await subscribe(client)
    await client.post(
        f"/subscriptions/{sub['id']}/pause", json={"behavior": "keep_as_draft"}, headers=key()
    )
    clock.set(clock.now() + timedelta(days=32))
    await renew(engine, clock)
    period0, period1 = await invoices(engine, sub["id"])
    async with rolled_back(pool) as conn:
        await conn.execute(
            "UPDATE invoice SET next_attempt_at = now() WHERE id = $1", period1["id"]
        )
        check = await check_pauses(conn)
        assert check.ids("draft_collected") == [period1["id"]]
        await conn.execute("UPDATE invoice SET status = 'OPEN' WHERE id = $1", period1["id"])
        check = await check_pauses(conn)
        assert check.ids("paused_period_collectible") == [period1["id"]]
        await conn.execute(
            "INSERT INTO payment_attempt (invoice_id, attempt_number, idempotency_key, "
            "source, outcome, amount, currency, recorded_at) VALUES ($1, 0, 'k', "
            "'COLLECTOR', 'DECLINED', 990, 'EUR', $2)",
            period0["id"],
            clock.now(),
        )
        check = await check_pauses(conn)
        assert check.ids("charged_while_paused") == [period0["id"]]
