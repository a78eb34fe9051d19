"""Recording gateway results — from the collector's own calls or from webhooks.

Both paths go through :func:`record_charge_results`, in the caller's transaction, for one result
or a group of them: lock the subscriptions, then the invoices (the lock order of every writer),
always write the ``payment_attempt`` audit rows, let ``domain.charge_result.apply_result`` decide
each from its invoice's current state, and persist what it decided.

A group is recorded in rounds, each holding at most one result per invoice and per subscription;
a later round reads what the earlier ones wrote. So a group decides exactly what recording its
results one by one, in order, decides — in a few statements instead of a few per result. A round
is three statements: the subscription locks, the invoice locks with the audit rows, and one
statement that writes what was decided (invoices, subscriptions, the events); refunds,
reconciliation items and voids add theirs only when a result calls for them.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from billing_core.db.pg import Connection
from billing_core.domain.charge_result import (
    ChargeOutcome,
    GatewayReport,
    RecordOutcome,
    apply_result,
)
from billing_core.domain.dunning import DunningPolicy
from billing_core.domain.events import DomainEvent
from billing_core.domain.invoice import InvoiceState, InvoiceStatus
from billing_core.domain.refund import refund_key
from billing_core.domain.subscription import SubscriptionState
from billing_core.repo import payment_results as results_repo
from billing_core.repo import reconciliation as reconciliation_repo
from billing_core.repo import refunds as refunds_repo
from billing_core.repo.outbox import append_events
from billing_core.repo.payment_results import AttemptToRecord, LockedInvoice
from billing_core.usecases.voiding import give_back_credit, void_open_invoices

__all__ = [
    "AttemptToRecord",
    "RecordOutcome",
    "Source",
    "record_charge_result",
    "record_charge_results",
]

Source = Literal["COLLECTOR", "WEBHOOK", "LOOKUP"]


async def record_charge_result(
    conn: Connection,
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
    key_prefix: str = "",
) -> RecordOutcome:
    """One result. ``amount``, ``currency``, ``customer_id``: what the gateway reports it
    charged, when it does (webhooks); a report that does not match the invoice is recorded,
    never applied."""
    report = GatewayReport(
        attempt_number=attempt_number,
        outcome=outcome,
        from_webhook=source == "WEBHOOK",
        from_lookup=source == "LOOKUP",
        idempotency_key=idempotency_key,
        decline_code=decline_code,
        gateway_reference=gateway_reference,
        amount=amount,
        currency=currency,
        customer_id=customer_id,
        rejected_because=rejected_because,
    )
    (recorded,) = await record_charge_results(
        conn,
        [AttemptToRecord(invoice_id, report, error)],
        now=now,
        rng=rng,
        policy=policy,
        key_prefix=key_prefix,
    )
    return recorded


async def record_charge_results(
    conn: Connection,
    attempts: Sequence[AttemptToRecord],
    *,
    now: datetime,
    rng: random.Random,
    policy: DunningPolicy,
    key_prefix: str = "",
) -> list[RecordOutcome]:
    """Record ``attempts`` in order; what each did, in the same order. A charge that is to be
    given back gets a REQUESTED ``refund`` row (its key ``ref-{attempt id}`` with
    ``key_prefix``, the deployment's); the collector sends it. What needs a person gets a
    ``reconciliation_item``."""
    outcomes: list[RecordOutcome] = [RecordOutcome.NOT_FOUND] * len(attempts)
    events: list[DomainEvent] = []  # decided, not yet in the outbox (in order)
    pending = list(range(len(attempts)))
    while pending:
        subscriptions = await results_repo.lock_subscriptions_of_invoices(
            conn, {attempts[i].invoice_id for i in pending}
        )
        this_round, pending = _one_round(attempts, pending, subscriptions)
        recorded = await _record_round(
            conn,
            [attempts[i] for i in this_round],
            subscriptions,
            now=now,
            rng=rng,
            policy=policy,
            events=events,
            key_prefix=key_prefix,
        )
        for i, outcome in zip(this_round, recorded, strict=True):
            outcomes[i] = outcome
    if events:
        await append_events(conn, events, now)
    return outcomes


def _one_round(
    attempts: Sequence[AttemptToRecord],
    pending: list[int],
    subscriptions: dict[int, SubscriptionState],
) -> tuple[list[int], list[int]]:
    """The first pending result of each invoice and subscription, and the rest (for later
    rounds). A result whose invoice does not exist is in neither: it stays NOT_FOUND."""
    this_round: list[int] = []
    later: list[int] = []
    invoices: set[int] = set()
    subs: set[int] = set()
    for i in pending:
        invoice_id = attempts[i].invoice_id
        sub = subscriptions.get(invoice_id)
        if sub is None:
            continue
        if invoice_id in invoices or sub.id in subs:
            later.append(i)
            continue
        invoices.add(invoice_id)
        subs.add(sub.id)
        this_round.append(i)
    return this_round, later


async def _record_round(
    conn: Connection,
    attempts: list[AttemptToRecord],
    subscriptions: dict[int, SubscriptionState],
    *,
    now: datetime,
    rng: random.Random,
    policy: DunningPolicy,
    events: list[DomainEvent],
    key_prefix: str,
) -> list[RecordOutcome]:
    """At most one result per invoice and per subscription. Writes ``events`` (those of earlier
    rounds not yet written) with this round's, in order, in the round's write statement; the
    events of what follows it (voids) are left in ``events`` for the next write."""
    locked = await results_repo.lock_invoices_and_record_attempts(conn, attempts, now=now)
    outcomes: list[RecordOutcome] = []
    invoice_writes: list[InvoiceState] = []
    subscription_writes: list[SubscriptionState] = []
    voids: list[tuple[int, int]] = []
    refunds: list[refunds_repo.RefundToRequest] = []
    items: list[reconciliation_repo.NewItem] = []
    credit_back: list[tuple[int, LockedInvoice]] = []
    for attempt in attempts:
        invoice = locked.get(attempt.invoice_id)
        if invoice is None:
            outcomes.append(RecordOutcome.NOT_FOUND)
            continue
        subscription = subscriptions[attempt.invoice_id]
        effect = apply_result(
            invoice.state,
            subscription,
            attempt.report,
            other_invoices_in_dunning=invoice.other_invoices_in_dunning,
            now=now,
            rng=rng,
            policy=policy,
            key_history=invoice.key_history,
        )
        outcomes.append(effect.outcome)
        if effect.outcome == RecordOutcome.APPLIED or effect.invoice != invoice.state:
            invoice_writes.append(effect.invoice)
        if effect.subscription != subscription:
            subscription_writes.append(effect.subscription)
        events += effect.events
        if effect.void_other_open_invoices:
            voids.append((subscription.id, attempt.invoice_id))
        if effect.invoice.status == InvoiceStatus.VOID != invoice.state.status:
            credit_back.append((subscription.id, invoice))  # a requested void, decided
        report = attempt.report
        if effect.refund is not None:
            refunds.append(
                refunds_repo.RefundToRequest(
                    invoice_id=attempt.invoice_id,
                    subscription_id=subscription.id,
                    payment_attempt_id=invoice.payment_attempt_id,
                    charge_key=report.idempotency_key,
                    charge_reference=report.gateway_reference,
                    idempotency_key=refund_key(invoice.payment_attempt_id, key_prefix),
                    amount=report.amount if report.amount is not None else invoice.state.amount,
                    currency=report.currency or invoice.state.currency,
                    reason=str(effect.refund),
                )
            )
        if effect.reconciliation is not None:
            items.append(
                reconciliation_repo.NewItem(
                    invoice_id=attempt.invoice_id,
                    subscription_id=subscription.id,
                    reason=effect.reconciliation,
                    idempotency_key=report.idempotency_key,
                    gateway_reference=report.gateway_reference,
                    payment_attempt_id=invoice.payment_attempt_id,
                )
            )
    await results_repo.write_decisions(conn, invoice_writes, subscription_writes, events, now=now)
    events.clear()
    events += await _write_the_rest(conn, refunds, items, credit_back, voids, now=now)
    return outcomes


async def _write_the_rest(
    conn: Connection,
    refunds: list[refunds_repo.RefundToRequest],
    items: list[reconciliation_repo.NewItem],
    credit_back: list[tuple[int, LockedInvoice]],
    voids: list[tuple[int, int]],
    *,
    now: datetime,
) -> list[DomainEvent]:
    """What a round decided besides states and events: refunds, reconciliation items, credit
    given back by a requested void, the other OPEN invoices voided (their events returned)."""
    await refunds_repo.request_refunds(conn, refunds, now=now)
    await reconciliation_repo.add_items(conn, items, now=now)
    await give_back_credit(
        conn,
        [(s, voided.state.id, voided.credit_applied) for s, voided in credit_back],
        now=now,
    )
    events: list[DomainEvent] = []
    for subscription_id, kept in voids:
        events += await void_open_invoices(conn, subscription_id, now=now, keep_invoice_id=kept)
    return events
