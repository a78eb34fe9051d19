"""The renewal planner: catch-up, credit, cancel at period end, replays and bad rows, no I/O."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from billing_core.domain.coupons import Coupon, Discount, Duration
from billing_core.domain.events import EventType
from billing_core.domain.invoice import InvoiceStatus
from billing_core.domain.invoice_lines import LineKind
from billing_core.domain.period import Interval, period_bounds
from billing_core.domain.renewal import (
    BadSubscriptionData,
    DueSubscription,
    plan_renewal,
    renewal_events,
)
from billing_core.domain.subscription import (
    Pause,
    PauseBehavior,
    SubscriptionState,
    SubscriptionStatus,
)
from billing_core.domain.tax import TaxRate

PARIS = "Europe/Paris"
# Midnight on Jan 31 in Paris: the month-end anchor that must not drift to the 28th.
ANCHOR = datetime(2026, 1, 31, tzinfo=ZoneInfo(PARIS)).astimezone(UTC)


def due(
    *,
    index: int = 0,
    credit: int = 0,
    flag: bool = False,
    price: int = 990,
    tz: str = PARIS,
    end: datetime | None = None,
) -> DueSubscription:
    period = period_bounds(ANCHOR, Interval.MONTH, index, PARIS)
    return DueSubscription(
        state=SubscriptionState(
            id=12,
            status=SubscriptionStatus.ACTIVE,
            cancel_at_period_end=flag,
            plan_code="BASIC_MONTHLY",
            version=5,
        ),
        customer_id=77,
        time_zone=tz,
        billing_anchor=ANCHOR,
        period_index=index,
        current_period_start=period.start,
        current_period_end=end or period.end,
        credit_balance=credit,
        price_amount=price,
        currency="EUR",
        billing_interval="MONTH",
    )


def paris(y: int, m: int, d: int) -> datetime:
    return datetime(y, m, d, tzinfo=ZoneInfo(PARIS)).astimezone(UTC)


def test_one_due_period_is_renewed_with_an_open_invoice_due_now() -> None:
    now = paris(2026, 3, 1)  # period 0 ended on Feb 28 (end of month, not Feb 31)
    plan = plan_renewal(due(), now=now, max_periods=24)
    [invoice] = plan.invoices
    assert (invoice.period_index, invoice.period_start, invoice.period_end) == (
        1,
        paris(2026, 2, 28),
        paris(2026, 3, 31),
    )
    assert (invoice.subtotal, invoice.credit_applied, invoice.amount) == (990, 0, 990)
    assert (invoice.status, invoice.next_attempt_at, invoice.paid_at) == (
        InvoiceStatus.OPEN,
        now,
        None,
    )
    w = plan.write
    assert (w.period_index, w.current_period_start, w.current_period_end) == (
        1,
        invoice.period_start,
        invoice.period_end,
    )
    assert (w.expected_version, w.version, w.status, w.canceled_at) == (
        5,
        6,
        SubscriptionStatus.ACTIVE,
        None,
    )
    assert not plan.canceled and plan.trailing_events == []


def test_missed_periods_are_caught_up_in_order_without_gaps() -> None:
    now = paris(2026, 6, 15)
    plan = plan_renewal(due(), now=now, max_periods=24)
    assert [i.period_index for i in plan.invoices] == [1, 2, 3, 4]
    for before, after in zip(plan.invoices, plan.invoices[1:], strict=False):
        assert after.period_start == before.period_end
    assert plan.invoices[-1].period_end == paris(2026, 6, 30)
    assert plan.write.current_period_end > now
    assert plan.write.period_index == 4


VAT_20 = TaxRate("FR", None, 200_000, False, "VAT")
# 10 % off period 1 only.
TEN_OFF_PERIOD_1 = Discount(Coupon("TEN", Duration.ONCE, percent_off_bp=1_000), 1, 2)


def test_each_invoice_is_priced_once_discounted_taxed_then_credited() -> None:
    now = paris(2026, 4, 1)  # periods 1 and 2 are due
    plan = plan_renewal(
        due(price=1000, credit=500),
        now=now,
        max_periods=24,
        rate=VAT_20,
        discount=TEN_OFF_PERIOD_1,
    )
    first, second = plan.invoices
    # 1000 - 100 discount = 900, + 20 % VAT (180) = 1080, less the 500 of credit.
    assert [(line.kind, line.amount) for line in first.lines] == [
        (LineKind.PLAN_PERIOD, 1000),
        (LineKind.DISCOUNT, -100),
        (LineKind.TAX, 180),
    ]
    assert (first.subtotal, first.tax, first.credit_applied, first.amount) == (1080, 180, 500, 580)
    # No discount on period 2: 1000 + 200 VAT, no credit left.
    assert [(line.kind, line.amount) for line in second.lines] == [
        (LineKind.PLAN_PERIOD, 1000),
        (LineKind.TAX, 200),
    ]
    assert (second.subtotal, second.tax, second.credit_applied, second.amount) == (
        1200,
        200,
        0,
        1200,
    )
    assert plan.write.credit_balance == 0


def test_a_paused_period_is_priced_the_same_and_takes_no_credit() -> None:
    now = paris(2026, 3, 1)
    base = due(price=1000, credit=500)
    paused = replace(
        base, state=replace(base.state, pause=Pause(PauseBehavior.KEEP_AS_DRAFT, paris(2026, 2, 1)))
    )
    plan = plan_renewal(paused, now=now, max_periods=24, rate=VAT_20)
    [invoice] = plan.invoices
    assert (invoice.status, invoice.subtotal, invoice.tax) == (InvoiceStatus.DRAFT, 1200, 200)
    assert (invoice.credit_applied, invoice.amount, invoice.next_attempt_at) == (0, 1200, None)
    assert plan.write.credit_balance == 500


def test_credit_is_consumed_in_order_and_a_covered_invoice_opens_paid() -> None:
    now = paris(2026, 4, 2)
    plan = plan_renewal(due(credit=1500), now=now, max_periods=24)
    assert [(i.credit_applied, i.amount, i.status) for i in plan.invoices] == [
        (990, 0, InvoiceStatus.PAID),
        (510, 480, InvoiceStatus.OPEN),
    ]
    assert plan.invoices[0].paid_at == now and plan.invoices[0].next_attempt_at is None
    assert plan.write.credit_balance == 0
    events = renewal_events(plan, [101, 102])
    assert [e.type for e in events] == [
        EventType.INVOICE_CREATED,
        EventType.INVOICE_PAID,
        EventType.INVOICE_CREATED,
    ]
    created = events[0].payload
    assert {k: created[k] for k in ("invoiceId", "kind", "periodIndex", "subtotal")} == {
        "invoiceId": 101,
        "kind": "RENEWAL",
        "periodIndex": 1,
        "subtotal": 990,
    }
    assert (created["creditApplied"], created["amount"], created["currency"]) == (990, 0, "EUR")


def test_the_cancel_flag_cancels_at_period_end_instead_of_renewing() -> None:
    now = paris(2026, 3, 1)
    plan = plan_renewal(due(flag=True), now=now, max_periods=24)
    assert plan.canceled and plan.invoices == []
    assert (plan.write.status, plan.write.canceled_at, plan.write.period_index) == (
        SubscriptionStatus.CANCELED,
        now,
        0,
    )
    assert [e.type for e in renewal_events(plan, [])] == [EventType.SUBSCRIPTION_CANCELED]
    assert plan.trailing_events[0].payload["reason"] == "period_end"


def test_an_already_invoiced_period_is_advanced_over_without_a_second_invoice_or_credit() -> None:
    now = paris(2026, 4, 2)
    d = due(credit=500)
    replayed = {(d.id, paris(2026, 2, 28))}
    plan = plan_renewal(d, now=now, max_periods=24, existing=replayed)
    assert plan.already_invoiced == [1]
    [invoice] = plan.invoices
    assert (invoice.period_index, invoice.credit_applied, invoice.amount) == (2, 500, 490)
    assert plan.write.period_index == 2


def test_at_most_max_periods_are_renewed_and_the_rest_stays_due() -> None:
    now = paris(2026, 12, 15)
    plan = plan_renewal(due(), now=now, max_periods=3)
    assert [i.period_index for i in plan.invoices] == [1, 2, 3]
    assert plan.write.current_period_end <= now  # still due: taken again by the next batch


def test_a_subscription_not_due_yet_changes_only_its_version() -> None:
    d = due()
    plan = plan_renewal(d, now=paris(2026, 2, 10), max_periods=24)
    assert plan.invoices == [] and not plan.canceled
    assert (plan.write.period_index, plan.write.version) == (0, 6)


@pytest.mark.parametrize(
    "bad",
    [
        {"tz": "Mars/Olympus_Mons"},
        {"end": paris(2026, 2, 27)},  # not the end of period 0 of the anchor
    ],
)
def test_rows_that_cannot_be_renewed_without_guessing_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(BadSubscriptionData):
        plan_renewal(due(**bad), now=paris(2026, 3, 1), max_periods=24)  # type: ignore[arg-type]


def test_planning_does_not_depend_on_anything_but_its_input() -> None:
    d, now = due(credit=300), paris(2026, 5, 3)
    assert plan_renewal(d, now=now, max_periods=24) == plan_renewal(d, now=now, max_periods=24)
