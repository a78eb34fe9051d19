"""Invariants checked from PostgreSQL alone: periods, amounts and credit, stuck invoices.

Period rule: a subscription's current period ``period_index`` is invoiced when it starts (period 0
at subscription creation, period n+1 by the renewer when period n ends), so every subscription has
exactly one RENEWAL invoice for each period 0..period_index, contiguous in time (the end of one is
the start of the next), and an ACTIVE subscription never stays past its period end for longer than
the renewer's tolerance. This holds for canceled subscriptions too, up to their last period.

Amount rule: a renewal's subtotal is the price of a plan the subscription had (its current plan or
one named by its SubscriptionPlanChanged events still in the outbox), amount = subtotal - credit
applied, credit balances are never negative and equal the sum of their credit ledger entries.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from billing_core.invariants.report import Check

_SUBSCRIPTIONS = text("SELECT count(*) FROM subscription")

_DUPLICATE_RENEWALS = text(
    """
    SELECT subscription_id, period_start, count(*) AS n FROM invoice
    WHERE kind = 'RENEWAL' GROUP BY subscription_id, period_start HAVING count(*) > 1
    ORDER BY subscription_id LIMIT 1000
    """
)

_DISCONTINUITIES = text(
    """
    SELECT subscription_id, period_index, prev_index, period_start, prev_end FROM (
        SELECT subscription_id, period_index, period_start,
               lag(period_index) OVER w AS prev_index, lag(period_end) OVER w AS prev_end
        FROM invoice WHERE kind = 'RENEWAL'
        WINDOW w AS (PARTITION BY subscription_id ORDER BY period_index, id)
    ) r
    WHERE prev_index IS NOT NULL
      AND (period_index <> prev_index + 1 OR period_start <> prev_end)
    ORDER BY subscription_id LIMIT 1000
    """
)

_COVERAGE = text(
    """
    SELECT s.id, s.period_index, r.first, r.last, coalesce(r.n, 0) AS n,
           s.current_period_start, r.current_start
    FROM subscription s
    LEFT JOIN (
        SELECT subscription_id, min(period_index) AS first, max(period_index) AS last,
               count(*) AS n,
               max(period_start) AS current_start
        FROM invoice WHERE kind = 'RENEWAL' GROUP BY subscription_id
    ) r ON r.subscription_id = s.id
    WHERE r.n IS NULL OR r.first <> 0 OR r.last <> s.period_index OR r.n <> s.period_index + 1
       OR r.current_start <> s.current_period_start
    ORDER BY s.id LIMIT 1000
    """
)

_OVERDUE = text(
    """
    SELECT id, current_period_end FROM subscription
    WHERE status = 'ACTIVE' AND current_period_end < :cutoff
    ORDER BY current_period_end LIMIT 1000
    """
)


async def check_periods(
    conn: AsyncConnection, *, now: datetime, renewal_tolerance: timedelta
) -> Check:
    check = Check("periods", "one renewal invoice per period, no gap, none overdue")
    check.checked = int((await conn.execute(_SUBSCRIPTIONS)).scalar_one())
    for r in await conn.execute(_DUPLICATE_RENEWALS):
        check.violations.append(
            f"subscription {r.subscription_id}: {r.n} renewal invoices for {r.period_start}"
        )
    for r in await conn.execute(_DISCONTINUITIES):
        check.violations.append(
            f"subscription {r.subscription_id}: period {r.prev_index} -> {r.period_index} "
            f"(start {r.period_start}, previous end {r.prev_end})"
        )
    for r in await conn.execute(_COVERAGE):
        check.violations.append(
            f"subscription {r.id}: current period {r.period_index}, renewal invoices "
            f"{r.n} covering {r.first}..{r.last}"
        )
    for r in await conn.execute(_OVERDUE, {"cutoff": now - renewal_tolerance}):
        check.violations.append(
            f"subscription {r.id}: ACTIVE but its period ended {r.current_period_end}"
        )
    return check


_WRONG_SUBTOTAL = text(
    """
    WITH plans_seen AS (
        SELECT s.id AS subscription_id, p.price_amount, p.currency
        FROM subscription s JOIN plan p ON p.id = s.plan_id
        UNION
        SELECT o.aggregate_id, p.price_amount, p.currency
        FROM outbox_event o JOIN plan p
          ON p.code IN (o.payload ->> 'oldPlanCode', o.payload ->> 'newPlanCode')
        WHERE o.event_type = 'SubscriptionPlanChanged'
    )
    SELECT i.id, i.subscription_id, i.subtotal, i.currency FROM invoice i
    WHERE i.kind = 'RENEWAL' AND NOT EXISTS (
        SELECT 1 FROM plans_seen ps
        WHERE ps.subscription_id = i.subscription_id AND ps.price_amount = i.subtotal
          AND ps.currency = i.currency)
    ORDER BY i.id LIMIT 1000
    """
)

_WRONG_AMOUNT = text(
    """
    SELECT id, subtotal, credit_applied, amount FROM invoice
    WHERE amount <> subtotal - credit_applied OR amount < 0 OR credit_applied < 0
    ORDER BY id LIMIT 1000
    """
)

_CREDIT = text(
    """
    SELECT s.id, s.credit_balance, coalesce(c.total, 0) AS ledger
    FROM subscription s
    LEFT JOIN (SELECT subscription_id, sum(amount) AS total FROM credit_entry
               GROUP BY subscription_id) c ON c.subscription_id = s.id
    WHERE s.credit_balance < 0 OR s.credit_balance <> coalesce(c.total, 0)
    ORDER BY s.id LIMIT 1000
    """
)

_CREDIT_USE = text(
    """
    SELECT i.id, i.credit_applied, coalesce(-c.used, 0) AS ledger
    FROM invoice i
    LEFT JOIN (SELECT invoice_id, sum(amount) AS used FROM credit_entry
               WHERE invoice_id IS NOT NULL AND amount < 0 GROUP BY invoice_id) c
      ON c.invoice_id = i.id
    WHERE i.credit_applied <> coalesce(-c.used, 0)
    ORDER BY i.id LIMIT 1000
    """
)

_INVOICES = text("SELECT count(*) FROM invoice")


async def check_amounts(conn: AsyncConnection) -> Check:
    check = Check("amounts", "price - credit (+ proration), credit never negative")
    check.checked = int((await conn.execute(_INVOICES)).scalar_one())
    for r in await conn.execute(_WRONG_SUBTOTAL):
        check.violations.append(
            f"invoice {r.id}: subtotal {r.subtotal} {r.currency} is no price of subscription "
            f"{r.subscription_id}'s plans"
        )
    for r in await conn.execute(_WRONG_AMOUNT):
        check.violations.append(
            f"invoice {r.id}: amount {r.amount} != {r.subtotal} - {r.credit_applied}"
        )
    for r in await conn.execute(_CREDIT):
        check.violations.append(
            f"subscription {r.id}: credit balance {r.credit_balance}, credit ledger {r.ledger}"
        )
    for r in await conn.execute(_CREDIT_USE):
        check.violations.append(
            f"invoice {r.id}: credit applied {r.credit_applied}, credit ledger {r.ledger}"
        )
    return check


_STUCK = text(
    """
    SELECT id, next_attempt_at FROM invoice
    WHERE status = 'OPEN' AND next_attempt_at < :cutoff
    ORDER BY next_attempt_at LIMIT 1000
    """
)
_OPEN = text("SELECT count(*) FROM invoice WHERE status = 'OPEN'")


async def check_stuck(conn: AsyncConnection, *, now: datetime, retry_bound: timedelta) -> Check:
    check = Check("stuck", "no OPEN invoice left past its lease and retry bound")
    check.checked = int((await conn.execute(_OPEN)).scalar_one())
    for r in await conn.execute(_STUCK, {"cutoff": now - retry_bound}):
        check.violations.append(f"invoice {r.id}: due since {r.next_attempt_at}")
    return check


_PAID_AND_UNPAID = text("SELECT id, status, amount FROM invoice WHERE id > :since")
_RECONCILIATIONS = text(
    """
    SELECT DISTINCT CAST(payload ->> 'invoiceId' AS bigint) FROM outbox_event
    WHERE event_type = 'PaymentReconciliationNeeded'
    """
)
_TWO_KEYS = text(
    """
    SELECT invoice_id, count(DISTINCT idempotency_key) AS keys FROM payment_attempt
    WHERE outcome = 'SUCCESS' GROUP BY invoice_id HAVING count(DISTINCT idempotency_key) > 1
    ORDER BY invoice_id LIMIT 1000
    """
)


async def check_charges(
    conn: AsyncConnection,
    successes: dict[int, int] | None,
    duplicate_success_invoices: list[int] | None,
    since_invoice_id: int = 0,
) -> Check:
    """At most one successful charge per invoice; PAID exactly when charged (gateway ledger)."""
    check = Check("charges", "no invoice charged twice; PAID iff charged once")
    for r in await conn.execute(_TWO_KEYS):
        check.violations.append(f"invoice {r.invoice_id}: {r.keys} keys recorded a success")
    if successes is None:
        check.skipped = "no gateway ledger given"
        return check
    reconciled = {int(v) for (v,) in await conn.execute(_RECONCILIATIONS)}
    known: set[int] = set()
    for r in await conn.execute(_PAID_AND_UNPAID, {"since": since_invoice_id}):
        known.add(r.id)
        check.checked += 1
        n = successes.get(r.id, 0)
        if n > 1:
            check.violations.append(f"invoice {r.id}: charged {n} times")
        elif r.status == "PAID" and r.amount > 0 and n == 0:
            check.violations.append(f"invoice {r.id}: PAID without a successful charge")
        elif r.status != "PAID" and n >= 1 and r.id not in reconciled:
            check.violations.append(f"invoice {r.id}: {r.status} but charged")
    for invoice_id in duplicate_success_invoices or []:
        message = f"invoice {invoice_id}: charged twice (gateway audit)"
        if f"invoice {invoice_id}: charged" not in " ".join(check.violations):
            check.violations.append(message)
    unknown = [i for i in successes if i not in known]
    if unknown:
        check.violations.append(f"{len(unknown)} charged invoices unknown to the database")
    return check
