"""Backlog counts the operator tools show (``billing status``, ``billing demo``, the console):
read-only."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from billing_core.db import pg
from billing_core.db.pg import Connection, Statement

_SUBSCRIPTIONS = Statement(
    """
    SELECT status, count(*) AS n,
           count(*) FILTER (WHERE status = 'ACTIVE' AND current_period_end <= :now) AS due,
           min(current_period_end) FILTER (WHERE status = 'ACTIVE') AS next_end
    FROM subscription GROUP BY status ORDER BY status
    """
)
_INVOICES = Statement(
    """
    SELECT status, attempt_count,
           count(*) AS n,
           count(*) FILTER (WHERE status = 'OPEN' AND next_attempt_at <= :now) AS due,
           count(*) FILTER (WHERE status = 'OPEN' AND next_attempt_at > :now
                            AND leased_at IS NOT NULL) AS leased,
           min(next_attempt_at) FILTER (WHERE status = 'OPEN') AS next_attempt
    FROM invoice GROUP BY status, attempt_count ORDER BY status, attempt_count
    """
)
_OUTBOX = Statement(
    """
    SELECT count(*) FILTER (WHERE published_at IS NULL AND parked_at IS NULL) AS unpublished,
           count(*) FILTER (WHERE parked_at IS NOT NULL) AS parked,
           min(occurred_at) FILTER (WHERE published_at IS NULL AND parked_at IS NULL) AS oldest,
           count(*) AS total
    FROM outbox_event
    """
)

_MONEY_BACK = Statement(
    """
    SELECT
      (SELECT count(*) FROM refund WHERE status = 'REQUESTED') AS refunds_requested,
      (SELECT count(*) FROM refund WHERE status = 'REQUESTED' AND next_attempt_at <= :now)
         AS refunds_due,
      (SELECT count(*) FROM refund WHERE status = 'SUCCEEDED') AS refunds_succeeded,
      (SELECT count(*) FROM refund WHERE status = 'FAILED') AS refunds_failed,
      (SELECT count(*) FROM invoice WHERE status = 'OPEN' AND void_requested_at IS NOT NULL)
         AS voids_requested,
      (SELECT count(*) FROM reconciliation_item WHERE resolved_at IS NULL) AS open_items
    """
)

# By the instant each call was sent: the answers of a group are recorded together, whenever
# their calls went out. Webhooks and imports have no send instant.
_CALLS = Statement(
    """
    SELECT floor(extract(epoch FROM requested_at))::bigint AS second, count(*) AS calls
    FROM (SELECT requested_at FROM payment_attempt ORDER BY id DESC LIMIT :cap) recent
    WHERE requested_at > :since
    GROUP BY 1 ORDER BY 1
    """
)

CALLS_WINDOW_SECONDS = 180

_PROGRESS = Statement(
    """
    SELECT
      (SELECT count(*) FROM subscription s WHERE s.customer_id >= :first
         AND s.status = 'ACTIVE' AND s.current_period_end <= :now) AS due_subscriptions,
      (SELECT count(*) FROM invoice i WHERE i.customer_id >= :first
         AND (i.period_index > 0 OR i.kind = 'PRORATION')) AS invoices,
      (SELECT count(*) FROM invoice i WHERE i.customer_id >= :first AND i.status = 'OPEN'
         AND i.next_attempt_at <= :now) AS due_invoices,
      (SELECT count(*) FROM invoice i WHERE i.customer_id >= :first AND i.status = 'OPEN')
         AS open_invoices,
      (SELECT count(*) FROM invoice i WHERE i.customer_id >= :first AND i.status = 'PAID'
         AND i.period_index > 0) AS paid,
      (SELECT count(*) FROM invoice i WHERE i.customer_id >= :first AND i.status = 'FAILED')
         AS failed,
      (SELECT count(*) FROM invoice i WHERE i.customer_id >= :first AND i.attempt_count > 0)
         AS dunned,
      (SELECT count(*) FROM subscription s WHERE s.customer_id >= :first
         AND s.status = 'CANCELED') AS canceled,
      (SELECT count(*) FROM outbox_event WHERE published_at IS NULL) AS unpublished,
      (SELECT count(*) FROM outbox_event e JOIN subscription s ON s.id = e.aggregate_id
         WHERE s.customer_id >= :first AND e.published_at IS NOT NULL) AS published
    """
)


async def subscriptions_by_status(conn: Connection, now: datetime) -> list[dict[str, Any]]:
    """Per status: how many, how many due now (ACTIVE), the next period end."""
    return [dict(r) for r in await pg.fetch(conn, _SUBSCRIPTIONS, {"now": now})]


async def invoices_by_status(conn: Connection, now: datetime) -> list[dict[str, Any]]:
    """Per status and attempt count (the dunning pipeline): due now, leased, next attempt."""
    return [dict(r) for r in await pg.fetch(conn, _INVOICES, {"now": now})]


async def outbox_backlog(conn: Connection) -> dict[str, Any]:
    """Unpublished, parked and total outbox rows, and the oldest unpublished one's time."""
    [row] = await pg.fetch(conn, _OUTBOX)
    return dict(row)


async def money_back(conn: Connection, now: datetime) -> dict[str, int]:
    """Refunds by status (and how many are due), requested voids still waiting for their call,
    and the reconciliation items no one has resolved yet."""
    [row] = await pg.fetch(conn, _MONEY_BACK, {"now": now})
    return {k: int(v) for k, v in row.items()}


@dataclass(frozen=True)
class GatewayCalls:
    """The collectors' gateway calls (charges and look-ups) per second of sending, oldest
    first; the last is the second ``now`` is in, still filling."""

    per_second: list[int]

    @property
    def last_second(self) -> int:
        """Calls sent in the last whole second."""
        return self.per_second[-2] if len(self.per_second) >= 2 else 0

    @property
    def busiest_second(self) -> int:
        return max(self.per_second, default=0)


async def gateway_calls(
    conn: Connection, now: datetime, *, rate_limit: int, seconds: int = CALLS_WINDOW_SECONDS
) -> GatewayCalls:
    """Calls sent in each of the last ``seconds`` seconds up to ``now``'s, read from the newest
    attempts only (twice the limit's worth of the window), so the read stays bounded however
    large the table is."""
    since = datetime.fromtimestamp(now.timestamp() - seconds, tz=now.tzinfo)
    cap = max(10_000, rate_limit * seconds * 2)
    rows = await pg.fetch(conn, _CALLS, {"since": since, "cap": cap})
    sent = {int(r["second"]): int(r["calls"]) for r in rows}
    last = int(now.timestamp())
    return GatewayCalls([sent.get(s, 0) for s in range(last - seconds + 1, last + 1)])


async def demo_progress(
    conn: Connection, *, first_customer_id: int, now: datetime
) -> dict[str, int]:
    """The demo's counts, over the customers it seeded (ids from ``first_customer_id``)."""
    [row] = await pg.fetch(conn, _PROGRESS, {"first": first_customer_id, "now": now})
    return {k: int(v) for k, v in row.items()}
