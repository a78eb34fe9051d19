"""Proration of a mid-period plan change — the article's rule, integers only.

``total`` and ``remaining`` are whole seconds; ``credit = floor(old * remaining / total)``,
``charge = floor(new * remaining / total)``, ``due = charge - credit`` (multiply before dividing).
A negative ``due`` is credit for later invoices.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from billing_core.domain.errors import ChangeOutsidePeriod, InvalidAmount
from billing_core.domain.period import Period, require_aware


@dataclass(frozen=True)
class Proration:
    credit: int
    charge: int
    due: int


def whole_seconds(delta: timedelta) -> int:
    return delta.days * 86_400 + delta.seconds


def prorate(old_price: int, new_price: int, period: Period, at: datetime) -> Proration:
    require_aware(at, "at")
    if old_price < 0 or new_price < 0:
        raise InvalidAmount("prices must not be negative")
    if not period.start <= at <= period.end:
        raise ChangeOutsidePeriod(
            f"change at {at.isoformat()} is outside the period "
            f"{period.start.isoformat()} - {period.end.isoformat()}"
        )
    total = whole_seconds(period.end - period.start)
    remaining = whole_seconds(period.end - at)
    if total <= 0:
        raise ChangeOutsidePeriod("the period is empty")
    credit = old_price * remaining // total
    charge = new_price * remaining // total
    return Proration(credit=credit, charge=charge, due=charge - credit)
