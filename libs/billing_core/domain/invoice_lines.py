"""Invoice line items: what an invoice is made of, and the rule that its total is their sum.

An invoice's ``amount`` (what the gateway is asked to charge) is the sum of its lines' amounts;
its ``credit_applied`` is minus the sum of its ``CREDIT_APPLIED`` lines, so its ``subtotal``
(before credit) is the sum of every other line. Charges are positive lines, reductions negative:

* ``PLAN_PERIOD`` — one period of the plan (renewals, a new subscription's first period);
* ``PRORATION_CHARGE`` / ``PRORATION_CREDIT`` — a plan change: the rest of the period on the
  new plan, and the unused rest on the old one (negative);
* ``DISCOUNT`` (negative) and ``TAX`` (positive) — kinds reserved for coupons and taxes;
* ``CREDIT_APPLIED`` (negative) — the subscription's credit balance the invoice consumed.

Every line is ``quantity`` x ``unit_amount`` = ``amount`` in the invoice's currency (minor
units). :func:`check_total` is the rule; the writers call it before they write, the database
statement that writes lines verifies it again in the same transaction, and the invariant
checker verifies it for every invoice.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum

from billing_core.domain.errors import DomainError
from billing_core.domain.proration import Proration
from billing_core.domain.values import value_object


class LineKind(StrEnum):
    PLAN_PERIOD = "PLAN_PERIOD"
    PRORATION_CHARGE = "PRORATION_CHARGE"
    PRORATION_CREDIT = "PRORATION_CREDIT"
    DISCOUNT = "DISCOUNT"
    TAX = "TAX"
    CREDIT_APPLIED = "CREDIT_APPLIED"


# Kinds whose amount is never positive (they reduce what is owed); the others are never negative.
REDUCING_KINDS = frozenset({LineKind.PRORATION_CREDIT, LineKind.DISCOUNT, LineKind.CREDIT_APPLIED})


class InvoiceTotalMismatch(DomainError):
    """An invoice's amount or credit is not what its lines add up to."""


@value_object
class InvoiceLine:
    kind: LineKind
    description: str
    quantity: int
    unit_amount: int
    amount: int
    period_start: datetime | None = None
    period_end: datetime | None = None
    # TAX lines only: whether the tax is inside the taxed lines' prices (they are net of it)
    # or was added on top of them.
    tax_inclusive: bool | None = None

    def __post_init__(self) -> None:
        if self.quantity < 1:
            raise InvoiceTotalMismatch(f"a line's quantity is at least 1, not {self.quantity}")
        if self.amount != self.quantity * self.unit_amount:
            raise InvoiceTotalMismatch(
                f"line amount {self.amount} != {self.quantity} x {self.unit_amount}"
            )
        if (self.kind == LineKind.TAX) != (self.tax_inclusive is not None):
            raise InvoiceTotalMismatch("a TAX line, and only one, says whether it is inclusive")
        reducing = self.kind in REDUCING_KINDS
        if (reducing and self.amount > 0) or (not reducing and self.amount < 0):
            raise InvoiceTotalMismatch(f"a {self.kind} line cannot be {self.amount}")


def single(
    kind: LineKind,
    description: str,
    amount: int,
    period_start: datetime | None = None,
    period_end: datetime | None = None,
    *,
    tax_inclusive: bool | None = None,
) -> InvoiceLine:
    """A line of quantity 1."""
    return InvoiceLine(
        kind, description, 1, amount, amount, period_start, period_end, tax_inclusive
    )


def plan_period_description(plan_code: str) -> str:
    return f"Plan {plan_code}"


def credit_line(credit_applied: int) -> list[InvoiceLine]:
    """The credit an invoice consumed, as a negative line (none when no credit was used)."""
    if credit_applied == 0:
        return []
    return [single(LineKind.CREDIT_APPLIED, "Credit applied", -credit_applied)]


def period_lines(
    plan_code: str,
    price: int,
    period_start: datetime,
    period_end: datetime,
    credit_applied: int,
) -> list[InvoiceLine]:
    """A period of a plan (a renewal or a first invoice), less the credit it consumed."""
    plan = single(
        LineKind.PLAN_PERIOD,
        plan_period_description(plan_code),
        price,
        period_start,
        period_end,
    )
    return [plan, *credit_line(credit_applied)]


def proration_lines(
    old_plan_code: str,
    new_plan_code: str,
    proration: Proration,
    period_start: datetime,
    period_end: datetime,
    credit_applied: int,
) -> list[InvoiceLine]:
    """A plan change at ``period_start`` for the rest of the period: the new plan's charge, the
    old plan's unused time returned, and the credit the invoice consumed."""
    lines = [
        single(
            LineKind.PRORATION_CHARGE,
            f"Remaining time on plan {new_plan_code}",
            proration.charge,
            period_start,
            period_end,
        )
    ]
    if proration.credit:
        lines.append(
            single(
                LineKind.PRORATION_CREDIT,
                f"Unused time on plan {old_plan_code}",
                -proration.credit,
                period_start,
                period_end,
            )
        )
    return lines + credit_line(credit_applied)


def total(lines: Sequence[InvoiceLine]) -> int:
    return sum(line.amount for line in lines)


def credit_total(lines: Sequence[InvoiceLine]) -> int:
    """The credit the lines consume (positive)."""
    return -sum(line.amount for line in lines if line.kind == LineKind.CREDIT_APPLIED)


def check_total(
    lines: Sequence[InvoiceLine], *, subtotal: int, credit_applied: int, amount: int
) -> None:
    """Raise :class:`InvoiceTotalMismatch` unless the invoice's figures are its lines' sums."""
    if not lines:
        raise InvoiceTotalMismatch("an invoice has at least one line")
    got_credit = credit_total(lines)
    got_amount = total(lines)
    if (got_amount, got_credit, got_amount + got_credit) != (
        amount,
        credit_applied,
        subtotal,
    ):
        raise InvoiceTotalMismatch(
            f"invoice subtotal {subtotal}, credit {credit_applied}, amount {amount}; "
            f"its lines sum to amount {got_amount} with credit {got_credit}"
        )
