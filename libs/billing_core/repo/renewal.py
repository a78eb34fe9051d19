"""SQL of the renewal step: claim due subscriptions, write renewal invoices, advance periods.

Every function runs in the caller's transaction and never commits. The writes are set-based: one
statement per kind of write for the whole batch (``unnest`` of parallel arrays), so a batch of a
thousand subscriptions costs a handful of round trips, not thousands.

The claim uses the partial index ``idx_sub_due`` (``current_period_end WHERE status IN
('ACTIVE', 'TRIALING')``): only ACTIVE subscriptions are ever renewed, and TRIALING ones
invoiced at the trial's end (once its SubscriptionTrialWillEnd is written:
``usecases.trial_notices``), and the cost of finding the oldest due
rows does not grow with the number of subscriptions that are not due.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from billing_core.domain.renewal import DueSubscription, RenewalInvoice, RenewedSubscription
from billing_core.repo.limits import require_positive_limit
from billing_core.repo.subscriptions import subscription_state

Db = AsyncSession | AsyncConnection


@dataclass(frozen=True, slots=True)
class InsertedInvoice:
    id: int
    subscription_id: int
    period_index: int


@dataclass(frozen=True, slots=True)
class CreditUse:
    subscription_id: int
    invoice_id: int
    amount: int  # positive: the credit consumed (stored as a negative entry)


_CLAIM = """
    SELECT s.id, s.customer_id, s.status, s.time_zone, s.billing_anchor, s.period_index,
           s.current_period_start, s.current_period_end, s.cancel_at_period_end,
           s.canceled_at, s.credit_balance, s.version,
           s.pause_behavior, s.paused_at, s.pause_resumes_at,
           p.code AS plan_code, p.price_amount, p.currency, p.billing_interval,
           sp.code AS scheduled_plan_code, sp.price_amount AS scheduled_price_amount,
           sp.billing_interval AS scheduled_billing_interval, s.anchor_period_index
    FROM subscription s
    JOIN plan p ON p.id = s.plan_id
    LEFT JOIN plan sp ON sp.id = s.scheduled_plan_id
    WHERE s.status IN ('ACTIVE', 'TRIALING') AND s.current_period_end <= :now
      AND (s.status = 'ACTIVE' OR s.trial_will_end_sent_at IS NOT NULL)
      AND s.id <> ALL(CAST(:exclude AS bigint[]))
    ORDER BY s.current_period_end
    LIMIT :limit
    FOR UPDATE OF s SKIP LOCKED
"""

# The same claim for one subscription (a plan change catching up its renewal first): it locks
# the row and waits for a renewer that holds it (then finds it renewed, or not due any more).
_CLAIM_ONE = _CLAIM.replace(
    "AND s.id <> ALL(CAST(:exclude AS bigint[]))", "AND s.id = :only"
).replace("FOR UPDATE OF s SKIP LOCKED", "FOR UPDATE OF s")

_INSERT_INVOICES = text(
    """
    INSERT INTO invoice (subscription_id, customer_id, kind, period_index, period_start,
                         period_end, subtotal, credit_applied, amount, currency, status,
                         next_attempt_at, paid_at, closed_at, created_at, updated_at)
    SELECT u.subscription_id, u.customer_id, 'RENEWAL', u.period_index, u.period_start,
           u.period_end, u.subtotal, u.credit_applied, u.amount, u.currency, u.status,
           u.next_attempt_at, u.paid_at,
           CASE WHEN u.status = 'VOID' THEN CAST(:now AS timestamptz) ELSE u.paid_at END,
           :now, :now
    FROM unnest(
        CAST(:subscription_ids AS bigint[]), CAST(:customer_ids AS bigint[]),
        CAST(:period_indexes AS int[]), CAST(:period_starts AS timestamptz[]),
        CAST(:period_ends AS timestamptz[]), CAST(:subtotals AS bigint[]),
        CAST(:credits AS bigint[]), CAST(:amounts AS bigint[]), CAST(:currencies AS text[]),
        CAST(:statuses AS text[]), CAST(:next_attempts AS timestamptz[]),
        CAST(:paid_ats AS timestamptz[])
    ) WITH ORDINALITY AS u(subscription_id, customer_id, period_index, period_start, period_end,
                           subtotal, credit_applied, amount, currency, status, next_attempt_at,
                           paid_at, ord)
    ORDER BY u.ord
    ON CONFLICT (subscription_id, period_start) WHERE kind = 'RENEWAL' DO NOTHING
    RETURNING id, subscription_id, period_index
    """
)

_EXISTING = text(
    """
    SELECT i.subscription_id, i.period_start
    FROM unnest(CAST(:subscription_ids AS bigint[]), CAST(:period_starts AS timestamptz[]))
         AS u(subscription_id, period_start)
    JOIN invoice i ON i.subscription_id = u.subscription_id
                  AND i.period_start = u.period_start AND i.kind = 'RENEWAL'
    """
)

_UPDATE_SUBSCRIPTIONS = text(
    """
    UPDATE subscription s
    SET status = u.status, period_index = u.period_index,
        current_period_start = u.period_start, current_period_end = u.period_end,
        credit_balance = u.credit_balance, canceled_at = u.canceled_at,
        version = u.version, updated_at = :now, event_seq = s.event_seq + u.event_count,
        -- a cancel at period end ends a pause too
        pause_behavior = CASE WHEN u.status = 'CANCELED' THEN NULL ELSE s.pause_behavior END,
        paused_at = CASE WHEN u.status = 'CANCELED' THEN NULL ELSE s.paused_at END,
        pause_resumes_at = CASE WHEN u.status = 'CANCELED' THEN NULL
                                ELSE s.pause_resumes_at END,
        -- a plan change scheduled for the period end, applied
        plan_id = CASE WHEN u.plan_changed THEN s.scheduled_plan_id ELSE s.plan_id END,
        scheduled_plan_id = CASE WHEN u.plan_changed OR u.status = 'CANCELED' THEN NULL
                                 ELSE s.scheduled_plan_id END,
        -- moved by a scheduled change to another interval (else written as it was)
        billing_anchor = coalesce(u.billing_anchor, s.billing_anchor),
        anchor_period_index = coalesce(u.anchor_period_index, s.anchor_period_index)
    FROM unnest(
        CAST(:ids AS bigint[]), CAST(:expected_versions AS bigint[]), CAST(:versions AS bigint[]),
        CAST(:statuses AS text[]), CAST(:period_indexes AS int[]),
        CAST(:period_starts AS timestamptz[]), CAST(:period_ends AS timestamptz[]),
        CAST(:credit_balances AS bigint[]), CAST(:canceled_ats AS timestamptz[]),
        CAST(:event_counts AS int[]), CAST(:plan_changes AS boolean[]),
        CAST(:anchors AS timestamptz[]), CAST(:anchor_period_indexes AS int[])
    ) AS u(id, expected_version, version, status, period_index, period_start, period_end,
           credit_balance, canceled_at, event_count, plan_changed, billing_anchor,
           anchor_period_index)
    WHERE s.id = u.id AND s.version = u.expected_version
    RETURNING s.id, s.event_seq - u.event_count AS reserved_after
    """
)

_INSERT_CREDIT_USES = text(
    """
    INSERT INTO credit_entry (subscription_id, amount, reason, invoice_id, created_at)
    SELECT u.subscription_id, -u.amount, 'INVOICE', u.invoice_id, :now
    FROM unnest(CAST(:subscription_ids AS bigint[]), CAST(:invoice_ids AS bigint[]),
                CAST(:amounts AS bigint[])) AS u(subscription_id, invoice_id, amount)
    """
)

_COUNT_DUE = text(
    "SELECT count(*) FROM subscription "
    "WHERE status IN ('ACTIVE', 'TRIALING') AND current_period_end <= :now"
)


async def claim_due(
    db: Db,
    *,
    now: datetime,
    limit: int,
    exclude_ids: Sequence[int] = (),
    only_id: int | None = None,
) -> list[DueSubscription]:
    """Lock up to ``limit`` due ACTIVE subscriptions, oldest first, skipping rows other
    transactions hold (``FOR UPDATE SKIP LOCKED``): concurrent renewers get disjoint batches.
    ``only_id``: just that subscription if it is due (waiting for its row lock)."""
    require_positive_limit(limit)
    if only_id is not None:
        result = await db.execute(text(_CLAIM_ONE), {"now": now, "limit": 1, "only": only_id})
    else:
        result = await db.execute(
            text(_CLAIM), {"now": now, "limit": limit, "exclude": list(exclude_ids)}
        )
    return [
        DueSubscription(
            state=subscription_state(row),
            customer_id=row["customer_id"],
            time_zone=row["time_zone"],
            billing_anchor=row["billing_anchor"],
            period_index=row["period_index"],
            current_period_start=row["current_period_start"],
            current_period_end=row["current_period_end"],
            credit_balance=row["credit_balance"],
            price_amount=row["price_amount"],
            currency=row["currency"],
            billing_interval=row["billing_interval"],
            scheduled_price_amount=row["scheduled_price_amount"],
            scheduled_billing_interval=row["scheduled_billing_interval"],
            anchor_period_index=row["anchor_period_index"],
        )
        for row in result.mappings()
    ]


async def explain_claim(db: Db, *, now: datetime, limit: int) -> str:
    """The plan PostgreSQL chooses for the claim (tests and benchmarks check the index)."""
    result = await db.execute(
        text("EXPLAIN " + _CLAIM), {"now": now, "limit": limit, "exclude": []}
    )
    return "\n".join(str(row[0]) for row in result.all())


async def insert_renewal_invoices(
    db: Db, invoices: Sequence[RenewalInvoice], *, now: datetime
) -> list[InsertedInvoice]:
    """Insert the invoices in one statement, in the given order. A renewal that already exists
    for its (subscription, period_start) is not inserted again (the UNIQUE safety net) and is
    absent from the result, so the caller can tell exactly which rows went in."""
    if not invoices:
        return []
    result = await db.execute(
        _INSERT_INVOICES,
        {
            "subscription_ids": [i.subscription_id for i in invoices],
            "customer_ids": [i.customer_id for i in invoices],
            "period_indexes": [i.period_index for i in invoices],
            "period_starts": [i.period_start for i in invoices],
            "period_ends": [i.period_end for i in invoices],
            "subtotals": [i.subtotal for i in invoices],
            "credits": [i.credit_applied for i in invoices],
            "amounts": [i.amount for i in invoices],
            "currencies": [i.currency for i in invoices],
            "statuses": [str(i.status) for i in invoices],
            "next_attempts": [i.next_attempt_at for i in invoices],
            "paid_ats": [i.paid_at for i in invoices],
            "now": now,
        },
    )
    return [InsertedInvoice(**row) for row in result.mappings()]


async def existing_renewals(
    db: Db, keys: Sequence[tuple[int, datetime]]
) -> set[tuple[int, datetime]]:
    """Which (subscription_id, period_start) renewal invoices already exist."""
    if not keys:
        return set()
    result = await db.execute(
        _EXISTING,
        {
            "subscription_ids": [k[0] for k in keys],
            "period_starts": [k[1] for k in keys],
        },
    )
    return {(int(row.subscription_id), row.period_start) for row in result}


async def write_subscriptions(
    db: Db,
    writes: Sequence[RenewedSubscription],
    *,
    event_counts: Mapping[int, int],
    now: datetime,
) -> dict[int, int]:
    """Apply the new states in one statement and reserve each subscription's next
    ``event_counts[id]`` event sequence numbers (the outbox's numbering, under the row lock this
    update holds). Return, for each id actually updated, its ``event_seq`` before the
    reservation (a row whose version is not ``expected_version`` is left alone and missing)."""
    if not writes:
        return {}
    result = await db.execute(
        _UPDATE_SUBSCRIPTIONS,
        {
            "ids": [w.id for w in writes],
            "expected_versions": [w.expected_version for w in writes],
            "versions": [w.version for w in writes],
            "statuses": [str(w.status) for w in writes],
            "period_indexes": [w.period_index for w in writes],
            "period_starts": [w.current_period_start for w in writes],
            "period_ends": [w.current_period_end for w in writes],
            "credit_balances": [w.credit_balance for w in writes],
            "canceled_ats": [w.canceled_at for w in writes],
            "event_counts": [event_counts.get(w.id, 0) for w in writes],
            "plan_changes": [w.plan_changed for w in writes],
            "anchors": [w.billing_anchor for w in writes],
            "anchor_period_indexes": [w.anchor_period_index for w in writes],
            "now": now,
        },
    )
    return {int(row.id): int(row.reserved_after) for row in result}


async def insert_credit_uses(db: Db, uses: Sequence[CreditUse], *, now: datetime) -> None:
    """Record the credit consumed by invoices (negative ``credit_entry`` rows, reason INVOICE)."""
    if not uses:
        return
    await db.execute(
        _INSERT_CREDIT_USES,
        {
            "subscription_ids": [u.subscription_id for u in uses],
            "invoice_ids": [u.invoice_id for u in uses],
            "amounts": [u.amount for u in uses],
            "now": now,
        },
    )


async def count_due(db: Db, *, now: datetime) -> int:
    """How many ACTIVE or TRIALING subscriptions are due at ``now`` (the backlog gauge)."""
    return int((await db.execute(_COUNT_DUE, {"now": now})).scalar_one())
