"""Keyed creates written as a group: each row decided as a group of one decides it."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.db import pg
from billing_core.db.pg import Connection
from billing_core.repo import audit, idempotency, plans, subscription_groups
from billing_core.repo import ids as ids_repo
from billing_core.repo.subscription_groups import KeyedNew
from billing_core.settings import CoreSettings
from billing_core.usecases import subscribe as subscribe_uc
from services.api.context import AppContext
from tests.integration.api.conftest import asgi_client
from tests.integration.api.helpers import known_customers, rows, scalar

NOW = datetime(2026, 3, 10, 9, 30, tzinfo=UTC)


@pytest.fixture
async def conn(settings: CoreSettings, engine: AsyncEngine) -> AsyncIterator[Connection]:
    pool = await pg.create_pool(settings, max_size=2)
    try:
        async with pool.acquire() as connection:
            yield connection
    finally:
        await pool.close()


async def _client_id(engine: AsyncEngine, api_key: str) -> int:
    """The one API client of the test (``api_key``'s)."""
    return int(await scalar(engine, "SELECT id FROM api_client"))


async def _item(
    conn: Connection, client_id: int, customer_id: int, key: str, *, trial: bool = False
) -> KeyedNew:
    ((subscription_id, invoice_id),) = await ids_repo.draw(conn, subscribe_uc.ID_SEQUENCES, 1)
    plan = next(p for p in await plans.list_active(conn) if p.code == "PRO_MONTHLY")
    new = subscribe_uc.new_subscription(
        plan,
        subscription_id=subscription_id,
        invoice_id=invoice_id,
        customer_id=customer_id,
        time_zone="Europe/Paris",
        now=NOW,
        trial_end=NOW + timedelta(days=14) if trial else None,
    )
    body = json.dumps({"id": subscription_id}).encode()
    record = idempotency.NewRecord(
        client_id=client_id,
        key=key,
        request_method="POST",
        request_path="/subscriptions",
        request_hash=hashlib.sha256(b"POST /subscriptions").digest(),
        status=201,
        headers={"content-type": "application/json", "location": f"/s/{subscription_id}"},
        body=body,
        now=NOW,
        expires_at=NOW + timedelta(hours=24),
    )
    actor = audit.Actor.api(client_id, f"req-{key}")
    return subscribe_uc.keyed(new, now=NOW, actor=actor, record=record)


_WRITTEN = {
    "subscription": "SELECT * FROM subscription WHERE id = :s",
    "invoice": "SELECT * FROM invoice WHERE subscription_id = :s",
    "invoice_line": "SELECT l.* FROM invoice_line l JOIN invoice i ON i.id = l.invoice_id "
    "WHERE i.subscription_id = :s ORDER BY l.line_no",
    "outbox_event": "SELECT * FROM outbox_event WHERE aggregate_id = :s ORDER BY sequence",
    "audit_event": "SELECT * FROM audit_event WHERE subject_type = 'subscription' "
    "AND subject_id = :s",
    "idempotency_key": "SELECT * FROM idempotency_key WHERE key = :k",
}
# What differs between two requests that are otherwise the same.
_OWN = {"id", "subscription_id", "invoice_id", "aggregate_id", "subject_id", "event_id", "key"}


async def _written(engine: AsyncEngine, item: KeyedNew) -> dict[str, list[dict[str, Any]]]:
    found = {
        table: await rows(engine, sql, s=item.sub.id, k=item.record.key)
        for table, sql in _WRITTEN.items()
    }
    for table_rows in found.values():
        for row in table_rows:
            for column in _OWN & row.keys():
                row[column] = None
            if "payload" in row:  # the events' own ids and instants of writing aside
                row["payload"] = {
                    k: v for k, v in row["payload"].items() if k != "id" and not k.endswith("Id")
                }
                row["created_at"] = None
            if "response_body" in row or "response_headers" in row:
                row["response_body"] = row["response_headers"] = None
            if "request_id" in row:
                row["request_id"] = None
            if "detail" in row:
                row["detail"] = None
    return found


async def test_a_group_answers_each_request_as_its_own_statement_would(
    conn: Connection, engine: AsyncEngine, settings: CoreSettings, api_key: str
) -> None:
    """One group mixing new subscriptions, a trial (no invoice), a key whose response is
    stored and a key locked by a request in flight: per-row answers, and the rows written are
    those a group of one writes for the same request."""
    await known_customers(engine, 11, 12, 13, 14, 15)
    client_id = await _client_id(engine, api_key)
    fresh, trial, stored, busy, other = (
        await _item(conn, client_id, 11, "g-fresh"),
        await _item(conn, client_id, 12, "g-trial", trial=True),
        await _item(conn, client_id, 13, "g-stored"),
        await _item(conn, client_id, 14, "g-busy"),
        await _item(conn, client_id, 15, "g-other"),
    )
    (already,) = await subscription_groups.insert_unless_claimed(
        conn, [await _item(conn, client_id, 13, "g-stored")]
    )
    assert already.created
    holder = await asyncpg.connect(settings.database_url.replace("+asyncpg", ""))
    try:
        await holder.execute(
            "SELECT pg_advisory_lock($1)", idempotency.lock_id(client_id, "g-busy")
        )
        claims = await subscription_groups.insert_unless_claimed(
            conn, [fresh, trial, stored, busy, other]
        )
    finally:
        await holder.close()

    assert [(c.locked, c.created, c.stored is not None) for c in claims] == [
        (True, True, False),
        (True, True, False),
        (True, False, True),
        (False, False, False),
        (True, True, False),
    ]
    assert claims[2].stored is not None and claims[2].stored.request_path == "/subscriptions"
    for item in (stored, busy):
        assert (
            await scalar(engine, "SELECT count(*) FROM subscription WHERE id = :s", s=item.sub.id)
            == 0
        )
    assert (
        await scalar(
            engine, "SELECT count(*) FROM invoice WHERE subscription_id = :s", s=trial.sub.id
        )
        == 0
    )

    # The same requests again under new keys, each in a group of its own.
    for grouped, customer, is_trial in ((fresh, 11, False), (trial, 12, True), (other, 15, False)):
        alone = await _item(
            conn, client_id, customer, f"{grouped.record.key}-alone", trial=is_trial
        )
        (claim,) = await subscription_groups.insert_unless_claimed(conn, [alone])
        assert claim.created
        assert await _written(engine, grouped) == await _written(engine, alone)
        assert (await _written(engine, grouped))["subscription"]


async def test_an_expired_response_is_replaced_by_the_group_that_meets_its_key(
    conn: Connection, engine: AsyncEngine, api_key: str
) -> None:
    """A key whose stored response expired is free: in a group, its request is written and its
    new response replaces the old one, in the same statement as the others'."""
    await known_customers(engine, 16, 17)
    client_id = await _client_id(engine, api_key)
    (old,) = await subscription_groups.insert_unless_claimed(
        conn, [await _item(conn, client_id, 16, "e-expired")]
    )
    assert old.created
    await conn.execute(
        "UPDATE idempotency_key SET expires_at = $1 WHERE key = 'e-expired'",
        NOW - timedelta(seconds=1),
    )
    again, beside = await subscription_groups.insert_unless_claimed(
        conn,
        [await _item(conn, client_id, 17, "e-expired"), await _item(conn, client_id, 17, "e-new")],
    )
    assert (again.locked, again.created, again.stored) == (True, True, None)
    assert beside.created
    assert await scalar(engine, "SELECT count(*) FROM subscription") == 3
    stored = await rows(engine, "SELECT expires_at FROM idempotency_key WHERE key = 'e-expired'")
    assert [r["expires_at"] > NOW for r in stored] == [True]


async def test_a_failing_group_writes_nothing_and_raises(
    conn: Connection, engine: AsyncEngine, api_key: str
) -> None:
    """An unknown customer fails the whole statement (nothing written): its requests then run
    alone. Two requests with one key are refused before any statement."""
    await known_customers(engine, 21)
    client_id = await _client_id(engine, api_key)
    good = await _item(conn, client_id, 21, "f-good")
    unknown = await _item(conn, client_id, 999_999, "f-unknown")
    with pytest.raises(asyncpg.ForeignKeyViolationError):
        await subscription_groups.insert_unless_claimed(conn, [good, unknown])
    assert await scalar(engine, "SELECT count(*) FROM subscription") == 0
    assert await scalar(engine, "SELECT count(*) FROM idempotency_key") == 0
    twin = await _item(conn, client_id, 21, "f-good")
    with pytest.raises(ValueError, match="share a key"):
        await subscription_groups.insert_unless_claimed(conn, [good, twin])


async def test_concurrent_creates_are_written_in_groups(
    app: FastAPI, api_key: str, engine: AsyncEngine
) -> None:
    """Fifteen POSTs at once: all created, each answer what a read gives, in fewer statements
    than requests. Then a burst with an unknown customer among them: its group fails, each of
    its requests runs alone, and only that one gets its 422."""
    await known_customers(engine, *range(31, 50))
    ctx: AppContext = app.state.context

    async def burst(client: httpx.AsyncClient, customers: list[int]) -> list[httpx.Response]:
        return await asyncio.gather(
            *(
                client.post(
                    "/subscriptions",
                    json={"customerId": customer, "planCode": "PRO_MONTHLY"},
                    headers={"Idempotency-Key": str(uuid.uuid4())},
                )
                for customer in customers
            )
        )

    async with asgi_client(app, api_key) as client:
        before = ctx.creates.groups
        responses = await burst(client, list(range(31, 46)))
        assert [r.status_code for r in responses] == [201] * 15
        assert ctx.creates.groups - before < 15
        for response in responses:
            read = await client.get(response.headers["location"])
            assert read.content == response.content
        mixed = await burst(client, [46, 47, 888_888, 48, 49])
        assert [r.status_code for r in mixed] == [201, 201, 422, 201, 201]
        assert mixed[2].json()["type"].endswith("unknown-customer")
    assert await scalar(engine, "SELECT count(*) FROM subscription") == 19
    assert await scalar(engine, "SELECT count(*) FROM idempotency_key") == 19


async def test_the_key_look_up_probes_the_index_whatever_the_table_holds(
    conn: Connection,
) -> None:
    """The plan a connection caches for the group statement is made once, often while
    ``idempotency_key`` is empty: its key look-up must still be one index probe per request,
    never a scan of the table (which would slow every group as the table grows)."""
    assert await conn.fetchval("SELECT count(*) FROM idempotency_key") == 0
    await conn.execute("SET plan_cache_mode = force_generic_plan")
    await conn.execute(f"PREPARE grouped AS {subscription_groups.INSERT_GROUP.sql}")
    arrays = max(int(n) for n in re.findall(r"\$(\d+)", subscription_groups.INSERT_GROUP.sql))
    nulls = ", ".join(["NULL"] * arrays)
    plan = "\n".join(row[0] for row in await conn.fetch(f"EXPLAIN EXECUTE grouped({nulls})"))
    await conn.execute("DEALLOCATE grouped; RESET plan_cache_mode")
    assert "Index Scan using pk_idempotency_key on idempotency_key" in plan
    assert "Seq Scan on idempotency_key" not in plan
