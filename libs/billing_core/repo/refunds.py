"""SQL of refunds: requesting them (with the success that calls for one), claiming the due ones
for the collector, and storing what the gateway answered. Nothing here commits.

One refund per charge: ``charge_key`` (the charge's idempotency key) is unique, so a success
reported twice — by the collector and a webhook, or by a webhook delivered twice — asks once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from billing_core.db.arrays import int_array, text_array
from billing_core.db.pg import Connection, Statement, execute, fetch, fetchrow
from billing_core.domain.refund import RefundState, RefundStatus
from billing_core.repo.lease_clock import CLOCK_CTE, clock_params
from billing_core.repo.limits import require_positive_limit


@dataclass(frozen=True)
class RefundToRequest:
    invoice_id: int
    subscription_id: int
    payment_attempt_id: int
    charge_key: str
    charge_reference: str | None
    idempotency_key: str
    amount: int
    currency: str
    reason: str


_REQUEST = Statement(
    """
    INSERT INTO refund (invoice_id, subscription_id, payment_attempt_id, charge_key,
                        charge_reference, idempotency_key, amount, currency, reason, status,
                        next_attempt_at, requested_at, updated_at)
    SELECT r.invoice_id, r.subscription_id, r.attempt_id, r.charge_key, r.charge_reference,
           r.key, r.amount, r.currency, r.reason, 'REQUESTED', :now, :now, :now
    FROM unnest(
        CAST(:invoice_ids AS text)::bigint[], CAST(:subscription_ids AS text)::bigint[],
        CAST(:attempt_ids AS text)::bigint[], CAST(:charge_keys AS text)::text[],
        CAST(:charge_references AS text)::text[], CAST(:keys AS text)::text[],
        CAST(:amounts AS text)::bigint[], CAST(:currencies AS text)::text[],
        CAST(:reasons AS text)::text[]
    ) AS r(invoice_id, subscription_id, attempt_id, charge_key, charge_reference, key, amount,
           currency, reason)
    ON CONFLICT (charge_key) DO NOTHING
    """
)


async def request_refunds(
    conn: Connection, refunds: Sequence[RefundToRequest], *, now: datetime
) -> int:
    """Write REQUESTED refunds, due now; a charge already being refunded is skipped. Returns
    how many were new."""
    if not refunds:
        return 0
    return await execute(
        conn,
        _REQUEST,
        {
            "invoice_ids": int_array(r.invoice_id for r in refunds),
            "subscription_ids": int_array(r.subscription_id for r in refunds),
            "attempt_ids": int_array(r.payment_attempt_id for r in refunds),
            "charge_keys": text_array([r.charge_key for r in refunds]),
            "charge_references": text_array([r.charge_reference for r in refunds]),
            "keys": text_array([r.idempotency_key for r in refunds]),
            "amounts": int_array(r.amount for r in refunds),
            "currencies": text_array([r.currency for r in refunds]),
            "reasons": text_array([r.reason for r in refunds]),
            "now": now,
        },
    )


_COLUMNS = """
    id, subscription_id, invoice_id, amount, currency, reason, charge_reference,
    idempotency_key, status, uncertain_answers, next_attempt_at, gateway_reference, error,
    completed_at, requested_at
"""

# A lease, as for invoices: the due refunds are pushed forward by the lease and committed before
# the call; a process that dies mid-call leaves them to come due again, with the same key.
_CLAIM = Statement(
    f"""
    WITH {CLOCK_CTE},
    due AS (
        SELECT id FROM refund
        WHERE status = 'REQUESTED' AND next_attempt_at <= (SELECT now FROM clock)
        ORDER BY next_attempt_at
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    )
    UPDATE refund f
    SET next_attempt_at = clock.now + make_interval(secs => CAST(:lease_s AS double precision)),
        updated_at = clock.now
    FROM due, clock WHERE f.id = due.id
    RETURNING {", ".join("f." + c.strip() for c in _COLUMNS.split(","))}
    """
)


async def claim_due_refunds(
    conn: Connection,
    *,
    limit: int,
    lease: timedelta,
    now: datetime | None = None,
    clock_offset: timedelta = timedelta(0),
) -> list[RefundState]:
    """Lease up to ``limit`` due REQUESTED refunds, oldest first. ``now`` None (the collector):
    due and lease end by the database's clock plus ``clock_offset``, as invoices' leases (one
    clock for every replica); an instant: that one (tests)."""
    require_positive_limit(limit)
    params = {
        **clock_params(now, clock_offset),
        "limit": limit,
        "lease_s": lease.total_seconds(),
    }
    rows = await fetch(conn, _CLAIM, params)
    return sorted((_state(r) for r in rows), key=lambda r: r.id)


_LOCK = Statement(
    f"""
    WITH s AS (
        SELECT s.id FROM subscription s JOIN refund f ON f.subscription_id = s.id
        WHERE f.id = :id FOR UPDATE OF s
    )
    SELECT {_COLUMNS} FROM refund WHERE id = :id AND EXISTS (SELECT 1 FROM s) FOR UPDATE
    """
)


async def lock_refund(conn: Connection, refund_id: int) -> RefundState | None:
    """Row-lock the refund's subscription, then the refund (the subscription first: the lock
    order of every writer; its events take the subscription's sequence)."""
    row = await fetchrow(conn, _LOCK, {"id": refund_id})
    return None if row is None else _state(row)


_WRITE = Statement(
    """
    UPDATE refund
    SET status = :status, uncertain_answers = :uncertain_answers,
        next_attempt_at = :next_attempt_at, gateway_reference = :gateway_reference,
        error = :error, completed_at = :completed_at, updated_at = :now
    WHERE id = :id
    """
)


async def write_refund(conn: Connection, refund: RefundState, *, now: datetime) -> None:
    await execute(
        conn,
        _WRITE,
        {
            "id": refund.id,
            "status": str(refund.status),
            "uncertain_answers": refund.uncertain_answers,
            "next_attempt_at": refund.next_attempt_at,
            "gateway_reference": refund.gateway_reference,
            "error": refund.error,
            "completed_at": refund.completed_at,
            "now": now,
        },
    )


def _state(row: Mapping[Any, Any]) -> RefundState:
    return RefundState(
        id=int(row["id"]),
        subscription_id=int(row["subscription_id"]),
        invoice_id=int(row["invoice_id"]),
        amount=int(row["amount"]),
        currency=str(row["currency"]),
        reason=str(row["reason"]),
        charge_reference=row["charge_reference"],
        idempotency_key=str(row["idempotency_key"]),
        status=RefundStatus(row["status"]),
        uncertain_answers=int(row["uncertain_answers"]),
        next_attempt_at=row["next_attempt_at"],
        gateway_reference=row["gateway_reference"],
        error=row["error"],
        completed_at=row["completed_at"],
        requested_at=row["requested_at"],
    )
