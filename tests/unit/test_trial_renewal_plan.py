"""The renewal planner at a trial's end: period 0 invoiced at the anchor (the trial end), the
catch-up across it, a cancel scheduled during the trial, replays; pure, no I/O."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from billing_core.domain.events import EventType
from billing_core.domain.invoice import InvoiceStatus
from billing_core.domain.period import Interval, period_bounds
from billing_core.domain.renewal import (
    BadSubscriptionData,
    DueSubscription,
    plan_renewal,
    renewal_events,
)
from billing_core.domain.subscription import SubscriptionState, SubscriptionStatus

PARIS = "Europe/Paris"
# The trial ends at midnight on Jan 31 in Paris: that is the anchor of every paid period.
TRIAL_END = datetime(2026, 1, 31, tzinfo=ZoneInfo(PARIS)).astimezone(UTC)
TRIAL_START = TRIAL_END - timedelta(days=14)


def trialing(*, flag: bool = False, credit: int = 0, end: datetime = TRIAL_END) -> DueSubscription:
    return DueSubscription(
        state=SubscriptionState(
            id=12,
            status=SubscriptionStatus.TRIALING,
            cancel_at_period_end=flag,
            plan_code="BASIC_MONTHLY",
            version=2,
        ),
        customer_id=77,
        time_zone=PARIS,
        billing_anchor=TRIAL_END,
        period_index=0,
        current_period_start=TRIAL_START,
        current_period_end=end,
        credit_balance=credit,
        price_amount=990,
        currency="EUR",
        billing_interval="MONTH",
    )


def period(n: int) -> tuple[datetime, datetime]:
    p = period_bounds(TRIAL_END, Interval.MONTH, n, PARIS)
    return p.start, p.end


def test_the_trial_end_invoices_period_0_from_the_anchor() -> None:
    plan = plan_renewal(trialing(), now=TRIAL_END + timedelta(minutes=1), max_periods=24)
    (invoice,) = plan.invoices
    assert (invoice.period_index, invoice.period_start, invoice.period_end) == (0, *period(0))
    assert (invoice.amount, invoice.status) == (990, InvoiceStatus.OPEN)
    assert (plan.write.status, plan.write.period_index) == (SubscriptionStatus.ACTIVE, 0)
    assert (plan.write.current_period_start, plan.write.current_period_end) == period(0)
    assert plan.write.version == 3 and plan.write.expected_version == 2
    assert not plan.canceled
    events = renewal_events(plan, [501])
    assert [e.type for e in events] == [
        EventType.SUBSCRIPTION_TRIAL_ENDED,
        EventType.INVOICE_CREATED,
    ]
    assert events[0].payload["early"] is False


def test_catch_up_across_the_trial_end_invoices_every_period_in_order() -> None:
    now = period(2)[0] + timedelta(days=3)  # the renewer was down for two months
    plan = plan_renewal(trialing(), now=now, max_periods=24)
    assert [(i.period_index, i.period_start, i.period_end) for i in plan.invoices] == [
        (n, *period(n)) for n in (0, 1, 2)
    ]
    assert (plan.write.period_index, plan.write.current_period_end) == (2, period(2)[1])
    # Feb 28, Mar 31 in Paris: the anchor's month end does not drift.
    assert period(1)[0] == datetime(2026, 2, 28, tzinfo=ZoneInfo(PARIS)).astimezone(UTC)


def test_catch_up_across_the_trial_end_in_slices_never_skips() -> None:
    now = period(2)[0] + timedelta(days=3)
    first = plan_renewal(trialing(), now=now, max_periods=1)
    assert [i.period_index for i in first.invoices] == [0]
    assert first.write.status == SubscriptionStatus.ACTIVE
    after = DueSubscription(
        state=SubscriptionState(
            12, first.write.status, False, "BASIC_MONTHLY", first.write.version
        ),
        customer_id=77,
        time_zone=PARIS,
        billing_anchor=TRIAL_END,
        period_index=first.write.period_index,
        current_period_start=first.write.current_period_start,
        current_period_end=first.write.current_period_end,
        credit_balance=first.write.credit_balance,
        price_amount=990,
        currency="EUR",
        billing_interval="MONTH",
    )
    rest = plan_renewal(after, now=now, max_periods=24)
    assert [i.period_index for i in rest.invoices] == [1, 2]
    assert rest.leading_events == []


def test_a_cancel_scheduled_in_the_trial_cancels_at_its_end_without_an_invoice() -> None:
    plan = plan_renewal(trialing(flag=True), now=period(1)[0], max_periods=24)
    assert plan.canceled and plan.invoices == []
    assert (plan.write.status, plan.write.period_index) == (SubscriptionStatus.CANCELED, 0)
    # The subscription keeps its trial as its last period: nothing was ever billed.
    assert (plan.write.current_period_start, plan.write.current_period_end) == (
        TRIAL_START,
        TRIAL_END,
    )
    (event,) = renewal_events(plan, [])
    assert (event.type, event.payload["reason"]) == (EventType.SUBSCRIPTION_CANCELED, "period_end")


def test_credit_pays_the_first_period_first() -> None:
    plan = plan_renewal(trialing(credit=500), now=TRIAL_END, max_periods=24)
    (invoice,) = plan.invoices
    assert (invoice.subtotal, invoice.credit_applied, invoice.amount) == (990, 500, 490)
    assert plan.write.credit_balance == 0


def test_a_replayed_trial_end_does_not_invoice_period_0_twice() -> None:
    plan = plan_renewal(trialing(), now=TRIAL_END, max_periods=24, existing={(12, period(0)[0])})
    assert plan.invoices == [] and plan.already_invoiced == [0]
    assert plan.write.status == SubscriptionStatus.ACTIVE


def test_a_trial_whose_end_is_not_its_anchor_is_parked() -> None:
    with pytest.raises(BadSubscriptionData):
        plan_renewal(trialing(end=TRIAL_END - timedelta(hours=1)), now=TRIAL_END, max_periods=24)
