"""SQL of recording one gateway result: lock, audit row, write back the decided states.

The subscription is locked first, then the invoice: the lock order of every writer, so recording
a result never deadlocks with an API cancel or a renewal. Nothing here commits.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import BigInteger, BindParameter, bindparam, case, func, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from billing_core.db import tables as t
from billing_core.domain.charge_result import GatewayReport, KeyHistory
from billing_core.domain.invoice import InvoiceState, InvoiceStatus
from billing_core.domain.subscription import SubscriptionState, SubscriptionStatus
from billing_core.repo.subscriptions import subscription_state

Db = AsyncSession | AsyncConnection

_s, _p, _i = t.subscription, t.plan, t.invoice


@dataclass(frozen=True)
class LockedSubscription:
    state: SubscriptionState
    # OPEN invoices of the subscription in dunning other than the one being recorded; counted
    # only when the subscription is PAST_DUE (the one case where it decides anything).
    other_invoices_in_dunning: int


_invoice_id: BindParameter[int] = bindparam("invoice_id", type_=BigInteger)
_others_in_dunning = (
    select(func.count())
    .select_from(_i)
    .where(
        _i.c.subscription_id == _s.c.id,
        _i.c.status == str(InvoiceStatus.OPEN),
        _i.c.attempt_count > 0,
        _i.c.id != _invoice_id,
    )
    .scalar_subquery()
)
_LOCK_SUBSCRIPTION = (
    select(
        _s.c.id,
        _s.c.status,
        _s.c.cancel_at_period_end,
        _p.c.code.label("plan_code"),
        _s.c.version,
        _s.c.canceled_at,
        case((_s.c.status == str(SubscriptionStatus.PAST_DUE), _others_in_dunning), else_=0).label(
            "others_in_dunning"
        ),
    )
    .select_from(_s.join(_p, _p.c.id == _s.c.plan_id))
    .where(_s.c.id == select(_i.c.subscription_id).where(_i.c.id == _invoice_id).scalar_subquery())
    .with_for_update(of=_s)
)


async def lock_subscription_of_invoice(db: Db, invoice_id: int) -> LockedSubscription | None:
    """Row-lock the invoice's subscription; None when the invoice does not exist."""
    row = (await db.execute(_LOCK_SUBSCRIPTION, {"invoice_id": invoice_id})).mappings().first()
    if row is None:
        return None
    return LockedSubscription(subscription_state(row), int(row["others_in_dunning"]))


# Locks the invoice and writes the attempt row in one round trip; returns the invoice as it was.
_LOCK_INVOICE_AND_RECORD_ATTEMPT = text(
    """
    WITH inv AS (
        SELECT id, customer_id, status, attempt_count, amount, currency, next_attempt_at,
               paid_at, closed_at
        FROM invoice WHERE id = :invoice_id FOR UPDATE
    ),
    attempt AS (
        INSERT INTO payment_attempt (invoice_id, attempt_number, idempotency_key, source,
                                     outcome, amount, currency, decline_code, gateway_reference,
                                     error, recorded_at)
        SELECT inv.id, :attempt_number, :key, :source, :outcome,
               coalesce(CAST(:amount AS bigint), inv.amount),
               coalesce(CAST(:currency AS varchar), inv.currency),
               :decline_code, :reference, :error, :now
        FROM inv
    )
    SELECT inv.*,
           (SELECT count(*) FROM payment_attempt a
            WHERE a.invoice_id = :invoice_id AND a.idempotency_key = :key
              AND a.outcome = 'UNKNOWN') AS uncertain_answers,
           (SELECT min(a.recorded_at) FROM payment_attempt a
            WHERE a.invoice_id = :invoice_id AND a.idempotency_key = :key) AS key_first_used_at
    FROM inv
    """
)


async def lock_invoice_and_record_attempt(
    db: Db, invoice_id: int, report: GatewayReport, *, error: str | None, now: datetime
) -> tuple[InvoiceState, KeyHistory]:
    """Row-lock the invoice and write its ``payment_attempt`` audit row (always, whatever the
    result then does; with the amount and currency the gateway reported, when it did); return
    the invoice as it was before this result, and what its key had seen before."""
    row = (
        (
            await db.execute(
                _LOCK_INVOICE_AND_RECORD_ATTEMPT,
                {
                    "invoice_id": invoice_id,
                    "attempt_number": report.attempt_number,
                    "key": report.idempotency_key,
                    "source": "WEBHOOK" if report.from_webhook else "COLLECTOR",
                    "outcome": str(report.outcome),
                    "decline_code": report.decline_code,
                    "reference": report.gateway_reference,
                    "error": error,
                    "amount": report.amount,
                    "currency": report.currency,
                    "now": now,
                },
            )
        )
        .mappings()
        .one()
    )
    invoice = InvoiceState(
        id=int(row["id"]),
        customer_id=int(row["customer_id"]),
        status=InvoiceStatus(row["status"]),
        attempt_count=int(row["attempt_count"]),
        amount=int(row["amount"]),
        currency=str(row["currency"]),
        next_attempt_at=row["next_attempt_at"],
        paid_at=row["paid_at"],
        closed_at=row["closed_at"],
    )
    history = KeyHistory(int(row["uncertain_answers"]), row["key_first_used_at"])
    return invoice, history


async def write_invoice(db: Db, invoice: InvoiceState, *, now: datetime) -> None:
    """Store the decided state; the lease is released (the attempt is over)."""
    await db.execute(
        update(_i)
        .where(_i.c.id == invoice.id)
        .values(
            status=str(invoice.status),
            attempt_count=invoice.attempt_count,
            next_attempt_at=invoice.next_attempt_at,
            paid_at=invoice.paid_at,
            closed_at=invoice.closed_at,
            leased_at=None,
            updated_at=now,
        )
    )


async def write_subscription(db: Db, state: SubscriptionState, *, now: datetime) -> None:
    """Store the decided state of the locked subscription (its version already bumped)."""
    await db.execute(
        update(_s)
        .where(_s.c.id == state.id)
        .values(
            status=str(state.status),
            canceled_at=state.canceled_at,
            cancel_at_period_end=state.cancel_at_period_end,
            version=state.version,
            updated_at=now,
        )
    )
