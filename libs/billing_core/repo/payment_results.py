"""SQL of recording gateway results, many at a time: lock, audit rows, decided states.

The subscriptions are locked first (in id order), then the invoices (in id order): the lock order
of every writer, so recording results never deadlocks with an API cancel, a renewal, or another
replica recording its own results. Nothing here commits. Every statement is a constant taking
arrays (``unnest``): one round trip for a group of results, whatever its size, in the caller's
transaction.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from billing_core.db.arrays import (
    bool_array,
    instant_array,
    instant_sql,
    int_array,
    nullable_int_array,
    text_array,
)
from billing_core.db.pg import Connection, Statement, execute, fetch
from billing_core.domain.charge_result import GatewayReport, KeyHistory
from billing_core.domain.events import DomainEvent
from billing_core.domain.invoice import InvoiceState, InvoiceStatus
from billing_core.domain.subscription import SubscriptionState
from billing_core.repo import outbox
from billing_core.repo.subscriptions import subscription_state


@dataclass(frozen=True)
class AttemptToRecord:
    """One gateway result about one invoice: what the ``payment_attempt`` audit row holds."""

    invoice_id: int
    report: GatewayReport
    error: str | None = None
    sent_at: datetime | None = None  # when the collector sent the call; None for a webhook


@dataclass(frozen=True)
class LockedInvoice:
    """An invoice as it was before the result, what its key had seen, how many other OPEN
    invoices of its subscription are in dunning (it decides a cancel for non-payment), the
    credit it consumed (given back if it is voided) and the id of the result's audit row."""

    state: InvoiceState
    key_history: KeyHistory
    other_invoices_in_dunning: int
    credit_applied: int = 0
    payment_attempt_id: int = 0


_LOCK_SUBSCRIPTIONS = Statement(
    """
    SELECT i.id AS invoice_id, s.id, s.status, s.cancel_at_period_end, p.code AS plan_code,
           s.version, s.canceled_at
    FROM invoice i
    JOIN subscription s ON s.id = i.subscription_id
    JOIN plan p ON p.id = s.plan_id
    WHERE i.id = ANY(CAST(:invoice_ids AS text)::bigint[])
    ORDER BY s.id
    FOR UPDATE OF s
    """
)


async def lock_subscriptions_of_invoices(
    conn: Connection, invoice_ids: Collection[int]
) -> dict[int, SubscriptionState]:
    """Row-lock the invoices' subscriptions (in id order); the state of each invoice's
    subscription by invoice id (an invoice that does not exist is absent)."""
    rows = await fetch(conn, _LOCK_SUBSCRIPTIONS, {"invoice_ids": int_array(invoice_ids)})
    return {int(row["invoice_id"]): subscription_state(row) for row in rows}


# Locks the invoices and writes their attempt rows in one round trip; returns each invoice as it
# was. The key history and the dunning count read the rows as they were before this statement
# (the attempt rows it inserts are not visible to it), after the subscription locks were held.
# A key was sent when an answer of our own call or look-up under it is recorded, or when the
# invoice is leased at that attempt (the collector's claim, cleared by the decision that ends it).
_LOCK_INVOICES_AND_RECORD_ATTEMPTS = Statement(
    f"""
    WITH r AS (
        SELECT * FROM unnest(
            CAST(:invoice_ids AS text)::bigint[], CAST(:attempt_numbers AS text)::integer[],
            CAST(:keys AS text)::text[], CAST(:sources AS text)::text[],
            CAST(:outcomes AS text)::text[], CAST(:amounts AS text)::bigint[],
            CAST(:currencies AS text)::text[], CAST(:decline_codes AS text)::text[],
            CAST(:references AS text)::text[], CAST(:errors AS text)::text[],
            CAST(:sent_ats AS text)::bigint[]
        ) AS r(invoice_id, attempt_number, key, source, outcome, amount, currency,
               decline_code, reference, error, sent_at)
    ),
    inv AS (
        SELECT id, subscription_id, customer_id, status, attempt_count, amount, currency,
               next_attempt_at, paid_at, closed_at, credit_applied, void_requested_at,
               leased_at
        FROM invoice WHERE id IN (SELECT invoice_id FROM r)
        ORDER BY id
        FOR UPDATE
    ),
    attempt AS (
        INSERT INTO payment_attempt (invoice_id, attempt_number, idempotency_key, source,
                                     outcome, amount, currency, decline_code, gateway_reference,
                                     error, requested_at, recorded_at)
        SELECT inv.id, r.attempt_number, r.key, r.source, r.outcome,
               coalesce(r.amount, inv.amount), coalesce(r.currency, inv.currency),
               r.decline_code, r.reference, r.error, {instant_sql("r.sent_at")}, :now
        FROM r JOIN inv ON inv.id = r.invoice_id
        RETURNING id AS attempt_id, invoice_id
    )
    SELECT inv.*, attempt.attempt_id,
           (inv.leased_at IS NOT NULL AND r.attempt_number = inv.attempt_count)
           OR EXISTS (SELECT 1 FROM payment_attempt a
            WHERE a.invoice_id = inv.id AND a.idempotency_key = r.key
              AND a.source <> 'WEBHOOK') AS key_sent,
           EXISTS (SELECT 1 FROM payment_attempt a
            WHERE a.invoice_id = inv.id AND a.idempotency_key = r.key
              AND a.source <> 'WEBHOOK' AND a.outcome = 'DECLINED') AS key_declined_before,
           (SELECT count(*) FROM payment_attempt a
            WHERE a.invoice_id = inv.id AND a.idempotency_key = r.key
              AND a.outcome = 'UNKNOWN') AS uncertain_answers,
           (SELECT min(a.recorded_at) FROM payment_attempt a
            WHERE a.invoice_id = inv.id AND a.idempotency_key = r.key) AS key_first_used_at,
           EXISTS (SELECT 1 FROM payment_attempt a
            WHERE a.invoice_id = inv.id AND a.idempotency_key = r.key
              AND a.outcome = 'SUCCESS' AND a.amount = inv.amount
              AND a.currency = inv.currency) AS key_succeeded_before,
           (SELECT count(*) FROM invoice o
            WHERE o.subscription_id = inv.subscription_id AND o.status = 'OPEN'
              AND o.attempt_count > 0 AND o.id <> inv.id) AS others_in_dunning
    FROM inv JOIN r ON r.invoice_id = inv.id JOIN attempt ON attempt.invoice_id = inv.id
    """
)


async def lock_invoices_and_record_attempts(
    conn: Connection, attempts: Sequence[AttemptToRecord], *, now: datetime
) -> dict[int, LockedInvoice]:
    """Row-lock the invoices and write one ``payment_attempt`` audit row per result (always,
    whatever the result then does; with the amount and currency the gateway reported, when it
    did, and the call's send instant as ``requested_at``). At most one result per invoice.
    Returns each invoice as it was before its result."""
    reports = [a.report for a in attempts]
    rows = await fetch(
        conn,
        _LOCK_INVOICES_AND_RECORD_ATTEMPTS,
        {
            "invoice_ids": int_array(a.invoice_id for a in attempts),
            "attempt_numbers": int_array(r.attempt_number for r in reports),
            "keys": text_array([r.idempotency_key for r in reports]),
            "sources": text_array([r.source for r in reports]),
            "outcomes": text_array([str(r.outcome) for r in reports]),
            "amounts": nullable_int_array(r.amount for r in reports),
            "currencies": text_array([r.currency for r in reports]),
            "decline_codes": text_array([r.decline_code for r in reports]),
            "references": text_array([r.gateway_reference for r in reports]),
            "errors": text_array([a.error for a in attempts]),
            "sent_ats": instant_array(a.sent_at for a in attempts),
            "now": now,
        },
    )
    return {int(row["id"]): _locked_invoice(row) for row in rows}


def _locked_invoice(row: Mapping[Any, Any]) -> LockedInvoice:
    state = InvoiceState(
        id=int(row["id"]),
        customer_id=int(row["customer_id"]),
        status=InvoiceStatus(row["status"]),
        attempt_count=int(row["attempt_count"]),
        amount=int(row["amount"]),
        currency=str(row["currency"]),
        next_attempt_at=row["next_attempt_at"],
        paid_at=row["paid_at"],
        closed_at=row["closed_at"],
        void_requested=row["void_requested_at"] is not None,
    )
    history = KeyHistory(
        int(row["uncertain_answers"]),
        row["key_first_used_at"],
        bool(row["key_succeeded_before"]),
        sent=bool(row["key_sent"]),
        declined_before=bool(row["key_declined_before"]),
    )
    return LockedInvoice(
        state,
        history,
        int(row["others_in_dunning"]),
        int(row["credit_applied"]),
        int(row["attempt_id"]),
    )


# Everything a round decided, in one statement: the invoices' new states (their leases released:
# the attempts are over), the subscriptions' new states, and the events, numbered after each
# subscription's ``event_seq``, which the same UPDATE moves forward (one row write per
# subscription, as the renewer does). A subscription with events and no new state only has its
# ``event_seq`` moved. The subscriptions are already locked (``lock_subscriptions_of_invoices``).
_WRITE_DECISIONS = Statement(
    f"""
    WITH w AS (
        SELECT * FROM unnest(
            CAST(:invoice_ids AS text)::bigint[], CAST(:invoice_statuses AS text)::text[],
            CAST(:attempt_counts AS text)::integer[], CAST(:next_attempt_ats AS text)::bigint[],
            CAST(:paid_ats AS text)::bigint[], CAST(:closed_ats AS text)::bigint[]
        ) AS w(id, status, attempt_count, next_attempt_at, paid_at, closed_at)
    ),
    invoices AS (
        UPDATE invoice i
        SET status = w.status, attempt_count = w.attempt_count,
            next_attempt_at = {instant_sql("w.next_attempt_at")},
            paid_at = {instant_sql("w.paid_at")}, closed_at = {instant_sql("w.closed_at")},
            leased_at = NULL, updated_at = :now
        FROM w WHERE i.id = w.id
        RETURNING i.id
    ),
    sw AS (
        SELECT * FROM unnest(
            CAST(:subscription_ids AS text)::bigint[], CAST(:changed AS text)::boolean[],
            CAST(:subscription_statuses AS text)::text[], CAST(:canceled_ats AS text)::bigint[],
            CAST(:cancel_at_period_ends AS text)::boolean[], CAST(:versions AS text)::bigint[],
            CAST(:event_counts AS text)::bigint[]
        ) AS sw(id, changed, status, canceled_at, cancel_at_period_end, version, n)
    ),
    subs AS (
        UPDATE subscription s
        SET status = CASE WHEN sw.changed THEN sw.status ELSE s.status END,
            canceled_at = CASE WHEN sw.changed THEN {instant_sql("sw.canceled_at")}
                               ELSE s.canceled_at END,
            cancel_at_period_end = CASE WHEN sw.changed THEN sw.cancel_at_period_end
                                        ELSE s.cancel_at_period_end END,
            version = CASE WHEN sw.changed THEN sw.version ELSE s.version END,
            updated_at = CASE WHEN sw.changed THEN CAST(:now AS timestamptz)
                              ELSE s.updated_at END,
            event_seq = s.event_seq + sw.n
        FROM sw WHERE s.id = sw.id
        RETURNING s.id, s.event_seq - sw.n AS base
    )
    {outbox.insert_sql(bases="subs", occurred_at=":now")}
    """
)


async def write_decisions(
    conn: Connection,
    invoices: Sequence[InvoiceState],
    subscriptions: Sequence[SubscriptionState],
    events: Sequence[DomainEvent],
    *,
    now: datetime,
) -> None:
    """Store the decided states of the locked invoices (their leases released) and
    subscriptions (their versions already bumped) and append ``events`` to the outbox, in
    order, in one statement. At most one state per invoice and per subscription."""
    if not (invoices or subscriptions or events):
        return
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    states = {s.id: s for s in subscriptions}
    counts = outbox.event_counts(events)
    subscription_ids = sorted(states.keys() | counts.keys())
    changed = [states.get(i) for i in subscription_ids]
    await execute(
        conn,
        _WRITE_DECISIONS,
        {
            "invoice_ids": int_array(i.id for i in invoices),
            "invoice_statuses": text_array([str(i.status) for i in invoices]),
            "attempt_counts": int_array(i.attempt_count for i in invoices),
            "next_attempt_ats": instant_array(i.next_attempt_at for i in invoices),
            "paid_ats": instant_array(i.paid_at for i in invoices),
            "closed_ats": instant_array(i.closed_at for i in invoices),
            "subscription_ids": int_array(subscription_ids),
            "changed": bool_array(s is not None for s in changed),
            "subscription_statuses": text_array([str(s.status) if s else None for s in changed]),
            "canceled_ats": instant_array(s.canceled_at if s else None for s in changed),
            "cancel_at_period_ends": bool_array(
                s.cancel_at_period_end if s else None for s in changed
            ),
            "versions": nullable_int_array(s.version if s else None for s in changed),
            "event_counts": int_array(counts.get(i, 0) for i in subscription_ids),
            **outbox.event_parameters(events),
            "now": now,
        },
    )
