"""A plan change to another billing interval (monthly <-> yearly): a new period starts at the
change — Stripe's rule for changing a subscription to a price with another interval.

The rule, for a change at ``at`` inside the current period ``n`` = ``[start, end)``:

* **The anchor moves to the change.** The subscription's billing anchor becomes ``at`` (its
  local time of day in the subscription's zone included) and period ``n + 1`` starts there:
  ``[at, at + one new interval)``, each later period computed from the new anchor
  (:mod:`billing_core.domain.period`; ``anchor_period_index = n + 1`` says which period starts
  at the anchor). Period indexes keep counting up: every period keeps its one renewal invoice,
  and the periods after the change are contiguous (no gap, no overlap).
* **The unused part of period n is credited**, with the proration rule and rounding of every
  plan change (:func:`billing_core.domain.proration.prorate`: ``floor(paid * remaining /
  total)`` in whole seconds), at what the period cost: the old price less the coupon's discount
  when the subscription's discount covered period ``n``
  (:func:`billing_core.domain.coupons.discounted`). It never exceeds what the period cost.
  The credit goes to the subscription's balance before tax, as a downgrade's credit does.
  ``prorationBehavior: none``: no credit (the rest of period ``n`` is given up).
* **The new period is invoiced in full at once**: its RENEWAL invoice (index ``n + 1``, the new
  plan's price less the coupon's discount when it covers ``n + 1``, taxed like any renewal),
  which takes the credit balance first — the credit just granted included — and is collected
  like any other renewal.

So, with ``credit(p, at)`` the unused part of a period that cost ``p``: a change costs
``new - credit(old, at)`` (before tax). **A -> B -> A at one instant** (say monthly -> yearly
-> monthly at ``at``) is one restart of the monthly period at ``at``: the yearly period is
credited in full (none of it was used: ``credit = price``) and the pair nets to
``monthly - credit(monthly, at)``, exactly what a single change that restarts the monthly
period at ``at`` would cost — no time is paid twice and none is given away.

A change at the very instant the current period starts (nothing of it used, as for a second
change at the same instant) would start a new period where one already starts: that is refused
(:class:`PeriodStartsNow`); the period already runs at the plan chosen for it.

A change scheduled for the period end (``effective: period_end``) moves the anchor to the
period boundary instead, where the renewer applies it (:mod:`billing_core.domain.renewal`):
nothing is credited, the period starting there is the first one at the new interval.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from billing_core.domain.coupons import Discount, discounted
from billing_core.domain.errors import ChangeOutsidePeriod, IllegalTransition
from billing_core.domain.events import DomainEvent
from billing_core.domain.instant import require_aware
from billing_core.domain.period import Interval, Period, period_bounds
from billing_core.domain.proration import prorate
from billing_core.domain.subscription import SubscriptionState, change_plan


class PeriodStartsNow(IllegalTransition):
    """A change to another interval at the instant the current period starts."""


@dataclass(frozen=True)
class CurrentPeriod:
    """Where a subscription is: its current period ``index`` and bounds, what that period cost
    before tax (``price``: its plan's price; the coupon comes off as ``discount`` says), and
    its zone."""

    index: int
    period: Period
    price: int
    time_zone: str


@dataclass(frozen=True)
class IntervalChange:
    """The outcome of an interval change at ``at``."""

    state: SubscriptionState
    events: list[DomainEvent]
    # The new anchor and the period that starts there (index ``anchor_period_index``).
    anchor: datetime
    anchor_period_index: int
    new_period: Period
    # The unused part of the current period, for the credit balance (0 with no proration).
    credit: int
    # The new period's price before tax: the new plan's, less the discount covering it.
    new_period_price: int

    @property
    def net(self) -> int:
        """What the change costs before tax: the new period less the credit (negative: credit
        left on the balance)."""
        return self.new_period_price - self.credit


def unused_credit(current: CurrentPeriod, at: datetime, discount: Discount | None = None) -> int:
    """The unused part of the current period at ``at``, at what it cost (the proration rule:
    ``floor(paid * remaining / total)``); never more than it cost."""
    paid = discounted(discount, current.price, current.index)
    return prorate(paid, 0, current.period, at).credit


def change_interval(
    state: SubscriptionState,
    current: CurrentPeriod,
    *,
    new_plan_code: str,
    new_price: int,
    new_interval: Interval,
    at: datetime,
    discount: Discount | None = None,
    credit_unused: bool = True,
) -> IntervalChange:
    """Change ``state`` to ``new_plan_code`` (billed every ``new_interval`` at ``new_price``)
    at ``at``, starting a new period there (see the module's rule). ``credit_unused`` False
    (``prorationBehavior: none``): nothing is credited. Raises :class:`PeriodStartsNow` at the
    period's first instant, ``ChangeOutsidePeriod`` outside it, and what
    :func:`billing_core.domain.subscription.change_plan` raises (a canceled subscription)."""
    require_aware(at, "at")
    if not current.period.start <= at < current.period.end:
        raise ChangeOutsidePeriod(
            f"change at {at.isoformat()} is outside the current period "
            f"{current.period.start.isoformat()} - {current.period.end.isoformat()}"
        )
    if at == current.period.start:
        raise PeriodStartsNow(
            f"the current period starts at {at.isoformat()}: a plan with another interval "
            "cannot start a new period at the same instant (change it a moment later)"
        )
    credit = unused_credit(current, at, discount) if credit_unused else 0
    index = current.index + 1
    new_period = period_bounds(at, new_interval, 0, current.time_zone)
    new_state, events = change_plan(
        state, new_plan_code, at, proration_due=-credit, new_period=new_period
    )
    return IntervalChange(
        state=new_state,
        events=events,
        anchor=at,
        anchor_period_index=index,
        new_period=new_period,
        credit=credit,
        new_period_price=discounted(discount, new_price, index),
    )
