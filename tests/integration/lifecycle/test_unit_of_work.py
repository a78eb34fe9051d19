"""The one unit of work of a lifecycle change (``usecases.lifecycle.change_subscription``):
an unchanged request writes only its audit row; a change writes the row once (version + 1),
then what follows it, then its events in the order decided, then its audit row."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.db import pg
from billing_core.domain import events
from billing_core.repo import audit
from billing_core.repo.subscriptions import Subscription, VersionConflict
from billing_core.usecases.lifecycle import Decision, Outcome, change_subscription
from tests.support.factories import create_subscription

START = datetime(2026, 12, 1, tzinfo=UTC)
NOW = START + timedelta(days=3)
ACTOR = audit.Actor.cli()


async def _one(pool: pg.Pool, sql: str) -> list[tuple[Any, ...]]:
    async with pool.acquire() as conn:
        return [tuple(r) for r in await conn.fetch(sql)]


async def _audit(pool: pg.Pool) -> list[tuple[Any, ...]]:
    found = await _one(
        pool, "SELECT action, version_before, version_after, detail FROM audit_event"
    )
    return [(*row[:3], json.loads(row[3])) for row in found]


async def _subscription(engine: AsyncEngine) -> int:
    async with engine.begin() as conn:
        return await create_subscription(conn, customer_id=7, start=START)


async def test_an_unchanged_request_writes_only_its_audit_row(
    engine: AsyncEngine, pool: pg.Pool
) -> None:
    sub = await _subscription(engine)

    async def decide(loaded: Subscription, now: datetime) -> Decision[str]:
        assert (loaded.id, now) == (sub, NOW)
        return Decision(
            Outcome(
                "same", [events.subscription_resumed(sub, START, now, automatic=False)], {"x": 1}
            )
        )

    async with pg.transaction(pool) as conn:
        result = await change_subscription(
            conn, decide, subscription_id=sub, action="test.same", now=NOW, actor=ACTOR
        )

    assert result == "same"
    assert await _one(pool, "SELECT version, event_seq FROM subscription") == [(0, 0)]
    assert await _one(pool, "SELECT count(*) FROM outbox_event") == [(0,)]
    assert await _audit(pool) == [("test.same", 0, 0, {"x": 1})]


async def test_a_change_writes_the_row_then_what_follows_then_events_then_audit(
    engine: AsyncEngine, pool: pg.Pool
) -> None:
    sub = await _subscription(engine)
    seen_in_then: list[tuple[Any, ...]] = []

    async with pg.transaction(pool) as conn:

        async def decide(loaded: Subscription, now: datetime) -> Decision[str]:
            async def then(version: int, decided: Outcome[str]) -> Outcome[str]:
                row = await conn.fetchrow(
                    "SELECT version, cancel_at_period_end FROM subscription WHERE id = $1", sub
                )
                seen_in_then.append((version, *row))
                first = events.subscription_resumed(sub, START, now, automatic=False)
                return Outcome("done", [first, *decided.events], {"version": version})

            decided = Outcome(
                "decided", [events.subscription_canceled(sub, "customer_request", now)]
            )
            return Decision(decided, {"cancel_at_period_end": True}, then)

        result = await change_subscription(
            conn, decide, subscription_id=sub, action="test.change", now=NOW, actor=ACTOR
        )

    assert result == "done"
    assert seen_in_then == [(1, 1, True)]
    assert await _one(pool, "SELECT version, updated_at FROM subscription") == [(1, NOW)]
    assert await _one(pool, "SELECT sequence, event_type FROM outbox_event ORDER BY sequence") == [
        (1, "SubscriptionResumed"),
        (2, "SubscriptionCanceled"),
    ]
    assert await _audit(pool) == [("test.change", 0, 1, {"version": 1})]


async def test_a_stale_expected_version_writes_nothing(engine: AsyncEngine, pool: pg.Pool) -> None:
    sub = await _subscription(engine)

    async def decide(loaded: Subscription, now: datetime) -> Decision[bool]:
        raise AssertionError("decided on a stale version")

    with pytest.raises(VersionConflict):
        async with pg.transaction(pool) as conn:
            await change_subscription(
                conn,
                decide,
                subscription_id=sub,
                action="test.stale",
                now=NOW,
                expected_version=5,
                actor=ACTOR,
            )
    assert await _one(pool, "SELECT count(*) FROM audit_event") == [(0,)]
