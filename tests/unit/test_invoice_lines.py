"""Invoice line items: every builder's lines sum to the invoice's figures, signs by kind."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from billing_core.domain import invoice_lines as lines
from billing_core.domain.invoice_lines import InvoiceLine, InvoiceTotalMismatch, LineKind
from billing_core.domain.period import Period
from billing_core.domain.proration import prorate

START = datetime(2026, 1, 1, tzinfo=UTC)
END = datetime(2026, 2, 1, tzinfo=UTC)


def test_a_period_with_credit_is_a_plan_line_and_a_negative_credit_line() -> None:
    found = lines.period_lines("PRO", 2990, START, END, 1000)
    assert [(x.kind, x.amount) for x in found] == [
        (LineKind.PLAN_PERIOD, 2990),
        (LineKind.CREDIT_APPLIED, -1000),
    ]
    lines.check_total(found, subtotal=2990, credit_applied=1000, amount=1990)


def test_figures_that_are_not_the_lines_sums_are_refused() -> None:
    found = lines.period_lines("PRO", 2990, START, END, 0)
    with pytest.raises(InvoiceTotalMismatch, match="lines sum to amount 2990"):
        lines.check_total(found, subtotal=2990, credit_applied=0, amount=2000)
    with pytest.raises(InvoiceTotalMismatch, match="credit"):
        lines.check_total(found, subtotal=3990, credit_applied=1000, amount=2990)
    with pytest.raises(InvoiceTotalMismatch, match="at least one line"):
        lines.check_total([], subtotal=0, credit_applied=0, amount=0)


@pytest.mark.parametrize(
    ("kind", "amount"),
    [
        (LineKind.PLAN_PERIOD, -1),
        (LineKind.TAX, -5),
        (LineKind.CREDIT_APPLIED, 10),
        (LineKind.DISCOUNT, 1),
        (LineKind.PRORATION_CREDIT, 3),
    ],
)
def test_a_line_of_the_wrong_sign_for_its_kind_is_refused(kind: LineKind, amount: int) -> None:
    tax_inclusive = False if kind == LineKind.TAX else None
    with pytest.raises(InvoiceTotalMismatch, match="cannot be"):
        lines.single(kind, "x", amount, tax_inclusive=tax_inclusive)


def test_only_a_tax_line_says_whether_its_tax_is_inclusive() -> None:
    assert lines.single(LineKind.TAX, "VAT", 20, tax_inclusive=True).tax_inclusive
    with pytest.raises(InvoiceTotalMismatch, match="TAX line"):
        lines.single(LineKind.TAX, "VAT", 20)
    with pytest.raises(InvoiceTotalMismatch, match="TAX line"):
        lines.single(LineKind.PLAN_PERIOD, "Plan", 20, tax_inclusive=False)


def test_a_line_is_quantity_times_unit_amount() -> None:
    assert InvoiceLine(LineKind.PLAN_PERIOD, "seats", 3, 500, 1500).amount == 1500
    with pytest.raises(InvoiceTotalMismatch, match="1400 != 3 x 500"):
        InvoiceLine(LineKind.PLAN_PERIOD, "seats", 3, 500, 1400)
    with pytest.raises(InvoiceTotalMismatch, match="quantity"):
        InvoiceLine(LineKind.PLAN_PERIOD, "seats", 0, 500, 0)


@given(
    old=st.integers(0, 10**7),
    new=st.integers(0, 10**7),
    left=st.integers(1, 31 * 86400 - 1),
    balance=st.integers(0, 10**7),
)
def test_proration_lines_sum_to_the_proration_invoice(
    old: int, new: int, left: int, balance: int
) -> None:
    at = END.fromtimestamp(END.timestamp() - left, UTC)
    p = prorate(old, new, Period(START, END), at)
    if p.due <= 0:
        return  # no invoice: a downgrade becomes credit
    credit = min(balance, p.due)
    found = lines.proration_lines("OLD", "NEW", p, at, END, credit)
    lines.check_total(found, subtotal=p.due, credit_applied=credit, amount=p.due - credit)
