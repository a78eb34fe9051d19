"""The rate-table tax calculator: exclusive and inclusive prices, rounding per line."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from billing_core.domain import invoice_lines as il
from billing_core.domain.invoice_lines import InvoiceLine, LineKind
from billing_core.domain.tax import (
    InvalidTaxRate,
    RateTableCalculator,
    TaxLocation,
    TaxRate,
    TaxRequest,
    format_rate,
    round_div,
)

START = datetime(2026, 1, 1, tzinfo=UTC)
END = datetime(2026, 2, 1, tzinfo=UTC)
RATES = [
    TaxRate("FR", None, 200_000, inclusive=True, name="VAT"),
    TaxRate("US", None, 0, inclusive=False, name="Sales tax"),
    TaxRate("US", "NY", 88_750, inclusive=False, name="Sales tax"),
]
CALC = RateTableCalculator(RATES)


def taxed(location: TaxLocation | None, lines: list[InvoiceLine]) -> il.InvoiceLine | None:
    [result] = CALC.calculate([TaxRequest(location, "EUR", lines)])
    found = [x for x in result.lines if x.kind == LineKind.TAX]
    return found[0] if found else None


def test_exclusive_tax_is_added_on_top_rounded_per_line() -> None:
    lines = [
        il.single(LineKind.PLAN_PERIOD, "Plan PRO", 2990, START, END),
        il.single(LineKind.PRORATION_CHARGE, "Rest of BIZ", 1005, START, END),
    ]
    [result] = CALC.calculate([TaxRequest(TaxLocation("US", "NY"), "USD", lines)])
    # 2990 x 8.875 % = 265.3625 -> 265; 1005 x 8.875 % = 89.19375 -> 89 (per line, then summed)
    assert result.tax == 265 + 89
    assert result.lines[:2] == lines  # exclusive: the lines are billed as priced
    assert (result.lines[2].kind, result.lines[2].description) == (
        LineKind.TAX,
        "Sales tax 8.875% (US-NY)",
    )
    assert result.total == 2990 + 1005 + 354


def test_inclusive_tax_is_carved_out_of_each_unit_and_the_total_is_unchanged() -> None:
    lines = [
        InvoiceLine(LineKind.PLAN_PERIOD, "3 seats", 3, 1000, 3000, START, END),
        *il.credit_line(500),
    ]
    [result] = CALC.calculate([TaxRequest(TaxLocation("FR"), "EUR", lines)])
    # 1000 incl. 20 %: tax 166.67 -> 167 per seat; net 833 per seat
    seats, tax, credit = result.lines
    assert (seats.quantity, seats.unit_amount, seats.amount) == (3, 833, 2499)
    assert (tax.kind, tax.amount, tax.description) == (LineKind.TAX, 501, "VAT 20% (FR)")
    assert credit.kind == LineKind.CREDIT_APPLIED  # credit is not taxed, it pays
    assert result.total == 3000 - 500


def test_a_region_without_its_own_rate_takes_its_country_and_no_rate_means_no_tax() -> None:
    plan = [il.single(LineKind.PLAN_PERIOD, "Plan", 1000)]
    assert CALC.rate_for(TaxLocation("FR", "75")) == RATES[0]
    assert taxed(TaxLocation("US", "OR"), plan) is None  # 0 %: no tax line
    assert taxed(TaxLocation("DE"), plan) is None
    assert taxed(None, plan) is None


def test_a_discount_lowers_the_taxable_base() -> None:
    lines = [
        il.single(LineKind.PLAN_PERIOD, "Plan", 10_000),
        il.single(LineKind.DISCOUNT, "10 % off", -1_000),
    ]
    tax = taxed(TaxLocation("US", "NY"), lines)
    assert tax is not None and tax.amount == 888 - 89  # 887.5 -> 888, -88.75 -> -89


def test_rates_are_checked() -> None:
    with pytest.raises(InvalidTaxRate):
        TaxRate("FR", None, 1_000_000, inclusive=True, name="VAT")
    with pytest.raises(InvalidTaxRate, match="two rates"):
        RateTableCalculator([RATES[0], RATES[0]])


def test_rates_and_rounding_in_integers() -> None:
    assert [format_rate(r) for r in (200_000, 88_750, 55_000, 0)] == [
        "20%",
        "8.875%",
        "5.5%",
        "0%",
    ]
    assert [round_div(n, 10) for n in (14, 15, -15, -14, 0)] == [1, 2, -2, -1, 0]


@given(
    units=st.lists(st.tuples(st.integers(1, 5), st.integers(0, 10**6)), min_size=1, max_size=4),
    credit=st.integers(0, 10**6),
    rate=st.integers(0, 999_999),
    inclusive=st.booleans(),
)
def test_taxed_invoices_are_still_the_sum_of_their_lines(
    units: list[tuple[int, int]], credit: int, rate: int, inclusive: bool
) -> None:
    lines = [InvoiceLine(LineKind.PLAN_PERIOD, "p", q, u, q * u) for q, u in units]
    credit = min(credit, sum(x.amount for x in lines))
    lines += il.credit_line(credit)
    calc = RateTableCalculator([TaxRate("XX", None, rate, inclusive=inclusive, name="T")])
    [result] = calc.calculate([TaxRequest(TaxLocation("XX"), "EUR", lines)])
    before = sum(x.amount for x in lines)
    assert result.total == (before if inclusive else before + result.tax)
    assert result.tax >= 0
    for line in result.lines:  # every line still quantity x unit, of its kind's sign
        assert line.amount == line.quantity * line.unit_amount
    subtotal = result.total + credit
    il.check_total(result.lines, subtotal=subtotal, credit_applied=credit, amount=result.total)
