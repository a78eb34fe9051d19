"""Money: integer minor units with an ISO-4217 currency. No float, no Decimal arithmetic."""

from __future__ import annotations

import re
from dataclasses import dataclass

from billing_core.domain.errors import CurrencyMismatch, InvalidAmount, InvalidCurrency

BIGINT_MAX = 2**63 - 1

_CURRENCY = re.compile(r"^[A-Z]{3}$")


def validate_currency(code: str) -> str:
    if not isinstance(code, str) or not _CURRENCY.match(code):
        raise InvalidCurrency(f"currency must be three upper-case ISO-4217 letters, got {code!r}")
    return code


def parse_amount(value: object, *, allow_negative: bool = False) -> int:
    """An amount in minor units from untrusted input: ints (or digit strings) only."""
    if isinstance(value, bool) or isinstance(value, float):
        raise InvalidAmount(f"amounts are integers in minor units, got {value!r}")
    if isinstance(value, str):
        text = value.strip()
        if not re.fullmatch(r"-?\d+", text):
            raise InvalidAmount(f"amounts are integers in minor units, got {value!r}")
        number = int(text)
    elif isinstance(value, int):
        number = value
    else:
        raise InvalidAmount(f"amounts are integers in minor units, got {value!r}")
    if number < 0 and not allow_negative:
        raise InvalidAmount(f"amount must not be negative, got {number}")
    if abs(number) > BIGINT_MAX:
        raise InvalidAmount(f"amount {number} is beyond the BIGINT range")
    return number


@dataclass(frozen=True)
class Money:
    amount: int
    currency: str

    def __post_init__(self) -> None:
        validate_currency(self.currency)
        parse_amount(self.amount, allow_negative=True)

    def _same(self, other: Money) -> None:
        if other.currency != self.currency:
            raise CurrencyMismatch(f"cannot mix {self.currency} and {other.currency}")

    def __add__(self, other: Money) -> Money:
        self._same(other)
        return Money(self.amount + other.amount, self.currency)

    def __sub__(self, other: Money) -> Money:
        self._same(other)
        return Money(self.amount - other.amount, self.currency)
