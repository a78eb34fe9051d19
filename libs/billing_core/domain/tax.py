"""Taxes: the port a tax calculator plugs into, and the built-in rate-table calculator.

The port (:class:`TaxCalculator`) is given, for a batch of invoices, each one's tax location
and lines, and answers each one's lines with tax: its taxable lines (net of tax when prices
include it) followed by its ``TAX`` lines. One call per batch keeps a set-based caller
set-based; an external service (Stripe Tax, Avalara) would implement the same port, asked
before the caller's transaction, never while it holds row locks (as with the payment gateway).

:class:`RateTableCalculator` is the built-in one: a rate per country, or per country and region
(a region's rate wins over its country's), in parts per million (``200_000`` = 20 %, ``88_750``
= 8.875 %: integers only), each saying whether prices there include the tax:

* **exclusive** (e.g. US sales tax): each taxable line's tax is ``amount x rate``, rounded half
  away from zero to the minor unit, per line; the invoice grows by their sum.
* **inclusive** (e.g. EU VAT for consumers): the tax is inside the price. Per unit of each line,
  ``tax = unit x rate / (1 + rate)`` rounded the same way; the line keeps its quantity with the
  unit net of tax, so ``quantity x unit`` stays exact and the invoice total is unchanged.

Taxable lines: the plan's period, proration charges and credits, discounts (a discount lowers
the base). ``CREDIT_APPLIED`` is not: credit is a way of paying, applied after tax. The tax
lines are one per rate: the sum of the per-line taxes (never negative: a negative base is
taxed 0). No rate for a location (or no location) means no tax.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from billing_core.domain.errors import DomainError
from billing_core.domain.invoice_lines import InvoiceLine, LineKind, single
from billing_core.domain.values import value_object

PPM = 1_000_000
TAXABLE_KINDS = frozenset(
    {
        LineKind.PLAN_PERIOD,
        LineKind.PRORATION_CHARGE,
        LineKind.PRORATION_CREDIT,
        LineKind.DISCOUNT,
    }
)


class InvalidTaxRate(DomainError):
    pass


@dataclass(frozen=True, slots=True)
class TaxLocation:
    country: str  # ISO 3166-1 alpha-2
    region: str | None = None  # e.g. a US state or a Canadian province code


@dataclass(frozen=True, slots=True)
class TaxRate:
    country: str
    region: str | None
    rate_ppm: int
    inclusive: bool
    name: str  # "VAT", "Sales tax", ...

    def __post_init__(self) -> None:
        if not 0 <= self.rate_ppm < PPM:
            raise InvalidTaxRate(f"a tax rate is 0 to 100 % (ppm), not {self.rate_ppm}")

    @property
    def label(self) -> str:
        where = self.country if self.region is None else f"{self.country}-{self.region}"
        return f"{self.name} {format_rate(self.rate_ppm)} ({where})"


@dataclass(frozen=True, slots=True)
class TaxRequest:
    location: TaxLocation | None
    currency: str
    lines: Sequence[InvoiceLine]


@value_object
class TaxedLines:
    lines: list[InvoiceLine]  # the taxable lines as billed, then the others, then TAX lines
    tax: int  # the sum of the TAX lines

    @property
    def total(self) -> int:
        return sum(line.amount for line in self.lines)


class TaxCalculator(Protocol):
    def calculate(self, requests: Sequence[TaxRequest]) -> list[TaxedLines]:
        """Each request's lines with tax, in the requests' order."""
        ...


def format_rate(rate_ppm: int) -> str:
    """``200000`` -> ``20%``, ``88750`` -> ``8.875%``."""
    whole, frac = divmod(rate_ppm, PPM // 100)
    return f"{whole}%" if frac == 0 else f"{whole}.{frac:04d}".rstrip("0") + "%"


def round_div(numerator: int, denominator: int) -> int:
    """``numerator / denominator`` rounded half away from zero, in integers."""
    q, r = divmod(abs(numerator), denominator)
    q += 1 if 2 * r >= denominator else 0
    return q if numerator >= 0 else -q


def exclusive_tax(amount: int, rate_ppm: int) -> int:
    return round_div(amount * rate_ppm, PPM)


def inclusive_tax(amount: int, rate_ppm: int) -> int:
    """The tax inside a tax-inclusive ``amount``."""
    return round_div(amount * rate_ppm, PPM + rate_ppm)


def tax_lines(rate: TaxRate, lines: Sequence[InvoiceLine]) -> TaxedLines:
    """``lines`` taxed at ``rate`` (see the module's rules)."""
    billed: list[InvoiceLine] = []
    tax = 0
    for line in lines:
        if line.kind not in TAXABLE_KINDS:
            billed.append(line)
            continue
        if rate.inclusive:
            unit_tax = inclusive_tax(line.unit_amount, rate.rate_ppm)
            net_unit = line.unit_amount - unit_tax
            billed.append(replace(line, unit_amount=net_unit, amount=line.quantity * net_unit))
            tax += line.quantity * unit_tax
        else:
            billed.append(line)
            tax += exclusive_tax(line.amount, rate.rate_ppm)
    tax = max(tax, 0)
    if rate.inclusive and tax == 0:
        billed = list(lines)  # nothing carved out: the lines as they were
    taxable = [x for x in billed if x.kind in TAXABLE_KINDS]
    others = [x for x in billed if x.kind not in TAXABLE_KINDS]
    tax_line = (
        [single(LineKind.TAX, rate.label, tax, tax_inclusive=rate.inclusive)]
        if rate.rate_ppm
        else []
    )
    return TaxedLines([*taxable, *tax_line, *others], tax)


def taxed_at(rate: TaxRate | None, lines: Sequence[InvoiceLine]) -> TaxedLines:
    """``lines`` taxed at ``rate`` by the rate-table rules; unchanged without a rate."""
    return TaxedLines(list(lines), 0) if rate is None else tax_lines(rate, lines)


class RateTableCalculator:
    """The built-in calculator over a table of rates (see the module's rules)."""

    def __init__(self, rates: Iterable[TaxRate]) -> None:
        self._rates: dict[tuple[str, str | None], TaxRate] = {}
        for rate in rates:
            key = (rate.country, rate.region)
            if key in self._rates:
                raise InvalidTaxRate(f"two rates for {key}")
            self._rates[key] = rate

    def rate_for(self, location: TaxLocation | None) -> TaxRate | None:
        if location is None:
            return None
        return self._rates.get((location.country, location.region)) or self._rates.get(
            (location.country, None)
        )

    def calculate(self, requests: Sequence[TaxRequest]) -> list[TaxedLines]:
        out: list[TaxedLines] = []
        for request in requests:
            rate = self.rate_for(request.location)
            if rate is None:
                out.append(TaxedLines(list(request.lines), 0))
            else:
                out.append(tax_lines(rate, request.lines))
        return out
