"""Helpers of the renewer tests: subscriptions with domain-computed periods, batch runs, checks."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.db import pg
from billing_core.domain import period as period_rules
from billing_core.usecases.renew import BatchResult, renew_due_batch
from tests.support.factories import ensure_customers

_PLAN = pg.Statement(
    "SELECT id, price_amount, currency, billing_interval FROM plan WHERE code = :code"
)
_SUBSCRIPTION = pg.Statement(
    """
    INSERT INTO subscription (customer_id, plan_id, status, time_zone,
        billing_anchor, period_index, current_period_start,
        current_period_end, cancel_at_period_end, credit_balance)
    VALUES (:customer_id, :plan_id, :status, :tz, :anchor, :n, :start,
            :end, :cancel, :credit)
    RETURNING id
    """
)


async def plan_row(conn: pg.Connection, code: str) -> dict[str, Any]:
    row = await pg.fetchrow(conn, _PLAN, {"code": code})
    assert row is not None, code
    return dict(row)


async def create_subscription(
    engine: AsyncEngine,
    *,
    anchor: datetime,
    plan_code: str = "PRO_MONTHLY",
    time_zone: str = "UTC",
    period_index: int = 0,
    status: str = "ACTIVE",
    cancel_at_period_end: bool = False,
    credit_balance: int = 0,
    customer_id: int = 42,
) -> int:
    """Insert a subscription whose current period is ``period_index`` of ``anchor``, in one
    committed transaction on a driver connection."""
    conn = await driver_connection(engine)
    try:
        async with conn.transaction():
            plan = await plan_row(conn, plan_code)
            current = period_rules.period_bounds(
                anchor, period_rules.Interval(plan["billing_interval"]), period_index, time_zone
            )
            await ensure_customers(conn, [customer_id])
            params = {
                "customer_id": customer_id,
                "plan_id": plan["id"],
                "status": status,
                "tz": time_zone,
                "anchor": anchor,
                "n": period_index,
                "start": current.start,
                "end": current.end,
                "cancel": cancel_at_period_end,
                "credit": credit_balance,
            }
            return int(await pg.fetchval(conn, _SUBSCRIPTION, params))
    finally:
        await conn.close()


async def run_batch(
    engine: AsyncEngine, now: datetime, *, batch_size: int = 100, max_periods: int = 24
) -> BatchResult:
    """One batch in its own committed transaction on a driver connection, as the loop runs it."""
    conn = await driver_connection(engine)
    try:
        async with conn.transaction():
            return await renew_due_batch(
                conn, now=now, batch_size=batch_size, max_periods=max_periods
            )
    finally:
        await conn.close()


async def driver_connection(engine: AsyncEngine) -> pg.Connection:
    """A plain driver connection to ``engine``'s database."""
    return await asyncpg.connect(pg.asyncpg_dsn(engine.url.render_as_string(hide_password=False)))


async def subscription(engine: AsyncEngine, sub_id: int) -> dict[str, Any]:
    async with engine.connect() as conn:
        row = (
            await conn.execute(text("SELECT * FROM subscription WHERE id = :id"), {"id": sub_id})
        ).one()
    return dict(row._mapping)


async def invoices(engine: AsyncEngine, sub_id: int) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT * FROM invoice WHERE subscription_id = :id ORDER BY id"), {"id": sub_id}
        )
        return [dict(r._mapping) for r in rows]


async def events(engine: AsyncEngine, sub_id: int) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT * FROM outbox_event WHERE aggregate_id = :id ORDER BY sequence"),
            {"id": sub_id},
        )
        return [dict(r._mapping) for r in rows]


async def scalar(engine: AsyncEngine, sql: str, **params: Any) -> Any:
    async with engine.connect() as conn:
        return (await conn.execute(text(sql), params)).scalar_one()


@dataclass(frozen=True)
class Snapshot:
    """Each subscription's period index before the renewers ran."""

    period_index: dict[int, int]


async def snapshot(engine: AsyncEngine) -> Snapshot:
    async with engine.connect() as conn:
        rows = await conn.execute(text("SELECT id, period_index FROM subscription"))
        return Snapshot({int(r[0]): int(r[1]) for r in rows})


async def assert_exactly_once(engine: AsyncEngine, before: Snapshot) -> int:
    """Every subscription has exactly one renewal invoice per period it advanced, with period
    indexes before+1 .. now, each period's start equal to the previous period's end; nothing
    half done. Returns the number of invoices."""
    async with engine.connect() as conn:
        subs = {
            int(r[0]): (int(r[1]), r[2])
            for r in await conn.execute(
                text("SELECT id, period_index, current_period_start FROM subscription")
            )
        }
        inv_rows = (
            await conn.execute(
                text(
                    "SELECT subscription_id, period_index, period_start, period_end FROM invoice "
                    "WHERE kind = 'RENEWAL' ORDER BY subscription_id, period_index"
                )
            )
        ).all()
        created_events = int(
            (
                await conn.execute(
                    text("SELECT count(*) FROM outbox_event WHERE event_type = 'InvoiceCreated'")
                )
            ).scalar_one()
        )
    by_sub: dict[int, list[tuple[int, datetime, datetime]]] = {}
    for sid, idx, start, end in inv_rows:
        by_sub.setdefault(int(sid), []).append((int(idx), start, end))
    dupes = Counter((sid, idx) for sid, idx, _, _ in inv_rows)
    assert max(dupes.values(), default=1) == 1, "a period was invoiced twice"
    for sid, (index, current_start) in subs.items():
        got = by_sub.get(sid, [])
        expected = list(range(before.period_index[sid] + 1, index + 1))
        assert [g[0] for g in got] == expected, (sid, got, expected)
        for (_, _, end), (_, start, _) in itertools.pairwise(got):
            assert start == end, f"gap or overlap in subscription {sid}"
        if got:
            assert got[-1][1] == current_start
    assert created_events == len(inv_rows)
    return len(inv_rows)
