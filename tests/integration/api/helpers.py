"""Small helpers for the API tests."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.db import pg
from tests.support.factories import ensure_customers

PROBLEM_JSON = "application/problem+json"


async def known_customers(engine: AsyncEngine, *customer_ids: int) -> None:
    """Customers with these very ids (tests whose other data names a customer number)."""
    async with engine.begin() as conn:
        await ensure_customers(conn, list(customer_ids))


async def new_customer(client: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    """A customer created through the API (a fresh externalId unless given)."""
    response = await client.post(
        "/customers", json={"externalId": f"crm-{uuid.uuid4().hex[:12]}", **fields}
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


async def subscribe(
    client: httpx.AsyncClient,
    *,
    plan: str = "BASIC_MONTHLY",
    customer: int | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A subscription created through the API, of ``customer`` (default: a new customer)."""
    if customer is None:
        customer = (await new_customer(client))["id"]
    response = await client.post(
        "/subscriptions",
        json={"customerId": customer, "planCode": plan, **extra},
        headers={"Idempotency-Key": str(uuid.uuid4())},
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def assert_problem(response: httpx.Response, status: int, type_suffix: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON)
    body: dict[str, Any] = json.loads(response.content)
    assert body["status"] == status
    assert body["type"] == f"urn:problem-type:billing:{type_suffix}", body
    assert body["title"]
    assert "Traceback" not in response.text
    return body


async def scalar(engine: AsyncEngine, sql: str, **params: Any) -> Any:
    async with engine.connect() as conn:
        return (await conn.execute(text(sql), params)).scalar()


async def rows(engine: AsyncEngine, sql: str, **params: Any) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        result = await conn.execute(text(sql), params)
        return [dict(r._mapping) for r in result]


async def leased(engine: AsyncEngine, invoice_id: int) -> None:
    """What the collector's claim writes before its call: the invoice's current attempt is at
    the gateway (a webhook about it may be applied)."""
    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE invoice SET leased_at = updated_at WHERE id = :i"), {"i": invoice_id}
        )


@contextmanager
def statements_sent(seen: Callable[[str], None]) -> Iterator[None]:
    """Calls ``seen`` with the SQL of each statement the project's code runs through
    ``billing_core.db.pg`` (where the API's key look-ups go) while the block runs."""
    fetch, execute = pg.fetch, pg.execute

    async def counted_fetch(db: Any, statement: pg.Statement, params: Any = None) -> Any:
        seen(statement.sql)
        return await fetch(db, statement, params)

    async def counted_execute(db: Any, statement: pg.Statement, params: Any = None) -> int:
        seen(statement.sql)
        return await execute(db, statement, params)

    pg.fetch, pg.execute = counted_fetch, counted_execute  # type: ignore[assignment]
    try:
        yield
    finally:
        pg.fetch, pg.execute = fetch, execute  # type: ignore[assignment]
