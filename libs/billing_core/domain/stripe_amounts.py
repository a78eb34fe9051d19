"""Stripe's amounts against ours (pure): our amounts are ISO 4217 minor units
(:func:`billing_core.domain.money.minor_unit_digits`), Stripe's follow its own rules.

* BIF CLP DJF GNF JPY KMF KRW PYG RWF VND VUV XAF XOF XPF (ISO: 0 digits): the same
  (zero-decimal).
* MGA (ISO: 2 digits): zero-decimal at Stripe, so whole ariary only: ours / 100.
* ISK UGX (ISO: 0 digits): two decimals at Stripe, always 00: ours * 100.
* BHD JOD KWD OMR TND (ISO: 3 digits): the same, a multiple of 10.
* HUF TWD, and every other two-digit currency: the same (Stripe's zero-decimal rule for HUF and
  TWD is about payouts).
* Any other (IQD, LYD, UYI, ...): Stripe's unit for it is not known.

Refused means never sent: the invoice cannot be charged exactly through Stripe, and a person
decides (another price, or another gateway)."""

from __future__ import annotations

from dataclasses import dataclass

from billing_core.domain.errors import DomainError
from billing_core.domain.money import format_minor, minor_unit_digits

_ZERO_DECIMAL = frozenset("BIF CLP DJF GNF JPY KMF KRW MGA PYG RWF VND VUV XAF XOF XPF".split())
_WHOLE_IN_TWO_DECIMALS = frozenset({"ISK", "UGX"})
_THREE_DECIMAL = frozenset({"BHD", "JOD", "KWD", "OMR", "TND"})


class NotBillableAtStripe(DomainError):
    """An amount Stripe cannot charge exactly, or a currency whose Stripe unit is not known."""


@dataclass(frozen=True)
class StripeUnit:
    digits: int  # Stripe's decimal digits for the currency
    step: int = 1  # Stripe's amounts are multiples of this


def stripe_unit(currency: str) -> StripeUnit | None:
    """How Stripe writes amounts of ``currency``; None when not known."""
    if currency in _ZERO_DECIMAL:
        return StripeUnit(0)
    if currency in _WHOLE_IN_TWO_DECIMALS:
        return StripeUnit(2, step=100)
    if currency in _THREE_DECIMAL:
        return StripeUnit(3, step=10)
    return StripeUnit(2) if minor_unit_digits(currency) == 2 else None


def to_stripe(amount: int, currency: str) -> int:
    """Our ``amount`` of ``currency`` as Stripe's ``amount``; ``NotBillableAtStripe`` when it
    has none."""
    unit = stripe_unit(currency)
    if unit is None:
        raise NotBillableAtStripe(
            f"Stripe cannot charge {format_minor(amount, currency)} exactly (its unit for"
            f" {currency} is not known)"
        )
    shift = unit.digits - minor_unit_digits(currency)
    if shift >= 0:
        converted, rest = amount * _power(shift), 0
    else:
        converted, rest = divmod(amount, _power(-shift))
    if rest or converted % unit.step:
        raise NotBillableAtStripe(
            f"Stripe cannot charge {format_minor(amount, currency)} exactly (its {currency}"
            f" amounts have {unit.digits} decimals, in steps of {unit.step})"
        )
    return converted


def from_stripe(amount: int, currency: str) -> int | None:
    """Stripe's ``amount`` of ``currency`` in our minor units; None when it is not a whole
    number of them or the currency's Stripe unit is not known."""
    unit = stripe_unit(currency)
    if unit is None:
        return None
    shift = unit.digits - minor_unit_digits(currency)
    if shift <= 0:
        return amount * _power(-shift)
    converted, rest = divmod(amount, _power(shift))
    return None if rest else converted


def _power(digits: int) -> int:
    return int(10**digits)
