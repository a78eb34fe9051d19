"""Claiming invoices to charge: SKIP LOCKED + a lease, in a short transaction of its own.

The claim pushes ``next_attempt_at`` forward by the lease and commits BEFORE the gateway call, so
no lock is held during the call. If the collector dies mid-call, the invoice comes due again when
the lease ends, and the next try uses the same attempt count — the same idempotency key — so the
gateway answers with the first result instead of charging again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from billing_core.domain.charge_result import idempotency_key
from billing_core.repo.limits import require_positive_limit


@dataclass(frozen=True)
class LeasedInvoice:
    id: int
    subscription_id: int
    customer_id: int
    amount: int
    currency: str
    attempt_count: int
    lease_until: datetime
    key_prefix: str = ""

    @property
    def idempotency_key(self) -> str:
        return idempotency_key(self.id, self.attempt_count, self.key_prefix)


_CLAIM = text(
    """
    WITH due AS (
        SELECT id FROM invoice
        WHERE status = 'OPEN' AND next_attempt_at <= :now AND void_requested_at IS NULL
        ORDER BY next_attempt_at
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    )
    UPDATE invoice i
    SET next_attempt_at = :lease_until, leased_at = :now, updated_at = :now
    FROM due WHERE i.id = due.id
    RETURNING i.id, i.subscription_id, i.customer_id, i.amount, i.currency, i.attempt_count
    """
)

_BACKLOG = text(
    """
    SELECT count(*) AS due, min(next_attempt_at) AS oldest
    FROM invoice WHERE status = 'OPEN' AND next_attempt_at <= :now
    """
)


async def claim_due_invoices(
    db: AsyncSession | AsyncConnection,
    *,
    now: datetime,
    limit: int,
    lease: timedelta,
    key_prefix: str = "",
) -> list[LeasedInvoice]:
    require_positive_limit(limit)
    lease_until = now + lease
    rows = (
        await db.execute(_CLAIM, {"now": now, "limit": limit, "lease_until": lease_until})
    ).mappings()
    leased = [
        LeasedInvoice(
            id=r["id"],
            subscription_id=r["subscription_id"],
            customer_id=r["customer_id"],
            amount=r["amount"],
            currency=r["currency"],
            attempt_count=r["attempt_count"],
            lease_until=lease_until,
            key_prefix=key_prefix,
        )
        for r in rows
    ]
    leased.sort(key=lambda inv: inv.id)
    return leased


_STILL_OURS = text(
    """
    SELECT i.id
    FROM unnest(
        CAST(:ids AS bigint[]), CAST(:lease_untils AS timestamptz[]),
        CAST(:attempt_counts AS integer[])
    ) AS c(id, lease_until, attempt_count)
    JOIN invoice i ON i.id = c.id
    WHERE i.status = 'OPEN' AND i.next_attempt_at = c.lease_until
      AND i.attempt_count = c.attempt_count AND i.void_requested_at IS NULL
    """
)


async def still_ours_to_charge(
    db: AsyncSession | AsyncConnection, invoices: Sequence[LeasedInvoice]
) -> set[int]:
    """The ids of ``invoices`` still OPEN, at the attempt they were claimed at, under our lease.

    A cancel (VOID, or a void requested while the invoice was leased), a webhook that settled
    or rescheduled one, or another replica that took it after the lease ran out all change
    that; its call must then not be made.
    """
    rows = await db.execute(
        _STILL_OURS,
        {
            "ids": [i.id for i in invoices],
            "lease_untils": [i.lease_until for i in invoices],
            "attempt_counts": [i.attempt_count for i in invoices],
        },
    )
    return {int(r[0]) for r in rows}


_RELEASE_VOID_REQUESTED = text(
    """
    UPDATE invoice SET next_attempt_at = :now, updated_at = :now
    WHERE id = :id AND status = 'OPEN' AND void_requested_at IS NOT NULL
      AND next_attempt_at = :lease_until
    """
)


async def release_void_requested(
    db: AsyncSession | AsyncConnection, invoice: LeasedInvoice, *, now: datetime
) -> None:
    """A call not made for an invoice whose void was requested meanwhile: its lease ends now
    (nothing was sent), so the void is decided at once instead of when the lease would end."""
    await db.execute(
        _RELEASE_VOID_REQUESTED, {"id": invoice.id, "now": now, "lease_until": invoice.lease_until}
    )


async def due_backlog(
    db: AsyncSession | AsyncConnection, *, now: datetime
) -> tuple[int, datetime | None]:
    row = (await db.execute(_BACKLOG, {"now": now})).mappings().one()
    return int(row["due"]), row["oldest"]
