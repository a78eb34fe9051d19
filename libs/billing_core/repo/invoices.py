"""Invoices as the API creates, voids and lists them (the renewer and collector own the rest)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from billing_core.db.arrays import int_array
from billing_core.db.pg import Connection, Statement, execute, fetch, fetchrow
from billing_core.domain import invoice as invoice_rules
from billing_core.domain.errors import DomainError
from billing_core.domain.invoice import InvoiceStatus


class InvoiceNotFound(DomainError):
    def __init__(self, invoice_id: int) -> None:
        super().__init__(f"invoice {invoice_id} not found")
        self.invoice_id = invoice_id


@dataclass(frozen=True)
class Invoice:
    id: int
    subscription_id: int
    customer_id: int
    kind: str
    period_index: int
    period_start: datetime
    period_end: datetime
    subtotal: int
    credit_applied: int
    amount: int
    currency: str
    status: str
    attempt_count: int
    next_attempt_at: datetime | None
    paid_at: datetime | None
    closed_at: datetime | None
    created_at: datetime
    void_requested_at: datetime | None = None
    number: str | None = None


_COLUMNS = """
    id, subscription_id, customer_id, kind, period_index, period_start, period_end, subtotal,
    credit_applied, amount, currency, status, attempt_count, next_attempt_at, paid_at, closed_at,
    created_at, void_requested_at, number
"""

_GET = Statement(f"SELECT {_COLUMNS} FROM invoice WHERE id = :invoice_id")

_INSERT = Statement(
    f"""
    INSERT INTO invoice (subscription_id, customer_id, kind, period_index, period_start,
                         period_end, subtotal, credit_applied, amount, currency, status,
                         attempt_count, next_attempt_at, paid_at, closed_at, created_at,
                         updated_at)
    VALUES (:subscription_id, :customer_id, :kind, :period_index, :period_start, :period_end,
            :subtotal, :credit_applied, :amount, :currency, :status, 0, :next_attempt_at,
            :paid_at, :paid_at, :now, :now)
    RETURNING {_COLUMNS}
    """
)


async def get_invoice(conn: Connection, invoice_id: int) -> Invoice:
    row = await fetchrow(conn, _GET, {"invoice_id": invoice_id})
    if row is None:
        raise InvoiceNotFound(invoice_id)
    return Invoice(**row)


async def insert_invoice(
    conn: Connection,
    *,
    subscription_id: int,
    customer_id: int,
    kind: str,
    period_index: int,
    period_start: datetime,
    period_end: datetime,
    subtotal: int,
    credit_applied: int,
    currency: str,
    now: datetime,
) -> Invoice:
    """Insert an invoice; OPEN and due now, or PAID at once when credit covers all of it."""
    amount = subtotal - credit_applied
    start = invoice_rules.opening(amount, now)
    (row,) = await fetch(
        conn,
        _INSERT,
        {
            "subscription_id": subscription_id,
            "customer_id": customer_id,
            "kind": kind,
            "period_index": period_index,
            "period_start": period_start,
            "period_end": period_end,
            "subtotal": subtotal,
            "credit_applied": credit_applied,
            "amount": amount,
            "currency": currency,
            "status": start.status.value,
            "next_attempt_at": start.next_attempt_at,
            "paid_at": start.paid_at,
            "now": now,
        },
    )
    return Invoice(**row)


@dataclass(frozen=True)
class CancelableInvoice:
    """An OPEN invoice as a cancel sees it (row-locked), and the credit it consumed."""

    state: invoice_rules.InvoiceState
    credit_applied: int
    # Leased with the lease still running (its call may be at the gateway), or its current key
    # got an uncertain answer and the collector will come back to it (the gateway may have
    # charged under it): a cancel only requests the void, and the collector's look-up by key
    # decides. A held invoice (no next attempt: a person has its reconciliation item) is voided.
    call_in_flight: bool


_OPEN_FOR_CANCEL = Statement(
    """
    SELECT id, customer_id, status, attempt_count, amount, currency, next_attempt_at, paid_at,
           closed_at, credit_applied, void_requested_at,
           (leased_at IS NOT NULL AND next_attempt_at > :now)
           OR (next_attempt_at IS NOT NULL AND EXISTS (
               SELECT 1 FROM payment_attempt a
               WHERE a.invoice_id = invoice.id AND a.attempt_number = invoice.attempt_count
                 AND a.outcome = 'UNKNOWN'
           )) AS call_in_flight
    FROM invoice
    WHERE subscription_id = :subscription_id AND status = 'OPEN'
      AND (CAST(:keep AS bigint) IS NULL OR id <> :keep)
    ORDER BY id
    FOR UPDATE
    """
)


async def lock_open_invoices(
    conn: Connection, subscription_id: int, *, now: datetime, keep_invoice_id: int | None = None
) -> list[CancelableInvoice]:
    """Row-lock the subscription's OPEN invoices (but ``keep_invoice_id``), in id order."""
    rows = await fetch(
        conn,
        _OPEN_FOR_CANCEL,
        {"subscription_id": subscription_id, "now": now, "keep": keep_invoice_id},
    )
    return [
        CancelableInvoice(
            invoice_rules.InvoiceState(
                id=int(r["id"]),
                customer_id=int(r["customer_id"]),
                status=InvoiceStatus(r["status"]),
                attempt_count=int(r["attempt_count"]),
                amount=int(r["amount"]),
                currency=str(r["currency"]),
                next_attempt_at=r["next_attempt_at"],
                paid_at=r["paid_at"],
                closed_at=r["closed_at"],
                void_requested=r["void_requested_at"] is not None,
            ),
            int(r["credit_applied"]),
            bool(r["call_in_flight"]),
        )
        for r in rows
    ]


_VOID = Statement(
    """
    UPDATE invoice
    SET status = 'VOID', next_attempt_at = NULL, leased_at = NULL, closed_at = :now,
        updated_at = :now
    WHERE id = ANY(CAST(:ids AS text)::bigint[]) AND status = 'OPEN'
    """
)

_REQUEST_VOID = Statement(
    """
    UPDATE invoice SET void_requested_at = :now, updated_at = :now
    WHERE id = ANY(CAST(:ids AS text)::bigint[]) AND status = 'OPEN' AND void_requested_at IS NULL
    """
)


async def void_invoices(conn: Connection, ids: list[int], *, now: datetime) -> None:
    """VOID the (locked, OPEN) invoices: the state ``domain.invoice.void`` gives, no lease."""
    if ids:
        await execute(conn, _VOID, {"ids": int_array(ids), "now": now})


async def request_voids(conn: Connection, ids: list[int], *, now: datetime) -> None:
    """Record that the (locked, OPEN) invoices are to be voided once their call's result (or
    the end of its lease) is known."""
    if ids:
        await execute(conn, _REQUEST_VOID, {"ids": int_array(ids), "now": now})


@dataclass(frozen=True)
class CreditReturn:
    """Credit a voided invoice consumed, going back to its subscription's balance."""

    subscription_id: int
    invoice_id: int
    amount: int


_RETURN_CREDITS = Statement(
    """
    WITH r AS (
        SELECT * FROM unnest(
            CAST(:subscription_ids AS text)::bigint[], CAST(:invoice_ids AS text)::bigint[],
            CAST(:amounts AS text)::bigint[]
        ) AS r(subscription_id, invoice_id, amount)
    ),
    balances AS (
        UPDATE subscription s SET credit_balance = s.credit_balance + r.amount, updated_at = :now
        FROM (SELECT subscription_id, sum(amount) AS amount FROM r GROUP BY subscription_id) r
        WHERE s.id = r.subscription_id
    )
    INSERT INTO credit_entry (subscription_id, amount, reason, invoice_id, created_at)
    SELECT subscription_id, amount, 'VOID_REFUND', invoice_id, :now FROM r
    """
)


async def return_credits(
    conn: Connection, returns: Sequence[CreditReturn], *, now: datetime
) -> None:
    """Give back credit voided invoices consumed (balance + a VOID_REFUND ledger line each), in
    a transaction that has already made its version-checked write to each subscription (it
    holds the row locks and bumped each version once for the whole change)."""
    if returns:
        await execute(
            conn,
            _RETURN_CREDITS,
            {
                "subscription_ids": int_array(r.subscription_id for r in returns),
                "invoice_ids": int_array(r.invoice_id for r in returns),
                "amounts": int_array(r.amount for r in returns),
                "now": now,
            },
        )


_PAGE = Statement(
    f"""
    SELECT {_COLUMNS} FROM invoice
    WHERE subscription_id = :subscription_id
      AND (CAST(:before_id AS bigint) IS NULL OR id < :before_id)
    ORDER BY id DESC
    LIMIT :limit OFFSET :offset
    """
)


async def list_for_subscription(
    conn: Connection,
    subscription_id: int,
    *,
    limit: int,
    before_id: int | None = None,
    offset: int = 0,
) -> list[Invoice]:
    """Newest first (by id). Keyset pagination with ``before_id``; ``offset`` also works."""
    rows = await fetch(
        conn,
        _PAGE,
        {
            "subscription_id": subscription_id,
            "before_id": before_id,
            "limit": limit,
            "offset": offset,
        },
    )
    return [Invoice(**row) for row in rows]


@dataclass(frozen=True)
class CreditApplied:
    invoice_id: int
    used: int
    amount_left: int
    currency: str


_UNTOUCHED_OPEN = Statement(
    """
    SELECT id, amount, currency FROM invoice
    WHERE subscription_id = :subscription_id AND status = 'OPEN' AND leased_at IS NULL
      AND void_requested_at IS NULL AND amount > 0
    ORDER BY id
    FOR UPDATE
    """
)

_APPLY_CREDIT = Statement(
    """
    UPDATE invoice i
    SET credit_applied = i.credit_applied + u.used, amount = i.amount - u.used,
        status = CASE WHEN i.amount = u.used THEN 'PAID' ELSE i.status END,
        paid_at = CASE WHEN i.amount = u.used THEN CAST(:now AS timestamptz) ELSE i.paid_at END,
        closed_at = CASE WHEN i.amount = u.used THEN CAST(:now AS timestamptz)
                         ELSE i.closed_at END,
        next_attempt_at = CASE WHEN i.amount = u.used THEN NULL ELSE i.next_attempt_at END,
        updated_at = :now
    FROM unnest(CAST(:ids AS text)::bigint[], CAST(:used AS text)::bigint[]) AS u(id, used)
    WHERE i.id = u.id
    """
)


async def apply_credit_to_open(
    conn: Connection, subscription_id: int, credit: int, *, now: datetime
) -> list[CreditApplied]:
    """Pay up to ``credit`` of the subscription's OPEN invoices whose collection never started
    (never leased: no gateway call was ever made for them, so no charge for the old amount can
    exist), oldest first; an invoice paid in full becomes PAID. The caller locked the
    subscription row first (the lock order of every invoice write) and records the credit
    entries."""
    applied: list[CreditApplied] = []
    left = credit
    for row in await fetch(conn, _UNTOUCHED_OPEN, {"subscription_id": subscription_id}):
        if left <= 0:
            break
        used = min(left, int(row["amount"]))
        applied.append(
            CreditApplied(int(row["id"]), used, int(row["amount"]) - used, row["currency"])
        )
        left -= used
    if applied:
        await execute(
            conn,
            _APPLY_CREDIT,
            {
                "ids": int_array(a.invoice_id for a in applied),
                "used": int_array(a.used for a in applied),
                "now": now,
            },
        )
    return applied
