"""The Idempotency-Key matrix: replay, mismatch, in flight, expiry and purge, concurrency."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from billing_core.repo import idempotency as idempotency_repo
from billing_core.settings import CoreSettings
from services.api.admin import create_api_key_async, rotate_key
from services.api.idempotency import request_fingerprint
from services.api.settings import ApiSettings
from tests.integration.api.conftest import asgi_client
from tests.integration.api.helpers import assert_problem, known_customers, scalar, subscribe

BODY = {"customerId": 5, "planCode": "BASIC_MONTHLY"}


@pytest.fixture(autouse=True)
async def _customers(engine: AsyncEngine) -> None:
    """The customers the bodies here name (BODY's, and 6 for a different request)."""
    await known_customers(engine, 5, 6)


async def test_same_key_same_request_replays_byte_for_byte(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    headers = {"Idempotency-Key": "order-1"}
    first = await client.post("/subscriptions", json=BODY, headers=headers)
    assert first.status_code == 201
    assert "idempotent-replayed" not in first.headers
    clock.advance(timedelta(minutes=5))  # a replay must not re-render anything time-dependent
    # Same JSON meaning, different spelling (key order, spaces): the same request.
    second = await client.post(
        "/subscriptions",
        content=b'{ "planCode": "BASIC_MONTHLY", "customerId": 5 }',
        headers={**headers, "content-type": "application/json"},
    )
    assert second.status_code == 201
    assert second.headers["idempotent-replayed"] == "true"
    assert second.content == first.content
    assert second.headers["location"] == first.headers["location"]
    assert second.headers["content-type"] == first.headers["content-type"]
    assert await scalar(engine, "SELECT count(*) FROM subscription") == 1
    assert await scalar(engine, "SELECT count(*) FROM invoice") == 1


async def test_same_key_different_request_is_422(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    headers = {"Idempotency-Key": "order-2"}
    assert (await client.post("/subscriptions", json=BODY, headers=headers)).status_code == 201
    other_body = await client.post(
        "/subscriptions", json={**BODY, "customerId": 6}, headers=headers
    )
    assert_problem(other_body, 422, "idempotency-key-reused")
    sub_id = await scalar(engine, "SELECT id FROM subscription")
    other_path = await client.post(
        f"/subscriptions/{sub_id}/cancel", json={"atPeriodEnd": True}, headers=headers
    )
    assert_problem(other_path, 422, "idempotency-key-reused")
    assert await scalar(engine, "SELECT count(*) FROM subscription") == 1
    assert await scalar(engine, "SELECT cancel_at_period_end FROM subscription") is False


async def test_same_key_in_flight_is_409_with_retry_after(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    client_id = await scalar(engine, "SELECT id FROM api_client")
    # Another replica is running the first request: it holds the (client, key) lock.
    async with engine.connect() as holder:
        await holder.execute(
            text("SELECT pg_advisory_lock(:id)"),
            {"id": idempotency_repo.lock_id(client_id, "order-3")},
        )
        busy = await client.post(
            "/subscriptions", json=BODY, headers={"Idempotency-Key": "order-3"}
        )
        problem = assert_problem(busy, 409, "idempotency-request-in-progress")
        assert busy.headers["retry-after"] == "1"
        assert "detail" in problem
        await holder.execute(text("SELECT pg_advisory_unlock_all()"))
    done = await client.post("/subscriptions", json=BODY, headers={"Idempotency-Key": "order-3"})
    assert done.status_code == 201


async def test_failed_request_is_not_stored_and_may_be_retried(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    headers = {"Idempotency-Key": "order-4"}
    refused = await client.post(
        "/subscriptions", json={**BODY, "planCode": "NOPE"}, headers=headers
    )
    assert_problem(refused, 422, "unknown-plan")
    assert await scalar(engine, "SELECT count(*) FROM idempotency_key") == 0
    ok = await client.post("/subscriptions", json={**BODY, "planCode": "NOPE2"}, headers=headers)
    assert_problem(ok, 422, "unknown-plan")


async def test_keys_expire_and_are_purged(
    app: FastAPI, client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    from services.api.idempotency import purge_expired  # noqa: PLC0415

    headers = {"Idempotency-Key": "order-5"}
    assert (await client.post("/subscriptions", json=BODY, headers=headers)).status_code == 201
    await client.post("/subscriptions", json=BODY, headers={"Idempotency-Key": "order-6"})
    clock.advance(timedelta(hours=23, minutes=59))
    replay = await client.post("/subscriptions", json=BODY, headers=headers)
    assert replay.headers.get("idempotent-replayed") == "true"

    clock.advance(timedelta(minutes=2))  # past the 24 h retention
    fresh = await client.post("/subscriptions", json=BODY, headers=headers)
    assert fresh.status_code == 201
    assert "idempotent-replayed" not in fresh.headers  # the expired record was replaced on write
    assert await scalar(engine, "SELECT count(*) FROM subscription") == 3

    purged = await purge_expired(app.state.context)
    assert purged == 1  # order-6 expired; order-5 was renewed by the new request
    remaining = await scalar(engine, "SELECT string_agg(key, ',') FROM idempotency_key")
    assert remaining == "order-5"


async def test_keys_are_scoped_per_client(
    app: FastAPI, client: httpx.AsyncClient, settings: CoreSettings, engine: AsyncEngine
) -> None:
    other_key = await create_api_key_async(settings, "other")
    headers = {"Idempotency-Key": "shared"}
    async with asgi_client(app, other_key) as other:
        a = await client.post("/subscriptions", json=BODY, headers=headers)
        b = await other.post("/subscriptions", json=BODY, headers=headers)
    assert (a.status_code, b.status_code) == (201, 201)
    assert a.json()["id"] != b.json()["id"]


async def test_a_retry_with_a_rotated_key_replays_what_the_first_key_stored(
    app: FastAPI, settings: CoreSettings, engine: AsyncEngine
) -> None:
    """Records belong to the first key of a rotation chain: a retry sent with the key that
    replaced it (twice over) is the same request, replayed, not run again."""
    first_key = await create_api_key_async(settings, "rotating")
    keys = [first_key]
    for _ in range(2):
        _, new = await asyncio.to_thread(
            rotate_key, settings, keys[-1][:11], grace=timedelta(hours=1), expires_in=None
        )
        keys.append(new.key)
    create = {"Idempotency-Key": "rotated-create"}
    cancel = {"Idempotency-Key": "rotated-cancel"}
    async with asgi_client(app, first_key) as before:
        created = await before.post("/subscriptions", json=BODY, headers=create)
        assert created.status_code == 201, created.text
        path = f"/subscriptions/{created.json()['id']}/cancel"
        canceled = await before.post(path, json={"atPeriodEnd": True}, headers=cancel)
        assert canceled.status_code == 200, canceled.text
    async with asgi_client(app, keys[-1]) as after:
        again = await after.post("/subscriptions", json=BODY, headers=create)
        canceled_again = await after.post(path, json={"atPeriodEnd": True}, headers=cancel)
        other = await after.post("/subscriptions", json={**BODY, "customerId": 6}, headers=create)
    assert again.status_code == 201
    assert again.headers["idempotent-replayed"] == "true"
    assert again.content == created.content
    assert canceled_again.headers["idempotent-replayed"] == "true"
    assert canceled_again.content == canceled.content
    assert_problem(other, 422, "idempotency-key-reused")
    assert await scalar(engine, "SELECT count(*) FROM subscription") == 1
    assert await scalar(engine, "SELECT version FROM subscription") == 1


async def test_cancel_and_change_plan_replay(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    sub = await subscribe(client)
    clock.advance(timedelta(days=3))
    change = {"Idempotency-Key": "change-1"}
    first = await client.post(
        f"/subscriptions/{sub['id']}/change-plan", json={"planCode": "PRO_MONTHLY"}, headers=change
    )
    again = await client.post(
        f"/subscriptions/{sub['id']}/change-plan", json={"planCode": "PRO_MONTHLY"}, headers=change
    )
    assert first.status_code == again.status_code == 200
    assert again.content == first.content
    assert again.headers["idempotent-replayed"] == "true"
    assert await scalar(engine, "SELECT count(*) FROM invoice WHERE kind = 'PRORATION'") == 1


async def test_concurrent_identical_posts_create_one_subscription(
    api_settings: ApiSettings, app: FastAPI, api_key: str, engine: AsyncEngine
) -> None:
    """20 identical requests at once, each on its own pooled connection: one subscription,
    the others replayed or told to retry, none 5xx."""
    headers = {"Idempotency-Key": f"burst-{uuid.uuid4()}"}
    async with asgi_client(app, api_key) as c:
        responses = await asyncio.gather(
            *(c.post("/subscriptions", json=BODY, headers=headers) for _ in range(20))
        )
    statuses = [r.status_code for r in responses]
    assert set(statuses) <= {201, 409}, statuses
    assert 201 in statuses
    created = {r.json()["id"] for r in responses if r.status_code == 201}
    assert len(created) == 1
    for r in responses:
        if r.status_code == 409:
            assert r.headers["retry-after"] == "1"
    assert await scalar(engine, "SELECT count(*) FROM subscription") == 1
    assert await scalar(engine, "SELECT count(*) FROM invoice") == 1


async def _answered_while_a_first_request_commits(
    client: httpx.AsyncClient,
    engine: AsyncEngine,
    clock: ManualClock,
    *,
    path: str,
    raw: bytes,
    key: str,
    stored_body: bytes,
    waits_in: str,
) -> httpx.Response:
    """The answer to ``raw`` under ``key`` when a first request's record of the same key is
    written but not committed: the second request waits in the statement whose text is like
    ``waits_in``, then the first commits."""
    client_id = await scalar(engine, "SELECT id FROM api_client")
    async with engine.connect() as first:
        await first.execute(
            text(
                "INSERT INTO idempotency_key (client_id, key, request_method, request_path, "
                "request_hash, response_status, response_headers, response_body, created_at, "
                "completed_at, expires_at) VALUES (:c, :k, 'POST', :p, :h, "
                "201, CAST(:headers AS jsonb), :b, :now, :now, :later)"
            ),
            {
                "c": client_id,
                "k": key,
                "p": path,
                "h": request_fingerprint("POST", path, raw),
                "headers": json.dumps({"content-type": "application/json"}),
                "b": stored_body,
                "now": clock.now(),
                "later": clock.now() + timedelta(hours=1),
            },
        )
        second = asyncio.create_task(
            client.post(
                path,
                content=raw,
                headers={"Idempotency-Key": key, "content-type": "application/json"},
            )
        )
        for _ in range(200):
            waiting = await scalar(
                engine,
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND query LIKE :like",
                like=waits_in,
            )
            if waiting:
                break
            await asyncio.sleep(0.02)
        assert waiting == 1
        await first.commit()
        return await second


async def test_first_request_committing_meanwhile_is_replayed_not_repeated(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    """The one-statement path looks the key up in a snapshot taken before it holds the key's
    lock: a first request that commits in between is not seen there. Its stored response
    then stops the second one's writes (unique key), and the second is answered by the
    general path: the first one's response, replayed; nothing created twice."""
    raw = json.dumps(BODY).encode()
    stored_body = b'{"stored":"by the first request"}'
    response = await _answered_while_a_first_request_commits(
        client,
        engine,
        clock,
        path="/subscriptions",
        raw=raw,
        key="race-1",
        stored_body=stored_body,
        waits_in="%pg_try_advisory_xact_lock%",
    )
    assert response.status_code == 201, response.text
    assert response.headers["idempotent-replayed"] == "true"
    assert response.content == stored_body
    assert await scalar(engine, "SELECT count(*) FROM subscription") == 0
    assert await scalar(engine, "SELECT count(*) FROM invoice") == 0
    assert await scalar(engine, "SELECT count(*) FROM outbox_event") == 0


# A create through the one-request claim (``IdempotentWrite.run``) and one through the group
# statement's (``IdempotentWrite.create``): (path, body, another body, the table it writes).
CREATES = [
    ("/customers", {"externalId": "crm-1"}, {"externalId": "crm-2"}, "customer"),
    ("/subscriptions", BODY, {**BODY, "customerId": 6}, "subscription"),
]


@pytest.mark.parametrize(("path", "body", "other", "table"), CREATES)
async def test_a_key_is_answered_alike_by_a_single_create_and_a_group(
    client: httpx.AsyncClient,
    engine: AsyncEngine,
    path: str,
    body: dict[str, object],
    other: dict[str, object],
    table: str,
) -> None:
    before = await scalar(engine, f"SELECT count(*) FROM {table}")
    first = await client.post(path, json=body, headers={"Idempotency-Key": "same-1"})
    assert first.status_code == 201, first.text
    replay = await client.post(path, json=body, headers={"Idempotency-Key": "same-1"})
    assert replay.status_code == 201
    assert replay.headers["idempotent-replayed"] == "true"
    assert replay.content == first.content
    mismatch = await client.post(path, json=other, headers={"Idempotency-Key": "same-1"})
    assert_problem(mismatch, 422, "idempotency-key-reused")
    client_id = await scalar(engine, "SELECT id FROM api_client")
    async with engine.connect() as holder:
        await holder.execute(
            text("SELECT pg_advisory_lock(:id)"),
            {"id": idempotency_repo.lock_id(client_id, "same-2")},
        )
        busy = await client.post(path, json=other, headers={"Idempotency-Key": "same-2"})
        assert_problem(busy, 409, "idempotency-request-in-progress")
        assert busy.headers["retry-after"] == "1"
        await holder.execute(text("SELECT pg_advisory_unlock_all()"))
    assert await scalar(engine, f"SELECT count(*) FROM {table}") == before + 1


async def test_a_first_request_committing_meanwhile_is_replayed_by_a_single_create(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    """The one-request claim's look-up predates its lock too: a first request that commits
    while the second runs is not seen, and its stored response stops the second one's (a
    unique key) at its own record: the second runs again and replays it."""
    raw = json.dumps({"externalId": "crm-race"}).encode()
    stored_body = b'{"stored":"by the first request"}'
    response = await _answered_while_a_first_request_commits(
        client,
        engine,
        clock,
        path="/customers",
        raw=raw,
        key="race-2",
        stored_body=stored_body,
        waits_in="INSERT INTO idempotency_key%",
    )
    assert response.status_code == 201, response.text
    assert response.headers["idempotent-replayed"] == "true"
    assert response.content == stored_body
    assert await scalar(engine, "SELECT count(*) FROM customer WHERE external_id = 'crm-race'") == 0
