"""The two comparison points of the renewer benchmark, written straight on asyncpg.

* ``floor_batch``: the database's floor for the renewer's work — lock a batch of due
  subscriptions, insert their renewal invoices and their line items (taxed at the
  subscription's rate, as the renewer does), end the trials that end, apply the plan changes
  scheduled for the period end, create a paused period's invoice VOID or DRAFT, advance their
  periods and write their outbox events, all in ONE hand-written SQL statement (periods
  computed by PostgreSQL in the subscription's time zone).
* ``row_by_row_batch``: the row-by-row approach — lock a batch of 500, then one statement per row
  for each write (insert the invoice, its line, advance the subscription, insert the outbox
  event), periods computed in Python by the domain functions. It renews ACTIVE rows as plain
  renewals (no tax, no trial's end, pause or scheduled change): less work than the renewer's.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from billing_core.db import pg
from billing_core.domain import period as period_rules
from billing_core.domain.event_payloads import InvoiceCreatedV1
from billing_core.domain.invoice import InvoiceKind


def iso_utc_sql(column: str) -> str:
    """SQL rendering a timestamptz as the event models do: ``2026-12-01T00:00:00Z``, with
    microseconds only when there are some."""
    return (
        f"replace(to_char({column} AT TIME ZONE 'UTC', "
        "'YYYY-MM-DD\"T\"HH24:MI:SS.US'), '.000000', '') || 'Z'"
    )


# The payloads are written in the shape of their models (InvoiceCreatedV1, and for the seeded
# lifecycle mix SubscriptionTrialEndedV1, SubscriptionPlanChangedV1 and InvoiceVoidedV1; a test
# validates them against docs/schemas/events/), so the floor does the renewer's work: a trial
# that ends is ACTIVE with period 0 invoiced (SubscriptionTrialEnded first); a plan change
# scheduled for the period end is applied at the boundary and the new period invoiced at the
# new plan (SubscriptionPlanChanged first); a paused period's invoice is created VOID
# (InvoiceVoided after its InvoiceCreated) or DRAFT and never due for a charge.
_FLOOR = pg.Statement(
    f"""
WITH due AS (
    SELECT s.id, s.customer_id, s.status, s.period_index, s.billing_anchor, s.time_zone,
           s.current_period_end, s.pause_behavior, s.pause_resumes_at,
           coalesce(sp.price_amount, p.price_amount) AS price_amount, p.currency,
           p.code AS old_plan_code, sp.code AS new_plan_code,
           coalesce(sp.code, p.code) AS plan_code,
           CASE p.billing_interval WHEN 'YEAR' THEN 12 ELSE 1 END AS months
    FROM subscription s JOIN plan p ON p.id = s.plan_id
    LEFT JOIN plan sp ON sp.id = s.scheduled_plan_id
    WHERE s.status IN ('ACTIVE', 'TRIALING') AND s.current_period_end <= :now
      AND (s.status = 'ACTIVE' OR s.trial_will_end_sent_at IS NOT NULL)
    ORDER BY s.current_period_end
    LIMIT :batch_size
    FOR UPDATE OF s SKIP LOCKED
),
rated AS (
    SELECT d.*, coalesce(r.rate_ppm, 0) AS rate_ppm, coalesce(r.inclusive, false) AS inclusive,
           r.name || ' ' || trim_scale(r.rate_ppm / 10000.0) || '% ('
             || r.country || CASE r.region WHEN '' THEN '' ELSE '-' || r.region END || ')'
             AS tax_label,
           -- a trial's end invoices period 0 (the trial holds its index); else the next one
           d.period_index + CASE WHEN d.status = 'TRIALING' THEN 0 ELSE 1 END AS next_index
    FROM due d
    LEFT JOIN subscription_tax_location l ON l.subscription_id = d.id
    LEFT JOIN LATERAL (
        SELECT * FROM tax_rate t WHERE t.country = l.country AND t.region IN (l.region, '')
        ORDER BY t.region DESC LIMIT 1
    ) r ON true
),
nxt AS (
    SELECT d.*, d.current_period_end AS new_start,
           ((d.billing_anchor AT TIME ZONE d.time_zone)
             + make_interval(months => (d.next_index + 1) * d.months))
             AT TIME ZONE d.time_zone AS new_end,
           CASE WHEN d.pause_behavior IS NULL
                     OR d.current_period_end >= d.pause_resumes_at THEN 'OPEN'
                WHEN d.pause_behavior = 'void' THEN 'VOID'
                ELSE 'DRAFT' END AS invoice_status,
           CASE WHEN d.inclusive
                THEN (2 * d.price_amount * d.rate_ppm + 1000000 + d.rate_ppm)
                     / (2 * (1000000 + d.rate_ppm))
                ELSE (d.price_amount * d.rate_ppm + 500000) / 1000000 END AS tax
    FROM rated d
),
counted AS (
    SELECT n.*,
           1 + (n.status = 'TRIALING')::int + (n.new_plan_code IS NOT NULL)::int
             + (n.invoice_status = 'VOID')::int AS event_count
    FROM nxt n
),
inv AS (
    INSERT INTO invoice (subscription_id, customer_id, kind, period_index, period_start,
                         period_end, subtotal, credit_applied, amount, currency, status,
                         next_attempt_at, closed_at, created_at, updated_at)
    SELECT id, customer_id, 'RENEWAL', next_index, new_start, new_end,
           price_amount + CASE WHEN inclusive THEN 0 ELSE tax END, 0,
           price_amount + CASE WHEN inclusive THEN 0 ELSE tax END, currency, invoice_status,
           CASE WHEN invoice_status = 'OPEN' THEN :now END,
           CASE WHEN invoice_status = 'VOID' THEN :now END, :now, :now
    FROM counted
    ON CONFLICT (subscription_id, period_start) WHERE kind = 'RENEWAL' DO NOTHING
    RETURNING id, subscription_id, kind, period_index, period_start, period_end, subtotal,
              credit_applied, amount, currency, status
),
lines AS (
    INSERT INTO invoice_line (invoice_id, line_no, kind, description, quantity, unit_amount,
                              amount, period_start, period_end, tax_inclusive)
    SELECT i.id, 1, 'PLAN_PERIOD', 'Plan ' || n.plan_code, 1, p.net, p.net, i.period_start,
           i.period_end, NULL
    FROM inv i JOIN counted n ON n.id = i.subscription_id,
         LATERAL (SELECT n.price_amount - CASE WHEN n.inclusive THEN n.tax ELSE 0 END AS net) p
    UNION ALL
    SELECT i.id, 2, 'TAX', n.tax_label, 1, n.tax, n.tax, NULL, NULL, n.inclusive
    FROM inv i JOIN counted n ON n.id = i.subscription_id
    WHERE n.rate_ppm > 0
),
adv AS (
    UPDATE subscription s
    SET status = 'ACTIVE', period_index = n.next_index, current_period_start = n.new_start,
        current_period_end = n.new_end, version = s.version + 1,
        event_seq = s.event_seq + n.event_count, updated_at = :now,
        plan_id = coalesce(s.scheduled_plan_id, s.plan_id), scheduled_plan_id = NULL
    FROM counted n JOIN inv i ON i.subscription_id = n.id
    WHERE s.id = n.id
    RETURNING s.id, s.event_seq - n.event_count AS reserved_after
),
events AS (
    INSERT INTO outbox_event (event_id, aggregate_id, sequence, event_type, payload, occurred_at)
    SELECT gen_random_uuid(), i.subscription_id, a.reserved_after + e.ord, e.event_type, e.payload,
           :now
    FROM inv i JOIN adv a ON a.id = i.subscription_id JOIN counted n ON n.id = i.subscription_id
    CROSS JOIN LATERAL (
        SELECT ev.event_type, ev.payload, row_number() OVER (ORDER BY ev.slot) AS ord
        FROM (VALUES
            (1, CASE WHEN n.status = 'TRIALING' THEN 'SubscriptionTrialEnded' END,
             CASE WHEN n.status = 'TRIALING' THEN
                 jsonb_build_object('subscriptionId', i.subscription_id,
                                    'endedAt', {iso_utc_sql("CAST(:now AS timestamptz)")},
                                    'early', false)
             END),
            (2, CASE WHEN n.new_plan_code IS NOT NULL THEN 'SubscriptionPlanChanged' END,
             CASE WHEN n.new_plan_code IS NOT NULL THEN
                 jsonb_build_object('subscriptionId', i.subscription_id,
                                    'oldPlanCode', n.old_plan_code, 'newPlanCode', n.new_plan_code,
                                    'prorationDue', 0,
                                    'changedAt', {iso_utc_sql("i.period_start")},
                                    'effective', 'period_end',
                                    'newPeriodStart', NULL, 'newPeriodEnd', NULL)
             END),
            (3, 'InvoiceCreated',
             jsonb_build_object('subscriptionId', i.subscription_id, 'invoiceId', i.id,
                                'kind', i.kind, 'periodIndex', i.period_index,
                                'periodStart', {iso_utc_sql("i.period_start")},
                                'periodEnd', {iso_utc_sql("i.period_end")},
                                'subtotal', i.subtotal, 'creditApplied', i.credit_applied,
                                'tax', n.tax, 'amount', i.amount, 'currency', i.currency)),
            (4, CASE WHEN i.status = 'VOID' THEN 'InvoiceVoided' END,
             CASE WHEN i.status = 'VOID' THEN
                 jsonb_build_object('subscriptionId', i.subscription_id, 'invoiceId', i.id,
                                    'voidedAt', {iso_utc_sql("CAST(:now AS timestamptz)")})
             END)
        ) AS ev(slot, event_type, payload)
        WHERE ev.event_type IS NOT NULL
    ) AS e
)
SELECT count(*) FROM inv
"""
)


async def floor_batch(conn: pg.Connection, *, now: datetime, batch_size: int) -> int:
    """One batch in one statement (its own transaction); returns the invoices written."""
    return int(await pg.fetchval(conn, _FLOOR, {"now": now, "batch_size": batch_size}))


_LOCK = pg.Statement(
    """
    SELECT s.id, s.customer_id, s.period_index, s.billing_anchor, s.time_zone,
           s.current_period_end, s.event_seq, p.price_amount, p.currency, p.billing_interval,
           p.code AS plan_code
    FROM subscription s JOIN plan p ON p.id = s.plan_id
    WHERE s.status = 'ACTIVE' AND s.current_period_end <= :now
    ORDER BY s.current_period_end
    LIMIT :batch_size
    FOR UPDATE OF s SKIP LOCKED
"""
)
_INSERT_INVOICE = pg.Statement(
    """
    INSERT INTO invoice (subscription_id, customer_id, kind, period_index, period_start,
                         period_end, subtotal, credit_applied, amount, currency, status,
                         next_attempt_at, created_at, updated_at)
    VALUES (:subscription_id, :customer_id, 'RENEWAL', :period_index, :period_start,
            :period_end, :amount, 0, :amount, :currency, 'OPEN', :now, :now, :now)
    RETURNING id
"""
)
_LINE = pg.Statement(
    """
    INSERT INTO invoice_line (invoice_id, line_no, kind, description, quantity, unit_amount,
                              amount, period_start, period_end)
    VALUES (:invoice_id, 1, 'PLAN_PERIOD', :description, 1, :amount, :amount, :period_start,
            :period_end)
"""
)
_ADVANCE = pg.Statement(
    """
    UPDATE subscription SET period_index = :period_index, current_period_start = :period_start,
        current_period_end = :period_end, version = version + 1, event_seq = event_seq + 1,
        updated_at = :now
    WHERE id = :id
    RETURNING event_seq
"""
)
_EVENT = pg.Statement(
    """
    INSERT INTO outbox_event (event_id, aggregate_id, sequence, event_type, payload, occurred_at)
    VALUES (:event_id, :aggregate_id, :sequence, 'InvoiceCreated', CAST(:payload AS jsonb), :now)
"""
)


async def row_by_row_batch(conn: pg.Connection, *, now: datetime, batch_size: int) -> int:
    """The row-by-row loop: lock a batch, then one statement per row and per write."""
    async with conn.transaction():
        rows = await pg.fetch(conn, _LOCK, {"now": now, "batch_size": batch_size})
        for r in rows:
            index = r["period_index"] + 1
            start = r["current_period_end"]
            end = period_rules.period_end(
                r["billing_anchor"],
                period_rules.Interval(r["billing_interval"]),
                index,
                r["time_zone"],
            )
            invoice_id = await pg.fetchval(
                conn,
                _INSERT_INVOICE,
                {
                    "subscription_id": r["id"],
                    "customer_id": r["customer_id"],
                    "period_index": index,
                    "period_start": start,
                    "period_end": end,
                    "amount": r["price_amount"],
                    "currency": r["currency"],
                    "now": now,
                },
            )
            await pg.execute(
                conn,
                _LINE,
                {
                    "invoice_id": invoice_id,
                    "description": f"Plan {r['plan_code']}",
                    "amount": r["price_amount"],
                    "period_start": start,
                    "period_end": end,
                },
            )
            seq = await pg.fetchval(
                conn,
                _ADVANCE,
                {
                    "id": r["id"],
                    "period_index": index,
                    "period_start": start,
                    "period_end": end,
                    "now": now,
                },
            )
            payload = InvoiceCreatedV1(
                subscriptionId=r["id"],
                invoiceId=invoice_id,
                kind=InvoiceKind.RENEWAL,
                periodIndex=index,
                periodStart=start,
                periodEnd=end,
                subtotal=r["price_amount"],
                creditApplied=0,
                amount=r["price_amount"],
                currency=r["currency"],
            )
            await pg.execute(
                conn,
                _EVENT,
                {
                    "event_id": uuid.uuid4(),
                    "aggregate_id": r["id"],
                    "sequence": seq,
                    "payload": payload.to_json(),
                    "now": now,
                },
            )
    return len(rows)
