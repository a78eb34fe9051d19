"""Recording the gateway's answer to a refund, in the caller's transaction: the refund's new
state (``domain.refund.apply_refund_answer``), its ``PaymentRefunded`` event through the outbox,
and a reconciliation item when the gateway refused it for good."""

from __future__ import annotations

from datetime import datetime

from billing_core.db.pg import Connection
from billing_core.domain.dunning import DunningPolicy
from billing_core.domain.refund import RefundAnswer, RefundState, apply_refund_answer
from billing_core.repo import reconciliation as reconciliation_repo
from billing_core.repo import refunds as refunds_repo
from billing_core.repo.outbox import append_events


async def record_refund_answer(
    conn: Connection,
    refund_id: int,
    answer: RefundAnswer,
    *,
    now: datetime,
    policy: DunningPolicy,
) -> RefundState | None:
    """The refund as it is after ``answer`` (None: no such refund). An answer for a refund
    already settled (recorded by another try of the same key) changes nothing."""
    refund = await refunds_repo.lock_refund(conn, refund_id)
    if refund is None:
        return None
    effect = apply_refund_answer(
        refund,
        answer,
        now=now,
        policy=policy,
    )
    if effect.refund == refund:
        return refund
    await refunds_repo.write_refund(conn, effect.refund, now=now)
    if effect.needs_reconciliation is not None:
        await reconciliation_repo.add_items(
            conn,
            [
                reconciliation_repo.NewItem(
                    invoice_id=refund.invoice_id,
                    subscription_id=refund.subscription_id,
                    reason=effect.needs_reconciliation,
                    idempotency_key=refund.idempotency_key,
                    gateway_reference=refund.charge_reference,
                    refund_id=refund.id,
                )
            ],
            now=now,
        )
    await append_events(conn, effect.events, now)
    return effect.refund
