"""A renewal plan repriced (discount, tax, credit) keeps everything else it holds."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from billing_core.domain.invoice import InvoiceStatus
from billing_core.domain.renewal import (
    DueSubscription,
    RenewalInvoice,
    RenewalPlan,
    RenewedSubscription,
)
from billing_core.domain.subscription import SubscriptionState, SubscriptionStatus

AT = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)

INVOICE = RenewalInvoice(
    subscription_id=7,
    customer_id=70,
    period_index=3,
    period_start=AT,
    period_end=AT + timedelta(days=31),
    subtotal=1000,
    credit_applied=100,
    amount=900,
    currency="EUR",
    status=InvoiceStatus.VOID,
    next_attempt_at=AT + timedelta(hours=1),
    paid_at=AT + timedelta(hours=2),
    tax=17,
    voided_at=AT + timedelta(hours=3),
    plan_code="PRO_MONTHLY",
    plan_price=1000,
)

WRITE = RenewedSubscription(
    id=7,
    expected_version=4,
    version=6,
    status=SubscriptionStatus.ACTIVE,
    period_index=3,
    current_period_start=AT,
    current_period_end=AT + timedelta(days=31),
    credit_balance=500,
    canceled_at=AT,
    plan_changed=True,
    billing_anchor=AT - timedelta(days=90),
    anchor_period_index=2,
)


def test_every_field_of_the_renewal_types_is_known_here() -> None:
    """A field added to these types must be carried by priced()/repriced(): this list and the
    non-default values above say it was thought of."""
    assert [f.name for f in dataclasses.fields(RenewalInvoice)] == [
        "subscription_id", "customer_id", "period_index", "period_start", "period_end",
        "subtotal", "credit_applied", "amount", "currency", "status", "next_attempt_at",
        "paid_at", "tax", "voided_at", "plan_code", "plan_price",
    ]  # fmt: skip
    assert [f.name for f in dataclasses.fields(RenewedSubscription)] == [
        "id", "expected_version", "version", "status", "period_index", "current_period_start",
        "current_period_end", "credit_balance", "canceled_at", "plan_changed", "billing_anchor",
        "anchor_period_index",
    ]  # fmt: skip
    assert [f.name for f in dataclasses.fields(RenewalPlan)] == [
        "due", "write", "invoices", "canceled", "already_invoiced", "trailing_events",
        "leading_events",
    ]  # fmt: skip


def test_priced_invoice_is_the_invoice_with_its_new_figures() -> None:
    figures = {
        "subtotal": 1190,
        "credit_applied": 0,
        "amount": 1190,
        "status": InvoiceStatus.OPEN,
        "next_attempt_at": AT,
        "paid_at": None,
        "tax": 190,
    }
    assert INVOICE.priced(**figures) == dataclasses.replace(INVOICE, **figures)  # type: ignore[arg-type]


def test_repriced_plan_is_the_plan_with_its_new_invoices_and_balance() -> None:
    due = DueSubscription(
        state=SubscriptionState(
            id=7,
            status=SubscriptionStatus.ACTIVE,
            cancel_at_period_end=False,
            plan_code="PRO_MONTHLY",
            version=4,
        ),
        customer_id=70,
        time_zone="Europe/Paris",
        billing_anchor=AT - timedelta(days=90),
        period_index=2,
        current_period_start=AT - timedelta(days=28),
        current_period_end=AT,
        credit_balance=500,
        price_amount=1000,
        currency="EUR",
        billing_interval="MONTH",
    )
    plan = RenewalPlan(
        due, WRITE, [INVOICE], canceled=True, already_invoiced=[2], trailing_events=[],
        leading_events=[],
    )  # fmt: skip
    repriced_invoice = INVOICE.priced(
        subtotal=1,
        credit_applied=0,
        amount=1,
        status=InvoiceStatus.OPEN,
        next_attempt_at=AT,
        paid_at=None,
        tax=0,
    )

    repriced = plan.repriced([repriced_invoice], 123)

    assert repriced == dataclasses.replace(
        plan,
        invoices=[repriced_invoice],
        write=dataclasses.replace(WRITE, credit_balance=123),
    )
    assert plan.write.credit_balance == 500 and plan.invoices == [INVOICE]  # unchanged
