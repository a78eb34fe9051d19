"""Small helpers for the API tests."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

PROBLEM_JSON = "application/problem+json"


async def subscribe(
    client: httpx.AsyncClient, *, plan: str = "BASIC_MONTHLY", customer: int = 42, **extra: Any
) -> dict[str, Any]:
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
