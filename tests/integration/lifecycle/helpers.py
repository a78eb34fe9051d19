"""What the lifecycle tests share: instants as the API writes them, the renewer run to a point
in time, and the database-only invariant checks."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from billing_core.db import pg
from billing_core.invariants.checker import check_all
from billing_core.invariants.ledger import LedgerEvidence
from billing_core.settings import CoreSettings
from services.renewer.loop import Renewer
from tests.integration.api.helpers import rows

# The checks that need only the database (no gateway ledger, no topic).
DATABASE_CHECKS = ("periods", "amounts", "lines", "numbers", "pauses")


def iso(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


def instant(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


async def change(
    client: httpx.AsyncClient, sub: dict[str, Any], plan: str, **body: Any
) -> dict[str, Any]:
    """A plan change through the API that must succeed; its answer."""
    response = await client.post(
        f"/subscriptions/{sub['id']}/change-plan",
        json={"planCode": plan, **body},
        headers={"Idempotency-Key": str(uuid.uuid4())},
    )
    assert response.status_code == 200, response.text
    changed: dict[str, Any] = response.json()
    return changed


async def renewals(engine: AsyncEngine, subscription_id: int) -> list[dict[str, Any]]:
    return await rows(
        engine,
        "SELECT period_index, period_start, period_end, subtotal FROM invoice "
        "WHERE subscription_id = :s AND kind = 'RENEWAL' ORDER BY period_index",
        s=subscription_id,
    )


async def renew(engine: AsyncEngine, clock: ManualClock) -> None:
    """Run the renewer at the clock's time until nothing is due."""
    url = engine.url.render_as_string(hide_password=False)
    pool = pg.LazyPool(CoreSettings(database_url=url), max_size=2)
    try:
        renewer = Renewer(pool, clock, batch_size=10)
        while await renewer.tick():
            pass
    finally:
        await pool.close()


async def renew_until(engine: AsyncEngine, clock: ManualClock, when: datetime) -> None:
    clock.set(when)
    await renew(engine, clock)


async def assert_clean(pool: pg.Pool, clock: ManualClock) -> None:
    report = await check_all(pool, now=clock.now(), ledger=LedgerEvidence({}), topic=None)
    for name in DATABASE_CHECKS:
        assert report.check(name).ok, (name, report.check(name).violations)
