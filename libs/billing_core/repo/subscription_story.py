"""A subscription's story, as support reads it: the subscription, its invoices with their line
items, payment attempts and refunds, and the events it published. Read-only; nothing here
commits."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from billing_core.db import pg
from billing_core.db.arrays import int_array
from billing_core.db.pg import Connection, Statement

_SUBSCRIPTION = Statement(
    """
    SELECT s.id, s.customer_id, s.status, s.time_zone, s.billing_anchor, s.period_index,
           s.current_period_start, s.current_period_end, s.cancel_at_period_end, s.canceled_at,
           s.credit_balance, s.version, s.created_at, p.code AS plan_code, p.name AS plan_name,
           p.price_amount, p.currency, p.billing_interval
    FROM subscription s JOIN plan p ON p.id = s.plan_id
    WHERE s.id = :id
    """
)
_INVOICES = Statement(
    """
    SELECT id, number, kind, period_index, period_start, period_end, subtotal, credit_applied,
           amount, currency, status, attempt_count, next_attempt_at, paid_at, closed_at,
           void_requested_at, created_at
    FROM invoice WHERE subscription_id = :id ORDER BY id DESC LIMIT :limit
    """
)
_LINES = Statement(
    """
    SELECT invoice_id, line_no, kind, description, quantity, unit_amount, amount, period_start,
           period_end, tax_inclusive
    FROM invoice_line WHERE invoice_id = ANY(CAST(:ids AS text)::bigint[])
    ORDER BY invoice_id, line_no
    """
)
_ATTEMPTS = Statement(
    """
    SELECT id, invoice_id, attempt_number, idempotency_key, source, outcome, amount, currency,
           decline_code, gateway_reference, error, requested_at, recorded_at
    FROM payment_attempt WHERE invoice_id = ANY(CAST(:ids AS text)::bigint[]) ORDER BY id
    """
)
_REFUNDS = Statement(
    """
    SELECT id, invoice_id, amount, currency, reason, status, error, requested_at, completed_at,
           credit_note_number
    FROM refund WHERE invoice_id = ANY(CAST(:ids AS text)::bigint[]) ORDER BY id
    """
)
_EVENTS = Statement(
    """
    SELECT sequence, event_type, occurred_at, published_at, parked_at, last_error
    FROM outbox_event WHERE aggregate_id = :id ORDER BY sequence DESC LIMIT :limit
    """
)
# What an operator may type in the search box: a subscription id, a customer id or an invoice id.
_FIND = Statement(
    """
    SELECT 'subscription' AS found_by, id FROM subscription WHERE id = :n
    UNION ALL
    SELECT 'invoice', subscription_id FROM invoice WHERE id = :n
    UNION ALL
    (SELECT 'customer', id FROM subscription WHERE customer_id = :n ORDER BY id DESC LIMIT 50)
    """
)


@dataclass
class InvoiceStory:
    invoice: dict[str, Any]
    lines: list[dict[str, Any]] = field(default_factory=list)
    attempts: list[dict[str, Any]] = field(default_factory=list)
    refunds: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class SubscriptionStory:
    subscription: dict[str, Any]
    invoices: list[InvoiceStory]
    events: list[dict[str, Any]]


@dataclass(frozen=True)
class Match:
    found_by: str  # "subscription", "invoice" or "customer"
    subscription_id: int


async def find(conn: Connection, number: int) -> list[Match]:
    """The subscriptions a number may mean: its own id, an invoice's, a customer's (each
    subscription once, by the first of these that matched)."""
    if not -(2**63) <= number < 2**63:
        return []
    matches: dict[int, Match] = {}
    for r in await pg.fetch(conn, _FIND, {"n": number}):
        matches.setdefault(int(r["id"]), Match(str(r["found_by"]), int(r["id"])))
    return list(matches.values())


async def story(
    conn: Connection, subscription_id: int, *, invoices: int = 50, events: int = 200
) -> SubscriptionStory | None:
    """The subscription with its latest ``invoices`` invoices (newest first, each with its
    lines, attempts and refunds in order) and its latest ``events`` events; None when it does
    not exist."""
    row = await pg.fetchrow(conn, _SUBSCRIPTION, {"id": subscription_id})
    if row is None:
        return None
    found = await pg.fetch(conn, _INVOICES, {"id": subscription_id, "limit": invoices})
    stories = {int(r["id"]): InvoiceStory(dict(r)) for r in found}
    if stories:
        ids = {"ids": int_array(stories)}
        for line in await pg.fetch(conn, _LINES, ids):
            stories[int(line["invoice_id"])].lines.append(dict(line))
        for attempt in await pg.fetch(conn, _ATTEMPTS, ids):
            stories[int(attempt["invoice_id"])].attempts.append(dict(attempt))
        for refund in await pg.fetch(conn, _REFUNDS, ids):
            stories[int(refund["invoice_id"])].refunds.append(dict(refund))
    published = await pg.fetch(conn, _EVENTS, {"id": subscription_id, "limit": events})
    return SubscriptionStory(dict(row), list(stories.values()), [dict(e) for e in published])
