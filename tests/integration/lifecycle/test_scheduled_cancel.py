"""Undoing a scheduled cancel: the renewer renews instead of canceling."""

from __future__ import annotations

import uuid
from datetime import timedelta

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from billing_core.db import pg
from services.renewer.loop import Renewer
from tests.integration.api.helpers import assert_problem, rows, subscribe


async def test_resume_renewal_undoes_a_scheduled_cancel_and_the_period_renews(
    lazy_pool: pg.LazyPool, client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    sub = await subscribe(client)
    scheduled = (
        await client.post(f"/subscriptions/{sub['id']}/cancel", json={"atPeriodEnd": True})
    ).json()
    assert scheduled["cancelAtPeriodEnd"] is True
    response = await client.post(
        f"/subscriptions/{sub['id']}/resume-renewal",
        json={},
        headers={"If-Match": f'"{scheduled["version"]}"', "Idempotency-Key": str(uuid.uuid4())},
    )
    assert response.status_code == 200, response.text
    resumed = response.json()
    assert (resumed["cancelAtPeriodEnd"], resumed["version"]) == (False, scheduled["version"] + 1)
    assert response.headers["etag"] == f'"{resumed["version"]}"'

    clock.set(clock.now() + timedelta(days=32))
    renewer = Renewer(lazy_pool, clock, batch_size=10)
    while await renewer.tick():
        pass
    after = (await client.get(f"/subscriptions/{sub['id']}")).json()
    assert (after["status"], after["periodIndex"]) == ("ACTIVE", 1)
    found = await rows(
        engine, "SELECT period_index FROM invoice WHERE subscription_id = :s", s=sub["id"]
    )
    assert sorted(r["period_index"] for r in found) == [0, 1]


async def test_resume_renewal_without_a_scheduled_cancel_changes_nothing(
    client: httpx.AsyncClient,
) -> None:
    sub = await subscribe(client)
    response = await client.post(f"/subscriptions/{sub['id']}/resume-renewal", json={})
    assert response.status_code == 200, response.text
    assert response.json()["version"] == sub["version"]


async def test_a_canceled_subscription_cannot_resume_and_a_stale_version_is_409(
    client: httpx.AsyncClient,
) -> None:
    sub = await subscribe(client)
    await client.post(f"/subscriptions/{sub['id']}/cancel", json={"atPeriodEnd": True})
    stale = await client.post(
        f"/subscriptions/{sub['id']}/resume-renewal", json={"expectedVersion": sub["version"]}
    )
    assert_problem(stale, 409, "version-conflict")
    await client.post(f"/subscriptions/{sub['id']}/cancel", json={"atPeriodEnd": False})
    over = await client.post(f"/subscriptions/{sub['id']}/resume-renewal", json={})
    assert_problem(over, 409, "state-conflict")
    assert_problem(
        await client.post("/subscriptions/999999/resume-renewal", json={}),
        404,
        "subscription-not-found",
    )
