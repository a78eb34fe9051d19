"""The upcoming invoice of a subscription: what the renewer will create at its period end (or
its trial's end), computed by the renewer's own planner — the preview and the real renewal are
the same code, so they cannot disagree."""

from __future__ import annotations

from dataclasses import dataclass, replace

from billing_core.domain import renewal as renewal_rules
from billing_core.domain.coupons import Discount
from billing_core.domain.errors import DomainError
from billing_core.domain.invoice_lines import InvoiceLine
from billing_core.domain.renewal import DueSubscription, RenewalInvoice
from billing_core.domain.subscription import SubscriptionStatus
from billing_core.domain.tax import TaxRate
from billing_core.repo.subscriptions import Subscription, domain_state
from billing_core.usecases.renewal_lines import invoice_lines


class NoUpcomingInvoice(DomainError):
    """The subscription will not be invoiced again: canceled, or its cancel is scheduled."""


@dataclass(frozen=True)
class UpcomingInvoice:
    invoice: RenewalInvoice
    lines: list[InvoiceLine]


def upcoming_invoice(
    sub: Subscription, rate: TaxRate | None = None, discount: Discount | None = None
) -> UpcomingInvoice:
    """The renewal invoice the renewer will create when ``sub``'s current period (or trial)
    ends, with its lines, from the subscription as it is now (plan, a plan change scheduled for
    the period end, credit balance, tax ``rate``, ``discount``). A PAST_DUE subscription is
    previewed as it will renew once paid (ACTIVE again)."""
    state = domain_state(sub)
    if state.status == SubscriptionStatus.CANCELED:
        raise NoUpcomingInvoice(f"subscription {sub.id} is canceled")
    if state.cancel_at_period_end:
        raise NoUpcomingInvoice(
            f"subscription {sub.id} is canceled at its period end (resume-renewal undoes it)"
        )
    if state.status == SubscriptionStatus.PAST_DUE:
        state = replace(state, status=SubscriptionStatus.ACTIVE)
    due = DueSubscription(
        state=state,
        customer_id=sub.customer_id,
        time_zone=sub.time_zone,
        billing_anchor=sub.billing_anchor,
        period_index=sub.period_index,
        current_period_start=sub.current_period_start,
        current_period_end=sub.current_period_end,
        credit_balance=sub.credit_balance,
        price_amount=sub.plan_price_amount,
        currency=sub.plan_currency,
        billing_interval=sub.plan_interval,
        scheduled_price_amount=sub.scheduled_plan_price_amount,
        scheduled_billing_interval=sub.scheduled_plan_interval,
        anchor_period_index=sub.anchor_period_index,
    )
    at = sub.current_period_end
    plan = renewal_rules.plan_renewal(due, now=at, max_periods=1, rate=rate, discount=discount)
    (invoice,) = plan.invoices
    return UpcomingInvoice(invoice, invoice_lines(invoice))
