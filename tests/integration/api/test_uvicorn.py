"""The API as deployed: ``python -m services.api`` under uvicorn, over real sockets."""

from __future__ import annotations

import asyncio
import uuid

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.api.conftest import ApiServer
from tests.integration.api.helpers import known_customers, scalar


async def test_concurrent_identical_posts_over_http_create_one_subscription(
    api_server: ApiServer, api_key: str, engine: AsyncEngine
) -> None:
    headers = {"Authorization": f"Bearer {api_key}", "Idempotency-Key": str(uuid.uuid4())}
    await known_customers(engine, 99)
    body = {"customerId": 99, "planCode": "PRO_MONTHLY"}
    limits = httpx.Limits(max_connections=20)
    async with httpx.AsyncClient(base_url=api_server.base_url, limits=limits, timeout=30) as c:
        responses = await asyncio.gather(
            *(c.post("/subscriptions", json=body, headers=headers) for _ in range(20))
        )
        statuses = [r.status_code for r in responses]
        assert set(statuses) <= {201, 409}, statuses
        assert all(r.status_code < 500 for r in responses)
        ids = {r.json()["id"] for r in responses if r.status_code == 201}
        assert len(ids) == 1
        assert await scalar(engine, "SELECT count(*) FROM subscription") == 1
        assert await scalar(engine, "SELECT count(*) FROM invoice") == 1

        # Clients that were told to retry get the stored answer.
        retried = await c.post("/subscriptions", json=body, headers=headers)
        assert retried.status_code == 201
        assert retried.headers["idempotent-replayed"] == "true"
        assert retried.json()["id"] in ids or not ids

        metrics = httpx.get(f"{api_server.internal_url}/metrics").text
        assert 'route="/subscriptions",status="201"' in metrics
        assert (await c.get("/readyz")).status_code == 200
        assert httpx.get(f"{api_server.internal_url}/docs").status_code == 200
        assert (await c.get("/docs")).status_code == 404
