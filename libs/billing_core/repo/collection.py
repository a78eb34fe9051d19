"""Claiming invoices to charge: SKIP LOCKED + a lease, in a short transaction of its own.

The claim pushes ``next_attempt_at`` forward by the lease and commits BEFORE the gateway call, so
no lock is held during the call. If the collector dies mid-call, the invoice comes due again when
the lease ends, and the next try uses the same attempt count — the same idempotency key — so the
gateway answers with the first result instead of charging again.

**One clock for leases.** Whether an invoice is due, when its lease ends and when it was leased
are read from the database's clock (``statement_timestamp()``, plus the system-wide
``BILLING_CLOCK_OFFSET_SECONDS`` every process shares), never from the claiming process's own:
a replica whose host clock runs ahead would otherwise see the leases of the others as ended and
claim invoices whose calls are still in flight. The caller learns the lease's end as the
database wrote it (for the pre-call check) and a local deadline on its monotonic clock that is
never later than that end (for "is there still time to call").
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from billing_core.db.arrays import bool_array, instant_array, instant_sql, int_array
from billing_core.db.pg import Connection, Statement, execute, fetch, fetchrow
from billing_core.domain.charge_result import idempotency_key
from billing_core.repo.lease_clock import CLOCK_CTE, clock_params
from billing_core.repo.limits import require_positive_limit


@dataclass(frozen=True)
class LeasedInvoice:
    id: int
    subscription_id: int
    customer_id: int
    amount: int
    currency: str
    attempt_count: int
    lease_until: datetime  # the lease's end as the database wrote it (``next_attempt_at``)
    key_prefix: str = ""
    # ``time.monotonic()`` by which the lease has surely not ended yet (measured from before
    # the claim statement reached the database, so it errs early, never late).
    lease_deadline: float = math.inf
    # The gateway answered this very key with an uncertain result before: ask it what happened
    # (a look-up by key) before calling again.
    uncertain_before: bool = False
    # Canceled while its call may have been at the gateway: never charged again, only looked
    # up by key, and the answer decides (VOID, or VOID and a refund).
    void_requested: bool = False

    @property
    def idempotency_key(self) -> str:
        return idempotency_key(self.id, self.attempt_count, self.key_prefix)


# A paused subscription's invoices are not collected (its OPEN ones wait, dunning schedule and
# all, until it resumes); the call of one claimed before the pause ends normally.
NOT_PAUSED = """NOT EXISTS (
    SELECT 1 FROM subscription p
    WHERE p.id = invoice.subscription_id AND p.paused_at IS NOT NULL)"""

# ``:now`` NULL: the database's clock (moved by the shared offset); the tests pass instants.
_CLAIM = Statement(
    f"""
    WITH {CLOCK_CTE},
    due AS (
        SELECT id FROM invoice
        WHERE status = 'OPEN' AND next_attempt_at <= (SELECT now FROM clock)
          AND {NOT_PAUSED}
        ORDER BY next_attempt_at
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    )
    UPDATE invoice i
    SET next_attempt_at = clock.now + make_interval(secs => CAST(:lease_s AS double precision)),
        leased_at = clock.now, updated_at = clock.now
    FROM due, clock WHERE i.id = due.id
    RETURNING i.id, i.subscription_id, i.customer_id, i.amount, i.currency, i.attempt_count,
              i.next_attempt_at AS lease_until,
              EXISTS (
                  SELECT 1 FROM payment_attempt a
                  WHERE a.invoice_id = i.id AND a.outcome = 'UNKNOWN'
                    AND a.attempt_number = i.attempt_count
                    AND a.idempotency_key = CAST(:key_prefix AS text) || 'inv-' || i.id || '-try-'
                                            || i.attempt_count
              ) AS uncertain_before,
              i.void_requested_at IS NOT NULL AS void_requested
    """
)

_BACKLOG = Statement(
    f"""
    WITH clock AS (
        SELECT statement_timestamp()
               + make_interval(secs => CAST(:offset_s AS double precision)) AS now
    )
    SELECT count(*) AS due, min(next_attempt_at) AS oldest, (SELECT now FROM clock) AS now
    FROM invoice WHERE status = 'OPEN' AND next_attempt_at <= coalesce(
        CAST(:now AS timestamptz), (SELECT now FROM clock)) AND {NOT_PAUSED}
    """
)


async def claim_due_invoices(
    conn: Connection,
    *,
    limit: int,
    lease: timedelta,
    now: datetime | None = None,
    clock_offset: timedelta = timedelta(0),
    key_prefix: str = "",
) -> list[LeasedInvoice]:
    """Claim and lease up to ``limit`` due invoices, oldest due first.

    ``now`` None (the collector): due, leased and lease end by the database's clock plus
    ``clock_offset`` (the shared ``BILLING_CLOCK_OFFSET_SECONDS``); an instant: that one (tests).
    """
    require_positive_limit(limit)
    asked_at = time.monotonic()  # before the statement reaches the database: errs early
    rows = await fetch(
        conn,
        _CLAIM,
        {
            **clock_params(now, clock_offset),
            "limit": limit,
            "lease_s": lease.total_seconds(),
            "key_prefix": key_prefix,
        },
    )
    leased = [
        LeasedInvoice(
            id=r["id"],
            subscription_id=r["subscription_id"],
            customer_id=r["customer_id"],
            amount=r["amount"],
            currency=r["currency"],
            attempt_count=r["attempt_count"],
            lease_until=r["lease_until"],
            key_prefix=key_prefix,
            lease_deadline=asked_at + lease.total_seconds(),
            uncertain_before=bool(r["uncertain_before"]),
            void_requested=bool(r["void_requested"]),
        )
        for r in rows
    ]
    leased.sort(key=lambda inv: inv.id)
    return leased


_STILL_OURS = Statement(
    f"""
    SELECT i.id
    FROM unnest(
        CAST(:ids AS text)::bigint[], CAST(:lease_untils AS text)::bigint[],
        CAST(:attempt_counts AS text)::integer[], CAST(:void_requested AS text)::boolean[]
    ) AS c(id, lease_until, attempt_count, void_requested)
    JOIN invoice i ON i.id = c.id
    WHERE i.status = 'OPEN' AND i.next_attempt_at = {instant_sql("c.lease_until")}
      AND i.attempt_count = c.attempt_count
      AND (i.void_requested_at IS NULL OR c.void_requested)
    """
)


async def still_ours_to_charge(conn: Connection, invoices: Sequence[LeasedInvoice]) -> set[int]:
    """The ids of ``invoices`` still OPEN, at the attempt they were claimed at, under our lease.

    A cancel (VOID, or a void requested while the invoice was leased), a webhook that settled
    or rescheduled one, or another replica that took it after the lease ran out all change
    that; its call must then not be made. (An invoice claimed with its void already requested
    is only looked up, never charged: the request does not make it someone else's.)
    """
    rows = await fetch(
        conn,
        _STILL_OURS,
        {
            "ids": int_array(i.id for i in invoices),
            "lease_untils": instant_array(i.lease_until for i in invoices),
            "attempt_counts": int_array(i.attempt_count for i in invoices),
            "void_requested": bool_array(i.void_requested for i in invoices),
        },
    )
    return {int(r["id"]) for r in rows}


_RELEASE_VOID_REQUESTED = Statement(
    """
    UPDATE invoice SET next_attempt_at = :now, updated_at = :now
    WHERE id = :id AND status = 'OPEN' AND void_requested_at IS NOT NULL
      AND next_attempt_at = :lease_until
    """
)


async def release_void_requested(
    conn: Connection, invoice: LeasedInvoice, *, now: datetime
) -> None:
    """A call not made for an invoice whose void was requested meanwhile: its lease ends now
    (nothing was sent), so the void is decided at once instead of when the lease would end."""
    await execute(
        conn,
        _RELEASE_VOID_REQUESTED,
        {"id": invoice.id, "now": now, "lease_until": invoice.lease_until},
    )


@dataclass(frozen=True)
class KeyCalls:
    """What is known of the charge calls under a void-requested invoice's key."""

    # The latest a charge under the key may have reached the gateway: its void request (no
    # charge is called after it; the one in flight was sent before its pre-call check saw it)
    # or the latest answer to one, whichever is later.
    last_call_at: datetime
    # The gateway's id of a charge under the key, from an answer or a webhook, if any.
    reference: str | None


_KEY_CALLS = Statement(
    """
    SELECT greatest(i.void_requested_at, max(a.recorded_at) FILTER (
               WHERE a.source = 'COLLECTOR')) AS last_call_at,
           (array_agg(a.gateway_reference ORDER BY a.id DESC) FILTER (
               WHERE a.gateway_reference IS NOT NULL))[1] AS reference
    FROM invoice i
    LEFT JOIN payment_attempt a ON a.invoice_id = i.id AND a.idempotency_key = :key
    WHERE i.id = :id AND i.void_requested_at IS NOT NULL
    GROUP BY i.id
    """
)


async def key_calls(conn: Connection, invoice: LeasedInvoice) -> KeyCalls | None:
    """The charge calls under the key of ``invoice``, whose void is requested (None: it is not)."""
    row = await fetchrow(conn, _KEY_CALLS, {"id": invoice.id, "key": invoice.idempotency_key})
    return None if row is None else KeyCalls(row["last_call_at"], row["reference"])


async def due_backlog(
    conn: Connection,
    *,
    now: datetime | None = None,
    clock_offset: timedelta = timedelta(0),
) -> tuple[int, datetime | None]:
    """OPEN invoices due (``now`` None: by the database's clock, as the claim sees them) and the
    oldest due time."""
    due, oldest, _ = await due_backlog_at(conn, now=now, clock_offset=clock_offset)
    return due, oldest


async def due_backlog_at(
    conn: Connection,
    *,
    now: datetime | None = None,
    clock_offset: timedelta = timedelta(0),
) -> tuple[int, datetime | None, datetime]:
    """:func:`due_backlog` and the database's "now" it was read at."""
    (row,) = await fetch(conn, _BACKLOG, {"now": now, "offset_s": clock_offset.total_seconds()})
    return int(row["due"]), row["oldest"], now or row["now"]
