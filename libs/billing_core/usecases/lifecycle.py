"""The one unit of work of a change to a subscription's lifecycle, in the caller's transaction.

Load the row for the change (version-checked, at the change's instant), let the use case decide
from it (its ``decide``: the pure domain rule, plus what the rule needs read), then either
record the unchanged request, or make the versioned write of the row, what the change writes
after the row (``Decision.then``: invoices, voids, credit; the row's lock first, the lock order
of every writer), its events and its audit row.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

from billing_core.db.pg import Connection
from billing_core.domain.events import DomainEvent
from billing_core.repo import audit, outbox
from billing_core.repo import subscriptions as subscriptions_repo

R = TypeVar("R")


@dataclass(frozen=True)
class Outcome(Generic[R]):
    """What the change returns, the events it appends (in order) and its audit detail."""

    result: R
    events: Sequence[DomainEvent] = ()
    detail: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Decision(Generic[R]):
    """``values``: the row's new columns (``None``: the request changes nothing, only its
    audit row is written). ``then``: what the change writes after the row, given the row's
    new version; it completes the decided outcome."""

    outcome: Outcome[R]
    values: Mapping[str, Any] | None = None
    then: Callable[[int, Outcome[R]], Awaitable[Outcome[R]]] | None = None


Decide = Callable[[subscriptions_repo.Subscription, datetime], Awaitable[Decision[R]]]
Refresh = Callable[
    [subscriptions_repo.Subscription, datetime], Awaitable[subscriptions_repo.Subscription]
]


async def change_subscription(
    conn: Connection,
    decide: Decide[R],
    *,
    subscription_id: int,
    action: str,
    now: datetime,
    expected_version: int | None = None,
    actor: audit.Actor | None = None,
    refresh: Refresh | None = None,
) -> R:
    """Run one change: ``decide`` sees the row as loaded for it (``refresh``: brought up to
    date first, e.g. renewed when due) at the change's instant. With ``actor``, the request is
    recorded in ``audit_event`` (``action``, changed or not). Raises ``VersionConflict`` when
    the row is not at ``expected_version`` or changes before the write."""
    sub, now = await subscriptions_repo.get_for_change(conn, subscription_id, expected_version, now)
    if refresh is not None:
        sub = await refresh(sub, now)
    decision = await decide(sub, now)
    outcome, version = decision.outcome, sub.version
    if decision.values is not None:
        version = await subscriptions_repo.update_versioned(
            conn, sub.id, expected_version=sub.version, now=now, values=dict(decision.values)
        )
        if decision.then is not None:
            outcome = await decision.then(version, outcome)
        await outbox.append_events(conn, outcome.events, now)
    await audit.record_subscription_change(
        conn,
        actor,
        action,
        sub.id,
        before=sub.version,
        after=version,
        detail=outcome.detail,
        now=now,
    )
    return outcome.result
