"""Recording a gateway result — from the collector's own call or from a webhook.

Both paths go through :func:`record_charge_result`, in the caller's transaction: lock the
subscription, then the invoice (the lock order of every writer), always write the
``payment_attempt`` audit row, let ``domain.charge_result.apply_result`` decide from the
invoice's current state, and persist what it decided.
"""

from __future__ import annotations

import random
from datetime import datetime
from typing import Literal

from billing_core.domain.charge_result import (
    ChargeOutcome,
    GatewayReport,
    RecordOutcome,
    apply_result,
)
from billing_core.domain.dunning import DunningPolicy
from billing_core.repo import payment_results as results_repo
from billing_core.repo.outbox import append_events
from billing_core.usecases.voiding import void_open_invoices

__all__ = ["RecordOutcome", "Source", "record_charge_result"]

Source = Literal["COLLECTOR", "WEBHOOK"]


async def record_charge_result(
    session: results_repo.Db,
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
    amount: int | None = None,
    currency: str | None = None,
    customer_id: int | None = None,
    rejected_because: str | None = None,
) -> RecordOutcome:
    """``amount``, ``currency``, ``customer_id``: what the gateway reports it charged, when it
    does (webhooks); a report that does not match the invoice is recorded, never applied."""
    locked = await results_repo.lock_subscription_of_invoice(session, invoice_id)
    if locked is None:
        return RecordOutcome.NOT_FOUND
    report = GatewayReport(
        attempt_number=attempt_number,
        outcome=outcome,
        from_webhook=source == "WEBHOOK",
        idempotency_key=idempotency_key,
        decline_code=decline_code,
        gateway_reference=gateway_reference,
        amount=amount,
        currency=currency,
        customer_id=customer_id,
        rejected_because=rejected_because,
    )
    invoice, key_history = await results_repo.lock_invoice_and_record_attempt(
        session, invoice_id, report, error=error, now=now
    )
    effect = apply_result(
        invoice,
        locked.state,
        report,
        other_invoices_in_dunning=locked.other_invoices_in_dunning,
        now=now,
        rng=rng,
        policy=policy,
        key_history=key_history,
    )
    if effect.outcome == RecordOutcome.APPLIED or effect.invoice != invoice:
        await results_repo.write_invoice(session, effect.invoice, now=now)
    events = effect.events
    if effect.subscription != locked.state:
        await results_repo.write_subscription(session, effect.subscription, now=now)
    if effect.void_other_open_invoices:
        events += await void_open_invoices(
            session, locked.state.id, now=now, keep_invoice_id=invoice_id
        )
    if events:
        await append_events(session, events, now)
    return effect.outcome
