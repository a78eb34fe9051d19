"""Proration of a mid-period plan change: the old plan's unused share credited, the new plan's
charged for what is left of the period, both rounded down, integers only.

``total`` and ``remaining`` are whole seconds (``remaining = period.end - at``);
``credit = floor(old * remaining / total)``, ``charge = floor(new * remaining / total)``,
``due = charge - credit``. A negative ``due`` is credit for later invoices.

The naive product ``price * remaining`` does not fit BIGINT for large prices (10^12 minor units
times the 3.16·10^7 seconds of a leap year is about 3.2·10^19 > 2^63). :func:`mul_div_floor`
gives exactly the same result while keeping every intermediate within BIGINT, so the rule
can be reproduced in SQL or any 64-bit language without overflow:

    floor(p * r / t) = (p // t) * r + ((p % t) * r) // t      for p >= 0, 0 <= r <= t, t > 0

(``(p // t) * r <= p`` and ``(p % t) * r < t * t``.)
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from billing_core.domain.errors import ChangeOutsidePeriod, InvalidAmount
from billing_core.domain.instant import require_aware, whole_seconds
from billing_core.domain.period import Period

__all__ = ["Proration", "mul_div_floor", "prorate", "whole_seconds"]


@dataclass(frozen=True)
class Proration:
    credit: int
    charge: int
    due: int


def mul_div_floor(price: int, remaining: int, total: int) -> int:
    """``price * remaining // total`` without an intermediate larger than ``max(price, total²)``."""
    if price < 0 or total <= 0 or not 0 <= remaining <= total:
        raise ValueError("needs price >= 0, total > 0 and 0 <= remaining <= total")
    whole, rest = divmod(price, total)
    return whole * remaining + rest * remaining // total


def prorate(old_price: int, new_price: int, period: Period, at: datetime) -> Proration:
    """The proration of a change from ``old_price`` to ``new_price`` at ``at``.

    At the period start the full difference is due; at its end nothing. A change outside
    ``[period.start, period.end]`` raises :class:`ChangeOutsidePeriod`.
    """
    require_aware(at, "at")
    require_aware(period.start, "period start")
    require_aware(period.end, "period end")
    for price in (old_price, new_price):
        if isinstance(price, bool) or not isinstance(price, int) or price < 0:
            raise InvalidAmount(f"prices are non-negative integers, got {price!r}")
    if not period.start <= at <= period.end:
        raise ChangeOutsidePeriod(
            f"change at {at.isoformat()} is outside the period "
            f"{period.start.isoformat()} - {period.end.isoformat()}"
        )
    total = whole_seconds(period.end - period.start)
    if total <= 0:
        raise ChangeOutsidePeriod("the period is shorter than one second")
    remaining = min(whole_seconds(period.end - at), total)
    credit = mul_div_floor(old_price, remaining, total)
    charge = mul_div_floor(new_price, remaining, total)
    return Proration(credit=credit, charge=charge, due=charge - credit)
