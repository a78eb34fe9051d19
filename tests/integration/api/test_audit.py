"""The audit trail: every write through the API adds exactly one ``audit_event`` row in its
own transaction (a failure rolls both back), and ``GET /subscriptions/{id}/history`` shows it
with the invoices, payment attempts and events."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
import structlog
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from tests.integration.api.helpers import (
    assert_problem,
    known_customers,
    rows,
    scalar,
    subscribe,
)


def key() -> dict[str, str]:
    return {"Idempotency-Key": str(uuid.uuid4())}


async def audit_rows(engine: AsyncEngine) -> list[dict[str, Any]]:
    return await rows(
        engine, "SELECT * FROM audit_event WHERE subject_type = 'subscription' ORDER BY id"
    )


async def test_every_write_route_writes_exactly_one_audit_row(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    client_id = await scalar(engine, "SELECT id FROM api_client")
    await known_customers(engine, 9)
    created = await client.post(
        "/subscriptions", json={"customerId": 9, "planCode": "BASIC_MONTHLY"}, headers=key()
    )
    assert created.status_code == 201
    sub_id = created.json()["id"]
    (row,) = await audit_rows(engine)
    assert (row["action"], row["subject_id"], row["client_id"], row["source"]) == (
        "subscription.create",
        sub_id,
        client_id,
        "API",
    )
    assert (row["version_before"], row["version_after"]) == (None, 0)
    assert row["request_id"] == created.headers["x-request-id"]
    assert row["occurred_at"] == clock.now()
    assert row["detail"] == {"customerId": 9, "planCode": "BASIC_MONTHLY"}

    same = key()
    changed = await client.post(
        f"/subscriptions/{sub_id}/change-plan", json={"planCode": "PRO_MONTHLY"}, headers=same
    )
    assert changed.status_code == 200
    replayed = await client.post(
        f"/subscriptions/{sub_id}/change-plan", json={"planCode": "PRO_MONTHLY"}, headers=same
    )
    assert replayed.headers["idempotent-replayed"] == "true"  # a replay changes nothing
    scheduled = await client.post(
        f"/subscriptions/{sub_id}/cancel", json={"atPeriodEnd": True}, headers=key()
    )
    assert scheduled.status_code == 200
    again = await client.post(
        f"/subscriptions/{sub_id}/cancel", json={"atPeriodEnd": True}, headers=key()
    )
    assert again.status_code == 200
    conflict = await client.post(
        f"/subscriptions/{sub_id}/cancel",
        json={"atPeriodEnd": False, "expectedVersion": 0},
        headers=key(),
    )
    assert_problem(conflict, 409, "version-conflict")  # refused: no row

    found = await audit_rows(engine)
    assert [(r["action"], r["version_before"], r["version_after"]) for r in found] == [
        ("subscription.create", None, 0),
        ("subscription.change_plan", 0, 1),
        ("subscription.cancel", 1, 2),
        ("subscription.cancel", 2, 2),  # nothing to do, but the request is on record
    ]
    assert found[1]["detail"]["fromPlan"] == "BASIC_MONTHLY"
    assert found[1]["detail"]["toPlan"] == "PRO_MONTHLY"
    assert found[3]["detail"]["changed"] is False
    assert [r["request_id"] for r in found[1:]] == [
        changed.headers["x-request-id"],
        scheduled.headers["x-request-id"],
        again.headers["x-request-id"],
    ]


async def test_a_subscribe_by_the_general_path_writes_its_audit_row_too(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    """A key whose stored response expired is not decided by the one-statement subscribe: the
    request runs again in a transaction of its own, with its audit row."""
    headers = key()
    await known_customers(engine, 3)
    body = {"customerId": 3, "planCode": "BASIC_MONTHLY"}
    assert (await client.post("/subscriptions", json=body, headers=headers)).status_code == 201
    clock.advance(timedelta(days=2))  # past the 24 h retention
    again = await client.post("/subscriptions", json=body, headers=headers)
    assert again.status_code == 201
    assert "idempotent-replayed" not in again.headers
    assert await scalar(engine, "SELECT count(*) FROM subscription") == 2
    assert [r["action"] for r in await audit_rows(engine)] == ["subscription.create"] * 2


@contextlib.asynccontextmanager
async def failing_audit(engine: AsyncEngine) -> AsyncIterator[None]:
    """Every insert into audit_event fails (a trigger): the write it belongs to must not stay."""
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "CREATE FUNCTION test_refuse_audit() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'audit refused'; END $$"
            )
        )
        await conn.execute(
            text(
                "CREATE TRIGGER test_refuse_audit BEFORE INSERT ON audit_event "
                "FOR EACH ROW EXECUTE FUNCTION test_refuse_audit()"
            )
        )
    try:
        yield
    finally:
        async with engine.begin() as conn:
            await conn.execute(text("DROP TRIGGER test_refuse_audit ON audit_event"))
            await conn.execute(text("DROP FUNCTION test_refuse_audit()"))


@pytest.fixture
def plain_tracebacks() -> Iterator[None]:
    """The 500s below are logged with plain tracebacks (the default renders every local)."""
    saved = structlog.get_config()
    structlog.configure(
        processors=[
            *saved["processors"][:-1],
            structlog.dev.ConsoleRenderer(exception_formatter=structlog.dev.plain_traceback),
        ]
    )
    try:
        yield
    finally:
        structlog.configure(**saved)


@pytest.mark.usefixtures("plain_tracebacks")
async def test_the_audit_row_and_the_write_roll_back_together(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    await known_customers(engine, 8)
    sub = await subscribe(client, customer=8)
    before = await rows(engine, "SELECT * FROM subscription")
    async with failing_audit(engine):
        await _every_write_fails(client, sub["id"])

    assert await rows(engine, "SELECT * FROM subscription") == before
    assert await scalar(engine, "SELECT count(*) FROM invoice") == 1
    assert await scalar(engine, "SELECT count(*) FROM idempotency_key") == 1
    assert await scalar(engine, "SELECT count(*) FROM api_client") == 1
    assert await scalar(engine, "SELECT count(*) FROM audit_event WHERE source = 'API'") == 1


async def _every_write_fails(client: httpx.AsyncClient, sub_id: int) -> None:
    created = await client.post(
        "/subscriptions", json={"customerId": 8, "planCode": "BASIC_MONTHLY"}, headers=key()
    )
    assert_problem(created, 500, "internal-error")
    canceled = await client.post(
        f"/subscriptions/{sub_id}/cancel", json={"atPeriodEnd": False}, headers=key()
    )
    assert_problem(canceled, 500, "internal-error")
    changed = await client.post(
        f"/subscriptions/{sub_id}/change-plan", json={"planCode": "PRO_MONTHLY"}, headers=key()
    )
    assert_problem(changed, 500, "internal-error")
    keys = await client.post("/api-keys", json={"name": "x", "scopes": ["admin"]})
    assert_problem(keys, 500, "internal-error")


async def test_history_is_the_subscriptions_timeline(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    sub = await subscribe(client)
    clock.advance(timedelta(hours=1))
    canceled = await client.post(
        f"/subscriptions/{sub['id']}/cancel", json={"atPeriodEnd": False}, headers=key()
    )
    assert canceled.status_code == 200
    other = await subscribe(client)

    response = await client.get(f"/subscriptions/{sub['id']}/history")
    assert response.status_code == 200, response.text
    items = response.json()["items"]
    kinds = [(i["kind"], i["what"]) for i in items]
    assert kinds[0] == ("api", "subscription.create")
    assert ("invoice", "RENEWAL VOID") in kinds
    assert ("event", "SubscriptionCreated") in kinds
    assert ("event", "SubscriptionCanceled") in kinds
    assert ("api", "subscription.cancel") in kinds
    assert [i["at"] for i in items] == sorted(i["at"] for i in items)
    cancel = next(i for i in items if i["what"] == "subscription.cancel")
    assert cancel["requestId"] == canceled.headers["x-request-id"]
    assert (cancel["versionBefore"], cancel["versionAfter"]) == (0, 1)
    assert cancel["clientId"] == await scalar(engine, "SELECT id FROM api_client")
    others = (await client.get(f"/subscriptions/{other['id']}/history")).json()["items"]
    assert [i["what"] for i in others if i["kind"] == "api"] == ["subscription.create"]

    assert_problem(await client.get("/subscriptions/999999/history"), 404, "subscription-not-found")
    limited = await client.get(f"/subscriptions/{sub['id']}/history", params={"limit": 2})
    assert limited.json()["items"] == items[:2]


async def test_the_lifecycle_and_customer_writes_write_their_audit_rows(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    """End-trial, resume-renewal and a new customer: one row each, like every other write."""
    trial_end = (clock.now() + timedelta(days=14)).isoformat()
    await known_customers(engine, 11)
    created = await client.post(
        "/subscriptions",
        json={"customerId": 11, "planCode": "BASIC_MONTHLY", "trialEnd": trial_end},
        headers=key(),
    )
    assert created.status_code == 201, created.text
    sub_id = created.json()["id"]
    scheduled = await client.post(
        f"/subscriptions/{sub_id}/cancel", json={"atPeriodEnd": True}, headers=key()
    )
    assert scheduled.status_code == 200
    resumed = await client.post(f"/subscriptions/{sub_id}/resume-renewal", json={}, headers=key())
    assert resumed.status_code == 200, resumed.text
    ended = await client.post(f"/subscriptions/{sub_id}/end-trial", json={}, headers=key())
    assert ended.status_code == 200, ended.text
    found = await audit_rows(engine)
    assert [(r["action"], r["version_before"], r["version_after"]) for r in found] == [
        ("subscription.create", None, 0),
        ("subscription.cancel", 0, 1),
        ("subscription.resume_renewal", 1, 2),
        ("subscription.end_trial", 2, 3),
    ]
    assert found[3]["detail"]["invoiceId"] == ended.json()["invoiceId"]

    customer = await client.post("/customers", json={"externalId": "shop-77"}, headers=key())
    assert customer.status_code == 201, customer.text
    (row,) = await rows(engine, "SELECT * FROM audit_event WHERE subject_type = 'customer'")
    assert (row["action"], row["subject_id"], row["detail"]) == (
        "customer.create",
        customer.json()["id"],
        {"externalId": "shop-77"},
    )
