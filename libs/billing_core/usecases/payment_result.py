"""Recording a gateway result — from the collector's own call or from a webhook.

Both paths go through :func:`record_charge_result`, in the caller's transaction. It locks the
subscription, then the invoice (the same order as every other writer, so no deadlock with an API
cancel), always writes a ``payment_attempt`` row (the audit trail), and then decides from the
invoice's CURRENT state, so results may arrive in any order and any number of times:

* OPEN, result for the current attempt → the article's rule (``domain.charge_result.decide``).
* OPEN, SUCCESS for any attempt → PAID: money was taken for this invoice, so it must never be
  charged again, whatever the attempt number says.
* OPEN, DECLINED/UNKNOWN for an older attempt → ignored (never rolls the invoice back).
* PAID → ignored (a PAID invoice stays PAID).
* FAILED/VOID + SUCCESS → kept for reconciliation (PaymentReconciliationNeeded event).
* UNKNOWN from a webhook → only recorded.
"""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import datetime
from enum import StrEnum
from typing import Literal

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from billing_core.domain import events as ev
from billing_core.domain import subscription as sub
from billing_core.domain.charge_result import AttemptDecision, ChargeOutcome, decide
from billing_core.domain.dunning import DunningPolicy
from billing_core.domain.events import DomainEvent
from billing_core.domain.invoice import InvoiceStatus
from billing_core.domain.subscription import SubscriptionState, SubscriptionStatus
from billing_core.repo.outbox import append_events

Source = Literal["COLLECTOR", "WEBHOOK"]
Db = AsyncSession | AsyncConnection


class RecordOutcome(StrEnum):
    APPLIED = "APPLIED"
    ALREADY_SETTLED = "ALREADY_SETTLED"
    STALE_ATTEMPT = "STALE_ATTEMPT"
    RECONCILIATION = "RECONCILIATION"
    NOT_FOUND = "NOT_FOUND"


# The subscription first, then the invoice: the lock order of every writer (no deadlock).
_LOCK_SUBSCRIPTION = text(
    """
    SELECT s.id, s.status, s.cancel_at_period_end, p.code AS plan_code, s.version, s.canceled_at
    FROM subscription s JOIN plan p ON p.id = s.plan_id
    WHERE s.id = (SELECT subscription_id FROM invoice WHERE id = :invoice_id)
    FOR UPDATE OF s
    """
)

# Locks the invoice and writes the attempt row in one round trip; returns the invoice as it was.
_LOCK_INVOICE_AND_RECORD_ATTEMPT = text(
    """
    WITH inv AS (
        SELECT id, subscription_id, status, attempt_count, amount, currency
        FROM invoice WHERE id = :invoice_id FOR UPDATE
    ),
    attempt AS (
        INSERT INTO payment_attempt (invoice_id, attempt_number, idempotency_key, source,
                                     outcome, amount, currency, decline_code, gateway_reference,
                                     error, recorded_at)
        SELECT inv.id, :attempt_number, :key, :source, :outcome, inv.amount, inv.currency,
               :decline_code, :reference, :error, :now
        FROM inv
    )
    SELECT * FROM inv
    """
)

_UPDATE_INVOICE = text(
    """
    UPDATE invoice
    SET status = CAST(:status AS varchar), attempt_count = :attempt_count,
        next_attempt_at = :next_attempt_at, leased_at = NULL,
        paid_at = CASE WHEN CAST(:status AS varchar) = 'PAID' THEN :now ELSE paid_at END,
        closed_at = CASE WHEN CAST(:status AS varchar) = 'OPEN' THEN NULL ELSE :now END,
        updated_at = :now
    WHERE id = :id
    """
)

_UPDATE_SUBSCRIPTION = text(
    """
    UPDATE subscription
    SET status = :status, canceled_at = :canceled_at, cancel_at_period_end = :flag,
        version = :version, updated_at = :now
    WHERE id = :id
    """
)

_VOID_OTHER_OPEN = text(
    """
    UPDATE invoice SET status = 'VOID', next_attempt_at = NULL, leased_at = NULL,
                       closed_at = :now, updated_at = :now
    WHERE subscription_id = :subscription_id AND status = 'OPEN' AND id <> :invoice_id
    RETURNING id
    """
)

_OTHER_INVOICES_IN_DUNNING = text(
    """
    SELECT count(*) FROM invoice
    WHERE subscription_id = :subscription_id AND status = 'OPEN' AND attempt_count > 0
      AND id <> :invoice_id
    """
)


async def record_charge_result(
    session: Db,
    *,
    invoice_id: int,
    attempt_number: int,
    outcome: ChargeOutcome,
    source: Source,
    idempotency_key: str,
    now: datetime,
    rng: random.Random,
    policy: DunningPolicy,
    decline_code: str | None = None,
    gateway_reference: str | None = None,
    error: str | None = None,
) -> RecordOutcome:
    sub_row = (
        (await session.execute(_LOCK_SUBSCRIPTION, {"invoice_id": invoice_id})).mappings().first()
    )
    if sub_row is None:
        return RecordOutcome.NOT_FOUND
    subscription_id = int(sub_row["id"])
    inv = (
        (
            await session.execute(
                _LOCK_INVOICE_AND_RECORD_ATTEMPT,
                {
                    "invoice_id": invoice_id,
                    "attempt_number": attempt_number,
                    "key": idempotency_key,
                    "source": source,
                    "outcome": str(outcome),
                    "decline_code": decline_code,
                    "reference": gateway_reference,
                    "error": error,
                    "now": now,
                },
            )
        )
        .mappings()
        .one()
    )

    status = InvoiceStatus(inv["status"])
    if status == InvoiceStatus.PAID:
        return RecordOutcome.ALREADY_SETTLED
    if status in (InvoiceStatus.FAILED, InvoiceStatus.VOID):
        if outcome != ChargeOutcome.SUCCESS:
            return RecordOutcome.ALREADY_SETTLED
        await append_events(
            session,
            [
                ev.payment_reconciliation_needed(
                    subscription_id, invoice_id, str(status), idempotency_key, gateway_reference
                )
            ],
            now,
        )
        return RecordOutcome.RECONCILIATION
    if outcome == ChargeOutcome.UNKNOWN and source == "WEBHOOK":
        return RecordOutcome.STALE_ATTEMPT
    current = int(inv["attempt_count"])
    if attempt_number != current and outcome != ChargeOutcome.SUCCESS:
        return RecordOutcome.STALE_ATTEMPT

    decision = decide(outcome, current, now, rng, policy)
    await session.execute(
        _UPDATE_INVOICE,
        {
            "id": invoice_id,
            "status": str(decision.invoice_status),
            "attempt_count": decision.attempt_count,
            "next_attempt_at": decision.next_attempt_at,
            "now": now,
        },
    )
    state = SubscriptionState(
        id=subscription_id,
        status=SubscriptionStatus(sub_row["status"]),
        cancel_at_period_end=bool(sub_row["cancel_at_period_end"]),
        plan_code=str(sub_row["plan_code"]),
        version=int(sub_row["version"]),
        canceled_at=sub_row["canceled_at"],
    )
    events = _invoice_events(subscription_id, invoice_id, inv, decision, decline_code, now)
    new_state, sub_events = await _subscription_change(session, state, invoice_id, decision, now)
    events += sub_events
    if new_state != state:
        await session.execute(
            _UPDATE_SUBSCRIPTION,
            {
                "id": subscription_id,
                "status": str(new_state.status),
                "canceled_at": new_state.canceled_at,
                "flag": new_state.cancel_at_period_end,
                "version": new_state.version,
                "now": now,
            },
        )
    await append_events(session, events, now)
    return RecordOutcome.APPLIED


def _invoice_events(
    subscription_id: int,
    invoice_id: int,
    inv: object,
    decision: AttemptDecision,
    decline_code: str | None,
    now: datetime,
) -> list[DomainEvent]:
    row = dict(inv)  # type: ignore[call-overload]
    if decision.invoice_status == InvoiceStatus.PAID:
        return [ev.invoice_paid(subscription_id, invoice_id, row["amount"], row["currency"], now)]
    if decision.subscription_action in ("past_due", "cancel"):
        return [
            ev.payment_failed(
                subscription_id,
                invoice_id,
                decision.attempt_count,
                decline_code,
                decision.next_attempt_at,
            )
        ]
    return []


async def _subscription_change(
    session: Db,
    state: SubscriptionState,
    invoice_id: int,
    decision: AttemptDecision,
    now: datetime,
) -> tuple[SubscriptionState, list[DomainEvent]]:
    if state.status == SubscriptionStatus.CANCELED:
        return state, []
    action = decision.subscription_action
    if action == "past_due":
        return sub.mark_past_due(state, now, invoice_id)
    if action == "reactivate" and state.status == SubscriptionStatus.PAST_DUE:
        others = (
            await session.execute(
                _OTHER_INVOICES_IN_DUNNING,
                {"subscription_id": state.id, "invoice_id": invoice_id},
            )
        ).scalar_one()
        if others == 0:
            return sub.reactivate(state, now, invoice_id)
        return state, []
    if action == "cancel":
        new_state, events = sub.cancel_for_nonpayment(state, now)
        voided = (
            await session.execute(
                _VOID_OTHER_OPEN,
                {"subscription_id": state.id, "invoice_id": invoice_id, "now": now},
            )
        ).scalars()
        events += [ev.invoice_voided(state.id, int(v), now) for v in voided]
        return replace(new_state), events
    return state, []
