"""The rule of a plan change to another billing interval (billing_core.domain.interval_change),
and the renewal planner counting periods from a moved anchor."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from billing_core.domain.coupons import Coupon, Discount, Duration, discounted
from billing_core.domain.errors import ChangeOutsidePeriod, SubscriptionCanceledError
from billing_core.domain.interval_change import (
    CurrentPeriod,
    PeriodStartsNow,
    change_interval,
    unused_credit,
)
from billing_core.domain.period import Interval, period_bounds
from billing_core.domain.renewal import DueSubscription, plan_renewal
from billing_core.domain.subscription import SubscriptionState, SubscriptionStatus

MONTHLY, YEARLY = 1_000, 10_000
ZONES = ["UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"]


def _state(
    plan: str = "BASIC_MONTHLY", status: SubscriptionStatus = SubscriptionStatus.ACTIVE
) -> SubscriptionState:
    return SubscriptionState(
        id=7, status=status, cancel_at_period_end=False, plan_code=plan, version=3
    )


def _current(anchor: datetime, interval: Interval, n: int, price: int, tz: str) -> CurrentPeriod:
    return CurrentPeriod(n, period_bounds(anchor, interval, n, tz), price, tz)


ANCHOR = datetime(2026, 1, 31, 9, 30, tzinfo=UTC)


def test_a_change_to_yearly_moves_the_anchor_and_credits_the_unused_part() -> None:
    current = _current(ANCHOR, Interval.MONTH, 2, MONTHLY, "UTC")  # Mar 31 .. Apr 30
    at = datetime(2026, 4, 15, 9, 30, tzinfo=UTC)
    change = change_interval(
        _state(),
        current,
        new_plan_code="BASIC_YEARLY",
        new_price=YEARLY,
        new_interval=Interval.YEAR,
        at=at,
    )
    assert change.anchor == at and change.anchor_period_index == 3
    assert change.new_period.start == at
    assert change.new_period.end == datetime(2027, 4, 15, 9, 30, tzinfo=UTC)
    # 15 of the period's 30 days are unused: half of what it cost.
    assert change.credit == MONTHLY // 2
    assert change.new_period_price == YEARLY
    assert change.net == YEARLY - MONTHLY // 2
    assert change.state.plan_code == "BASIC_YEARLY" and change.state.version == 4
    (event,) = change.events
    payload = event.payload
    assert payload["prorationDue"] == -(MONTHLY // 2)
    assert payload["newPeriodStart"] == "2026-04-15T09:30:00Z"
    assert payload["newPeriodEnd"] == "2027-04-15T09:30:00Z"
    assert payload["effective"] == "now"


def test_proration_none_credits_nothing() -> None:
    current = _current(ANCHOR, Interval.MONTH, 0, MONTHLY, "UTC")
    change = change_interval(
        _state(),
        current,
        new_plan_code="BASIC_YEARLY",
        new_price=YEARLY,
        new_interval=Interval.YEAR,
        at=ANCHOR + timedelta(days=3),
        credit_unused=False,
    )
    assert change.credit == 0 and change.net == YEARLY


def test_a_change_at_the_period_start_or_outside_the_period_is_refused() -> None:
    current = _current(ANCHOR, Interval.MONTH, 1, MONTHLY, "UTC")
    kwargs = {"new_plan_code": "BASIC_YEARLY", "new_price": YEARLY, "new_interval": Interval.YEAR}
    with pytest.raises(PeriodStartsNow):
        change_interval(_state(), current, at=current.period.start, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ChangeOutsidePeriod):
        change_interval(_state(), current, at=current.period.end, **kwargs)  # type: ignore[arg-type]
    canceled = _state(status=SubscriptionStatus.CANCELED)
    with pytest.raises(SubscriptionCanceledError):
        change_interval(canceled, current, at=current.period.start + timedelta(1), **kwargs)  # type: ignore[arg-type]


def test_the_credit_is_taken_at_the_discounted_price_and_the_new_period_discounted_by_index() -> (
    None
):
    coupon = Coupon("HALF", Duration.REPEATING, percent_off_bp=5_000, duration_periods=2)
    discount = Discount(coupon, from_period=0, until_period=2)
    current = _current(ANCHOR, Interval.MONTH, 0, MONTHLY, "UTC")  # Jan 31 .. Feb 28: 28 days
    at = ANCHOR + timedelta(days=14)
    change = change_interval(
        _state(),
        current,
        new_plan_code="BASIC_YEARLY",
        new_price=YEARLY,
        new_interval=Interval.YEAR,
        at=at,
        discount=discount,
    )
    assert change.credit == (MONTHLY // 2) // 2  # half unused, of the half price paid
    assert change.new_period_price == YEARLY // 2  # period 1 is still covered


instants = st.datetimes(
    min_value=datetime(2020, 1, 1), max_value=datetime(2035, 1, 1), timezones=st.just(UTC)
)
prices = st.integers(min_value=0, max_value=10**12)
percent = st.one_of(st.none(), st.integers(min_value=1, max_value=10_000))


def _discount(bp: int | None) -> Discount | None:
    if bp is None:
        return None
    return Discount(Coupon("C", Duration.FOREVER, percent_off_bp=bp), 0, None)


@given(
    instants,
    st.sampled_from(ZONES),
    st.sampled_from(list(Interval)),
    st.integers(min_value=0, max_value=40),
    prices,
    percent,
    st.floats(min_value=0, max_value=1, exclude_max=True),
)
def test_the_credit_never_exceeds_what_the_period_cost(
    anchor: datetime,
    tz: str,
    interval: Interval,
    n: int,
    price: int,
    bp: int | None,
    fraction: float,
) -> None:
    current = _current(anchor, interval, n, price, tz)
    length = current.period.end - current.period.start
    at = current.period.start + timedelta(seconds=int(length.total_seconds() * fraction))
    discount = _discount(bp)
    credit = unused_credit(current, at, discount)
    paid = discounted(discount, price, n)
    assert 0 <= credit <= paid
    if at == current.period.start:
        assert credit == paid  # nothing used: all of it back


@given(
    instants,
    st.sampled_from(ZONES),
    st.sampled_from([(Interval.MONTH, Interval.YEAR), (Interval.YEAR, Interval.MONTH)]),
    st.integers(min_value=0, max_value=30),
    st.integers(min_value=1, max_value=10**12),
    st.integers(min_value=0, max_value=10**12),
    st.floats(min_value=0, max_value=1, exclude_min=True, exclude_max=True),
    st.integers(min_value=1, max_value=30),
)
def test_periods_after_a_change_are_contiguous_from_the_change(
    anchor: datetime,
    tz: str,
    intervals: tuple[Interval, Interval],
    n: int,
    old_price: int,
    new_price: int,
    fraction: float,
    later: int,
) -> None:
    old_interval, new_interval = intervals
    current = _current(anchor, old_interval, n, old_price, tz)
    length = current.period.end - current.period.start
    at = current.period.start + timedelta(seconds=max(1, int(length.total_seconds() * fraction)))
    if at >= current.period.end:
        return
    change = change_interval(
        _state(),
        current,
        new_plan_code="NEW",
        new_price=new_price,
        new_interval=new_interval,
        at=at,
    )
    # The old period is used up to the change and credited from it: the new one starts there.
    assert change.new_period.start == at
    assert change.anchor_period_index == n + 1
    # Counted from the new anchor, each period starts where the one before ended.
    previous = change.new_period
    for k in range(1, later):
        following = period_bounds(change.anchor, new_interval, k, tz)
        assert following.start == previous.end
        assert following.end > following.start
        previous = following


@given(
    instants,
    st.sampled_from(ZONES),
    st.integers(min_value=0, max_value=30),
    st.integers(min_value=0, max_value=10**12),
    st.integers(min_value=0, max_value=10**12),
    percent,
    st.floats(min_value=0, max_value=1, exclude_min=True, exclude_max=True),
)
def test_monthly_yearly_monthly_at_one_instant_is_one_restart_of_the_monthly_period(
    anchor: datetime,
    tz: str,
    n: int,
    monthly: int,
    yearly: int,
    bp: int | None,
    fraction: float,
) -> None:
    """The A -> B -> A rule: the yearly period in between is credited in full (none of it was
    used), so the pair nets to the monthly period restarted at the change less the unused part
    of the first one — what a single change that restarts the monthly period there costs."""
    discount = _discount(bp)
    current = _current(anchor, Interval.MONTH, n, monthly, tz)
    length = current.period.end - current.period.start
    at = current.period.start + timedelta(seconds=max(1, int(length.total_seconds() * fraction)))
    if at >= current.period.end:
        return
    to_yearly = change_interval(
        _state(),
        current,
        new_plan_code="BASIC_YEARLY",
        new_price=yearly,
        new_interval=Interval.YEAR,
        at=at,
        discount=discount,
    )
    yearly_period = CurrentPeriod(to_yearly.anchor_period_index, to_yearly.new_period, yearly, tz)
    # Back at the same instant: the yearly period starts now, nothing of it was used. The
    # system refuses a second new period starting at the same instant (PeriodStartsNow) ...
    with pytest.raises(PeriodStartsNow):
        change_interval(
            to_yearly.state,
            yearly_period,
            new_plan_code="BASIC_MONTHLY",
            new_price=monthly,
            new_interval=Interval.MONTH,
            at=at,
            discount=discount,
        )
    # ... and its credit, were it taken then, is all of what the yearly period cost:
    back_credit = unused_credit(yearly_period, at, discount)
    assert back_credit == to_yearly.new_period_price
    restart_price = discounted(discount, monthly, to_yearly.anchor_period_index + 1)
    net = to_yearly.net - back_credit + restart_price
    assert net == restart_price - unused_credit(current, at, discount)
    # A second later the change back is allowed and costs no more than that (a second used).
    back = change_interval(
        to_yearly.state,
        yearly_period,
        new_plan_code="BASIC_MONTHLY",
        new_price=monthly,
        new_interval=Interval.MONTH,
        at=at + timedelta(seconds=1),
        discount=discount,
    )
    assert back.credit <= back_credit
    assert back.new_period.start == at + timedelta(seconds=1)


def _due(**changes: object) -> DueSubscription:
    values: dict[str, object] = {
        "state": _state("BASIC_YEARLY"),
        "customer_id": 1,
        "time_zone": "Europe/Paris",
        "billing_anchor": datetime(2026, 4, 15, 7, 30, tzinfo=UTC),
        "period_index": 3,
        "anchor_period_index": 3,
        "current_period_start": datetime(2026, 4, 15, 7, 30, tzinfo=UTC),
        "current_period_end": datetime(2027, 4, 15, 7, 30, tzinfo=UTC),
        "credit_balance": 0,
        "price_amount": YEARLY,
        "currency": "EUR",
        "billing_interval": "YEAR",
    }
    values.update(changes)
    return DueSubscription(**values)  # type: ignore[arg-type]


def test_the_planner_counts_periods_from_the_moved_anchor() -> None:
    due = _due()
    plan = plan_renewal(due, now=datetime(2027, 4, 16, tzinfo=UTC), max_periods=24)
    (invoice,) = plan.invoices
    assert invoice.period_index == 4
    assert invoice.period_start == datetime(2027, 4, 15, 7, 30, tzinfo=UTC)
    assert invoice.period_end == datetime(2028, 4, 15, 7, 30, tzinfo=UTC)
    assert plan.write.billing_anchor == due.billing_anchor
    assert plan.write.anchor_period_index == 3


def test_a_scheduled_change_to_monthly_moves_the_anchor_to_the_boundary() -> None:
    due = _due(
        state=SubscriptionState(
            id=7,
            status=SubscriptionStatus.ACTIVE,
            cancel_at_period_end=False,
            plan_code="BASIC_YEARLY",
            version=3,
            scheduled_plan_code="BASIC_MONTHLY",
        ),
        scheduled_price_amount=MONTHLY,
        scheduled_billing_interval="MONTH",
    )
    boundary = due.current_period_end
    plan = plan_renewal(due, now=boundary + timedelta(days=65), max_periods=24)
    # The boundary starts period 4, the first monthly one; then two more months.
    assert [i.period_index for i in plan.invoices] == [4, 5, 6]
    assert [i.subtotal for i in plan.invoices] == [MONTHLY] * 3
    starts = [i.period_start for i in plan.invoices]
    ends = [i.period_end for i in plan.invoices]
    assert starts[0] == boundary and starts[1:] == ends[:-1]
    assert ends[0] == datetime(2027, 5, 15, 7, 30, tzinfo=UTC)
    assert plan.write.billing_anchor == boundary and plan.write.anchor_period_index == 4
    assert plan.write.plan_changed
    (changed,) = [e for e in plan.leading_events if e.type == "SubscriptionPlanChanged"]
    payload = changed.payload
    assert payload["effective"] == "period_end"
    assert payload["newPeriodStart"] == "2027-04-15T07:30:00Z"
    assert payload["newPeriodEnd"] == "2027-05-15T07:30:00Z"
