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

from billing_core.db import pg
from billing_core.db.arrays import (
    bool_array,
    instant_array,
    instant_sql,
    int_array,
    nullable_int_array,
    text_array,
)
from billing_core.db.pg import Connection, Statement
from billing_core.domain.invoice import InvoiceStatus
from billing_core.domain.renewal import DueSubscription, RenewalInvoice, RenewedSubscription
from billing_core.domain.subscription import SubscriptionStatus
from billing_core.repo.limits import require_positive_limit
from billing_core.repo.subscriptions import subscription_state

# How a new renewal invoice may start (``invoice.opening``, or a paused period's VOID or DRAFT).
_RENEWAL_OPENINGS = frozenset(
    {InvoiceStatus.OPEN, InvoiceStatus.PAID, InvoiceStatus.VOID, InvoiceStatus.DRAFT}
)


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


_CLAIM_SQL = """
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
      AND s.id <> ALL(CAST(:exclude AS text)::bigint[])
    ORDER BY s.current_period_end
    LIMIT :limit
    FOR UPDATE OF s SKIP LOCKED
"""
_CLAIM = Statement(_CLAIM_SQL)
_EXPLAIN_CLAIM = Statement("EXPLAIN " + _CLAIM_SQL)

# The same claim for one subscription (a plan change catching up its renewal first): it locks
# the row and waits for a renewer that holds it (then finds it renewed, or not due any more).
_CLAIM_ONE = Statement(
    _CLAIM_SQL.replace(
        "AND s.id <> ALL(CAST(:exclude AS text)::bigint[])", "AND s.id = :only"
    ).replace("FOR UPDATE OF s SKIP LOCKED", "FOR UPDATE OF s")
)

# The customer and the currency come from the locked subscription and its plan (the plan it was
# claimed at: the batch applies scheduled plan changes after its invoices are in), and when an
# invoice is due or paid from its status (``insert_renewal_invoices`` checks that the planned
# invoices say the same): fewer arrays for the driver to encode, row by row.
_INSERT_INVOICES = Statement(
    f"""
    INSERT INTO invoice (subscription_id, customer_id, kind, period_index, period_start,
                         period_end, subtotal, credit_applied, amount, currency, status,
                         next_attempt_at, paid_at, closed_at, created_at, updated_at)
    SELECT u.subscription_id, s.customer_id, 'RENEWAL', u.period_index,
           {instant_sql("u.period_start")}, {instant_sql("u.period_end")}, u.subtotal,
           u.credit_applied, u.amount, p.currency, u.status,
           CASE WHEN u.status = 'OPEN' THEN CAST(:now AS timestamptz) END,
           CASE WHEN u.status = 'PAID' THEN CAST(:now AS timestamptz) END,
           CASE WHEN u.status IN ('PAID', 'VOID') THEN CAST(:now AS timestamptz) END,
           :now, :now
    FROM unnest(
        CAST(:subscription_ids AS text)::bigint[], CAST(:period_indexes AS text)::int[],
        CAST(:period_starts AS text)::bigint[], CAST(:period_ends AS text)::bigint[],
        CAST(:subtotals AS text)::bigint[], CAST(:credits AS text)::bigint[],
        CAST(:amounts AS text)::bigint[],
        CAST(:statuses AS text)::text[]
    ) WITH ORDINALITY AS u(subscription_id, period_index, period_start, period_end, subtotal,
                           credit_applied, amount, status, ord)
    JOIN subscription s ON s.id = u.subscription_id
    JOIN plan p ON p.id = s.plan_id
    ORDER BY u.ord
    ON CONFLICT (subscription_id, period_start) WHERE kind = 'RENEWAL' DO NOTHING
    RETURNING id, subscription_id, period_index
    """
)

_EXISTING = Statement(
    f"""
    SELECT i.subscription_id, i.period_start
    FROM unnest(CAST(:subscription_ids AS text)::bigint[],
                CAST(:period_starts AS text)::bigint[])
         AS u(subscription_id, period_start)
    JOIN invoice i ON i.subscription_id = u.subscription_id
                  AND i.period_start = {instant_sql("u.period_start")} AND i.kind = 'RENEWAL'
    """
)

_UPDATE_SUBSCRIPTIONS = Statement(
    f"""
    UPDATE subscription s
    SET status = u.status, period_index = u.period_index,
        current_period_start = {instant_sql("u.period_start")},
        current_period_end = {instant_sql("u.period_end")},
        credit_balance = u.credit_balance,
        canceled_at = CASE WHEN u.status = 'CANCELED' THEN CAST(:now AS timestamptz) END,
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
        billing_anchor = coalesce({instant_sql("u.billing_anchor")}, s.billing_anchor),
        anchor_period_index = coalesce(u.anchor_period_index, s.anchor_period_index)
    FROM unnest(
        CAST(:ids AS text)::bigint[], CAST(:expected_versions AS text)::bigint[],
        CAST(:versions AS text)::bigint[],
        CAST(:statuses AS text)::text[], CAST(:period_indexes AS text)::int[],
        CAST(:period_starts AS text)::bigint[], CAST(:period_ends AS text)::bigint[],
        CAST(:credit_balances AS text)::bigint[],
        CAST(:event_counts AS text)::int[], CAST(:plan_changes AS text)::boolean[],
        CAST(:anchors AS text)::bigint[], CAST(:anchor_period_indexes AS text)::int[]
    ) AS u(id, expected_version, version, status, period_index, period_start, period_end,
           credit_balance, event_count, plan_changed, billing_anchor,
           anchor_period_index)
    WHERE s.id = u.id AND s.version = u.expected_version
    RETURNING s.id, s.event_seq - u.event_count AS reserved_after
    """
)

_INSERT_CREDIT_USES = Statement(
    """
    INSERT INTO credit_entry (subscription_id, amount, reason, invoice_id, created_at)
    SELECT u.subscription_id, -u.amount, 'INVOICE', u.invoice_id, :now
    FROM unnest(CAST(:subscription_ids AS text)::bigint[], CAST(:invoice_ids AS text)::bigint[],
                CAST(:amounts AS text)::bigint[]) AS u(subscription_id, invoice_id, amount)
    """
)

_COUNT_DUE = Statement(
    "SELECT count(*) FROM subscription "
    "WHERE status IN ('ACTIVE', 'TRIALING') AND current_period_end <= :now"
)

# The all-or-none insert of a batch's renewal invoices (only one is open at a time).
_SAVEPOINT = Statement("SAVEPOINT renewal_invoices")
_RELEASE = Statement("RELEASE SAVEPOINT renewal_invoices")
_ROLLBACK_TO = Statement("ROLLBACK TO SAVEPOINT renewal_invoices")


async def claim_due(
    conn: Connection,
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
    if only_id is None:
        params = {"now": now, "limit": limit, "exclude": int_array(exclude_ids)}
        rows = await pg.fetch(conn, _CLAIM, params)
    else:
        rows = await pg.fetch(conn, _CLAIM_ONE, {"now": now, "limit": 1, "only": only_id})
    return [
        DueSubscription(
            subscription_state(row),
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
        for row in rows
    ]


async def explain_claim(conn: Connection, *, now: datetime, limit: int) -> str:
    """The plan PostgreSQL chooses for the claim (tests and benchmarks check the index)."""
    rows = await pg.fetch(
        conn, _EXPLAIN_CLAIM, {"now": now, "limit": limit, "exclude": int_array(())}
    )
    return "\n".join(str(row["QUERY PLAN"]) for row in rows)


async def insert_renewal_invoices(
    conn: Connection, invoices: Sequence[RenewalInvoice], *, now: datetime
) -> list[InsertedInvoice]:
    """Insert the invoices in one statement, in the given order. A renewal that already exists
    for its (subscription, period_start) is not inserted again (the UNIQUE safety net) and is
    absent from the result, so the caller can tell exactly which rows went in.

    Each invoice is of its subscription's customer, in its plan's currency, and opens as a new
    renewal does (``invoice.opening``): OPEN and due ``now``, PAID at ``now``, or a paused
    period's VOID or DRAFT, never due; anything else raises ``ValueError`` (nothing written)."""
    if not invoices:
        return []
    ids: list[int] = []
    indexes: list[int] = []
    starts: list[datetime] = []
    ends: list[datetime] = []
    subtotals: list[int] = []
    credits: list[int] = []
    amounts: list[int] = []
    statuses: list[str] = []
    for i in invoices:
        status = i.status
        due_at = now if status == InvoiceStatus.OPEN else None
        paid_at = now if status == InvoiceStatus.PAID else None
        if status not in _RENEWAL_OPENINGS or i.next_attempt_at != due_at or i.paid_at != paid_at:
            raise ValueError(
                f"renewal of subscription {i.subscription_id} period {i.period_index} "
                f"opens {status} with next_attempt_at={i.next_attempt_at} paid_at={i.paid_at}"
            )
        ids.append(i.subscription_id)
        indexes.append(i.period_index)
        starts.append(i.period_start)
        ends.append(i.period_end)
        subtotals.append(i.subtotal)
        credits.append(i.credit_applied)
        amounts.append(i.amount)
        statuses.append(status.value)
    rows = await pg.fetch(
        conn,
        _INSERT_INVOICES,
        {
            "subscription_ids": int_array(ids),
            "period_indexes": int_array(indexes),
            "period_starts": instant_array(starts),
            "period_ends": instant_array(ends),
            "subtotals": int_array(subtotals),
            "credits": int_array(credits),
            "amounts": int_array(amounts),
            "statuses": text_array(statuses),
            "now": now,
        },
    )
    return [InsertedInvoice(row["id"], row["subscription_id"], row["period_index"]) for row in rows]


async def insert_all_renewal_invoices(
    conn: Connection, invoices: Sequence[RenewalInvoice], *, now: datetime
) -> list[InsertedInvoice] | None:
    """:func:`insert_renewal_invoices` of every one of ``invoices`` or of none: under a
    savepoint, rolled back (None) when any of them already existed."""
    if not invoices:
        return []
    await pg.execute(conn, _SAVEPOINT)
    inserted = await insert_renewal_invoices(conn, invoices, now=now)
    if len(inserted) == len(invoices):
        await pg.execute(conn, _RELEASE)
        return inserted
    await pg.execute(conn, _ROLLBACK_TO)
    return None


async def existing_renewals(
    conn: Connection, keys: Sequence[tuple[int, datetime]]
) -> set[tuple[int, datetime]]:
    """Which (subscription_id, period_start) renewal invoices already exist."""
    if not keys:
        return set()
    rows = await pg.fetch(
        conn,
        _EXISTING,
        {
            "subscription_ids": int_array(k[0] for k in keys),
            "period_starts": instant_array(k[1] for k in keys),
        },
    )
    return {(int(row["subscription_id"]), row["period_start"]) for row in rows}


async def write_subscriptions(
    conn: Connection,
    writes: Sequence[RenewedSubscription],
    *,
    event_counts: Mapping[int, int],
    now: datetime,
) -> dict[int, int]:
    """Apply the new states in one statement and reserve each subscription's next
    ``event_counts[id]`` event sequence numbers (the outbox's numbering, under the row lock this
    update holds). Return, for each id actually updated, its ``event_seq`` before the
    reservation (a row whose version is not ``expected_version`` is left alone and missing).

    A subscription is canceled at ``now`` (its ``canceled_at``, set in SQL from its status) or
    not at all; a write saying otherwise raises ``ValueError`` (nothing written)."""
    if not writes:
        return {}
    ids: list[int] = []
    expected: list[int] = []
    versions: list[int] = []
    statuses: list[str] = []
    indexes: list[int] = []
    starts: list[datetime] = []
    ends: list[datetime] = []
    balances: list[int] = []
    counts: list[int] = []
    changed: list[bool] = []
    anchors: list[datetime | None] = []
    anchor_indexes: list[int | None] = []
    canceled = SubscriptionStatus.CANCELED
    for w in writes:
        if w.canceled_at != (now if w.status == canceled else None):
            raise ValueError(f"subscription {w.id} is {w.status} with canceled_at={w.canceled_at}")
        ids.append(w.id)
        expected.append(w.expected_version)
        versions.append(w.version)
        statuses.append(w.status.value)
        indexes.append(w.period_index)
        starts.append(w.current_period_start)
        ends.append(w.current_period_end)
        balances.append(w.credit_balance)
        counts.append(event_counts.get(w.id, 0))
        changed.append(w.plan_changed)
        anchors.append(w.billing_anchor)
        anchor_indexes.append(w.anchor_period_index)
    rows = await pg.fetch(
        conn,
        _UPDATE_SUBSCRIPTIONS,
        {
            "ids": int_array(ids),
            "expected_versions": int_array(expected),
            "versions": int_array(versions),
            "statuses": text_array(statuses),
            "period_indexes": int_array(indexes),
            "period_starts": instant_array(starts),
            "period_ends": instant_array(ends),
            "credit_balances": int_array(balances),
            "event_counts": int_array(counts),
            "plan_changes": bool_array(changed),
            "anchors": instant_array(anchors),
            "anchor_period_indexes": nullable_int_array(anchor_indexes),
            "now": now,
        },
    )
    return {int(row["id"]): int(row["reserved_after"]) for row in rows}


async def insert_credit_uses(conn: Connection, uses: Sequence[CreditUse], *, now: datetime) -> None:
    """Record the credit consumed by invoices (negative ``credit_entry`` rows, reason INVOICE)."""
    if not uses:
        return
    await pg.execute(
        conn,
        _INSERT_CREDIT_USES,
        {
            "subscription_ids": int_array(u.subscription_id for u in uses),
            "invoice_ids": int_array(u.invoice_id for u in uses),
            "amounts": int_array(u.amount for u in uses),
            "now": now,
        },
    )


async def count_due(conn: Connection, *, now: datetime) -> int:
    """How many ACTIVE or TRIALING subscriptions are due at ``now`` (the backlog gauge)."""
    return int(await pg.fetchval(conn, _COUNT_DUE, {"now": now}))
