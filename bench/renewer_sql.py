"""The two comparison points of the renewer benchmark, written straight on asyncpg.

* ``floor_batch``: the database's floor for the renewer's work — lock a batch of due
  subscriptions, insert their renewal invoices and their line items (taxed at the
  subscription's rate, as the renewer does), advance their periods and
  write one outbox event each, all in ONE hand-written SQL statement (periods computed by
  PostgreSQL in the subscription's time zone).
* ``row_by_row_batch``: the article's approach — lock a batch of 500, then one statement per row
  for each write (insert the invoice, its line, advance the subscription, insert the outbox
  event), periods computed in Python by the domain functions.
"""

from __future__ import annotations

import uuid
from datetime import datetime

import asyncpg  # type: ignore[import-untyped]

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


# The InvoiceCreated payload is written in the shape of InvoiceCreatedV1 (a test validates it
# against docs/schemas/events/InvoiceCreated.v1.json), so the floor does the renewer's work.
FLOOR_SQL = f"""
WITH due AS (
    SELECT s.id, s.customer_id, s.period_index, s.billing_anchor, s.time_zone,
           s.current_period_end, p.price_amount, p.currency, p.code AS plan_code,
           CASE p.billing_interval WHEN 'YEAR' THEN 12 ELSE 1 END AS months
    FROM subscription s JOIN plan p ON p.id = s.plan_id
    WHERE s.status = 'ACTIVE' AND s.current_period_end <= $1
    ORDER BY s.current_period_end
    LIMIT $2
    FOR UPDATE OF s SKIP LOCKED
),
rated AS (
    SELECT d.*, coalesce(r.rate_ppm, 0) AS rate_ppm, coalesce(r.inclusive, false) AS inclusive,
           r.name || ' ' || trim_scale(r.rate_ppm / 10000.0) || '% ('
             || r.country || CASE r.region WHEN '' THEN '' ELSE '-' || r.region END || ')'
             AS tax_label
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
             + make_interval(months => (d.period_index + 2) * d.months))
             AT TIME ZONE d.time_zone AS new_end,
           CASE WHEN d.inclusive
                THEN (2 * d.price_amount * d.rate_ppm + 1000000 + d.rate_ppm)
                     / (2 * (1000000 + d.rate_ppm))
                ELSE (d.price_amount * d.rate_ppm + 500000) / 1000000 END AS tax
    FROM rated d
),
inv AS (
    INSERT INTO invoice (subscription_id, customer_id, kind, period_index, period_start,
                         period_end, subtotal, credit_applied, amount, currency, status,
                         next_attempt_at, created_at, updated_at)
    SELECT id, customer_id, 'RENEWAL', period_index + 1, new_start, new_end,
           price_amount + CASE WHEN inclusive THEN 0 ELSE tax END, 0,
           price_amount + CASE WHEN inclusive THEN 0 ELSE tax END, currency, 'OPEN', $1, $1, $1
    FROM nxt
    ON CONFLICT (subscription_id, period_start) WHERE kind = 'RENEWAL' DO NOTHING
    RETURNING id, subscription_id, kind, period_index, period_start, period_end, subtotal,
              credit_applied, amount, currency
),
lines AS (
    INSERT INTO invoice_line (invoice_id, line_no, kind, description, quantity, unit_amount,
                              amount, period_start, period_end, tax_inclusive)
    SELECT i.id, 1, 'PLAN_PERIOD', 'Plan ' || n.plan_code, 1, p.net, p.net, i.period_start,
           i.period_end, NULL
    FROM inv i JOIN nxt n ON n.id = i.subscription_id,
         LATERAL (SELECT n.price_amount - CASE WHEN n.inclusive THEN n.tax ELSE 0 END AS net) p
    UNION ALL
    SELECT i.id, 2, 'TAX', n.tax_label, 1, n.tax, n.tax, NULL, NULL, n.inclusive
    FROM inv i JOIN nxt n ON n.id = i.subscription_id
    WHERE n.rate_ppm > 0
),
adv AS (
    UPDATE subscription s
    SET period_index = n.period_index + 1, current_period_start = n.new_start,
        current_period_end = n.new_end, version = s.version + 1,
        event_seq = s.event_seq + 1, updated_at = $1
    FROM nxt n JOIN inv i ON i.subscription_id = n.id
    WHERE s.id = n.id
    RETURNING s.id, s.event_seq
)
INSERT INTO outbox_event (event_id, aggregate_id, sequence, event_type, payload, occurred_at)
SELECT gen_random_uuid(), i.subscription_id, a.event_seq, 'InvoiceCreated',
       jsonb_build_object('subscriptionId', i.subscription_id, 'invoiceId', i.id,
                          'kind', i.kind, 'periodIndex', i.period_index,
                          'periodStart', {iso_utc_sql("i.period_start")},
                          'periodEnd', {iso_utc_sql("i.period_end")},
                          'subtotal', i.subtotal, 'creditApplied', i.credit_applied, 'tax', n.tax,
                          'amount', i.amount, 'currency', i.currency),
       $1
FROM inv i JOIN adv a ON a.id = i.subscription_id JOIN nxt n ON n.id = i.subscription_id
"""


async def floor_batch(conn: asyncpg.Connection, *, now: datetime, batch_size: int) -> int:
    """One batch in one statement (its own transaction); returns the invoices written."""
    status: str = await conn.execute(FLOOR_SQL, now, batch_size)
    return int(status.rsplit(maxsplit=1)[-1])


_LOCK = """
    SELECT s.id, s.customer_id, s.period_index, s.billing_anchor, s.time_zone,
           s.current_period_end, s.event_seq, p.price_amount, p.currency, p.billing_interval,
           p.code AS plan_code
    FROM subscription s JOIN plan p ON p.id = s.plan_id
    WHERE s.status = 'ACTIVE' AND s.current_period_end <= $1
    ORDER BY s.current_period_end
    LIMIT $2
    FOR UPDATE OF s SKIP LOCKED
"""
_INSERT_INVOICE = """
    INSERT INTO invoice (subscription_id, customer_id, kind, period_index, period_start,
                         period_end, subtotal, credit_applied, amount, currency, status,
                         next_attempt_at, created_at, updated_at)
    VALUES ($1, $2, 'RENEWAL', $3, $4, $5, $6, 0, $6, $7, 'OPEN', $8, $8, $8)
    RETURNING id
"""
_LINE = """
    INSERT INTO invoice_line (invoice_id, line_no, kind, description, quantity, unit_amount,
                              amount, period_start, period_end)
    VALUES ($1, 1, 'PLAN_PERIOD', $2, 1, $3, $3, $4, $5)
"""
_ADVANCE = """
    UPDATE subscription SET period_index = $2, current_period_start = $3,
        current_period_end = $4, version = version + 1, event_seq = event_seq + 1,
        updated_at = $5
    WHERE id = $1
    RETURNING event_seq
"""
_EVENT = """
    INSERT INTO outbox_event (event_id, aggregate_id, sequence, event_type, payload, occurred_at)
    VALUES ($1, $2, $3, 'InvoiceCreated', $4::jsonb, $5)
"""


async def row_by_row_batch(conn: asyncpg.Connection, *, now: datetime, batch_size: int) -> int:
    """The article's loop: lock a batch, then one statement per row and per write."""
    async with conn.transaction():
        rows = await conn.fetch(_LOCK, now, batch_size)
        for r in rows:
            index = r["period_index"] + 1
            start = r["current_period_end"]
            end = period_rules.period_end(
                r["billing_anchor"],
                period_rules.Interval(r["billing_interval"]),
                index,
                r["time_zone"],
            )
            invoice_id = await conn.fetchval(
                _INSERT_INVOICE,
                r["id"],
                r["customer_id"],
                index,
                start,
                end,
                r["price_amount"],
                r["currency"],
                now,
            )
            await conn.execute(
                _LINE, invoice_id, f"Plan {r['plan_code']}", r["price_amount"], start, end
            )
            seq = await conn.fetchval(_ADVANCE, r["id"], index, start, end, now)
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
            await conn.execute(_EVENT, uuid.uuid4(), r["id"], seq, payload.to_json(), now)
    return len(rows)
