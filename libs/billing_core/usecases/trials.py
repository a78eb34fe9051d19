"""End a trial now (on request): the first paid period starts now and is invoiced at once."""

from __future__ import annotations

from datetime import datetime

from billing_core.db.pg import Connection
from billing_core.domain import subscription as sub_domain
from billing_core.domain.coupons import plan_period_lines
from billing_core.domain.credit import apply_credit
from billing_core.domain.period import Interval, period_bounds
from billing_core.domain.tax import taxed_at
from billing_core.repo import audit
from billing_core.repo import coupons as coupons_repo
from billing_core.repo import subscriptions as subscriptions_repo
from billing_core.repo import tax as tax_repo
from billing_core.usecases.lifecycle import Decision, Outcome, change_subscription
from billing_core.usecases.period_invoice import insert_period_invoice
from billing_core.usecases.subscribe import opened_invoice_events


async def end_trial_now(
    conn: Connection,
    *,
    subscription_id: int,
    now: datetime,
    expected_version: int | None = None,
    actor: audit.Actor | None = None,
) -> int:
    """End the TRIALING subscription's trial at ``now``; return its first invoice's id. With
    ``actor``, the change is recorded in ``audit_event``.

    The trial end, and so the billing anchor, becomes ``now`` (as if the trial had been
    planned to end now): period 0 is [now, one interval later) in the subscription's zone,
    invoiced like a renewal (less its coupon's discount, its lines taxed at the subscription's
    rate if it has a tax location, credit first, then OPEN and due now). A cancel scheduled during
    the trial is dropped: asking to pay now is asking to stay. Anything but TRIALING is 409
    (``IllegalTransition``).
    """

    async def decide(sub: subscriptions_repo.Subscription, now: datetime) -> Decision[int]:
        state = subscriptions_repo.domain_state(sub)
        _new_state, events = sub_domain.end_trial(state, now, early=True)
        period = period_bounds(now, Interval(sub.plan_interval), 0, sub.time_zone)
        rate = (await tax_repo.rates_for(conn, [sub.id])).get(sub.id)
        discount = (await coupons_repo.discounts_for(conn, [sub.id])).get(sub.id)
        priced = taxed_at(
            rate, plan_period_lines(sub.plan_code, sub.plan_price_amount, discount, 0, period)
        )
        split = apply_credit(priced.total, sub.credit_balance)

        async def invoice_it(_version: int, decided: Outcome[int]) -> Outcome[int]:
            invoice = await insert_period_invoice(
                conn,
                sub,
                period_index=0,
                period=period,
                priced=priced,
                split=split,
                currency=sub.plan_currency,
                now=now,
            )
            opened = opened_invoice_events(invoice, priced.tax)
            return Outcome(invoice.id, [*decided.events, *opened], {"invoiceId": invoice.id})

        values = {
            "status": "ACTIVE",
            "cancel_at_period_end": False,
            "billing_anchor": now,
            "anchor_period_index": 0,
            "trial_end": now,
            "period_index": 0,
            "current_period_start": period.start,
            "current_period_end": period.end,
            "credit_balance": split.credit_remaining,
        }
        return Decision(Outcome(0, events), values, invoice_it)

    return await change_subscription(
        conn,
        decide,
        subscription_id=subscription_id,
        action=audit.SUBSCRIPTION_END_TRIAL,
        now=now,
        expected_version=expected_version,
        actor=actor,
    )
