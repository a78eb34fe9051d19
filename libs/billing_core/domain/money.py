"""Money: integer minor units with an ISO-4217 currency. No float, no Decimal arithmetic.

Amounts must fit PostgreSQL ``BIGINT``. ``parse_amount`` is for untrusted input (API bodies,
gateway answers): it accepts Python ints and plain ASCII digit strings, nothing else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from billing_core.domain.errors import CurrencyMismatch, InvalidAmount, InvalidCurrency

BIGINT_MAX = 2**63 - 1

_CURRENCY = re.compile(r"[A-Z]{3}", re.ASCII)
_DIGITS = re.compile(r"-?[0-9]{1,19}", re.ASCII)

# Active ISO-4217 codes (list one, 2024), plus the funds and precious-metal codes in use.
KNOWN_CURRENCIES: frozenset[str] = frozenset(
    """
    AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD BND BOB BOV BRL BSD BTN
    BWP BYN BZD CAD CDF CHE CHF CHW CLF CLP CNY COP COU CRC CUC CUP CVE CZK DJF DKK DOP DZD EGP
    ERN ETB EUR FJD FKP GBP GEL GHS GIP GMD GNF GTQ GYD HKD HNL HTG HUF IDR ILS INR IQD IRR ISK
    JMD JOD JPY KES KGS KHR KMF KPW KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL MGA MKD MMK
    MNT MOP MRU MUR MVR MWK MXN MXV MYR MZN NAD NGN NIO NOK NPR NZD OMR PAB PEN PGK PHP PKR PLN
    PYG QAR RON RSD RUB RWF SAR SBD SCR SDG SEK SGD SHP SLE SLL SOS SRD SSP STN SVC SYP SZL THB
    TJS TMT TND TOP TRY TTD TWD TZS UAH UGX USD USN UYI UYU UYW UZS VED VES VND VUV WST XAF XAG
    XAU XBA XBB XBC XBD XCD XCG XDR XOF XPD XPF XPT XSU XUA YER ZAR ZMW ZWG ZWL
    """.split()
)


def validate_currency(code: str) -> str:
    """``code`` when it has the ISO-4217 shape (three upper-case letters), else InvalidCurrency.

    The shape only: a code missing from :data:`KNOWN_CURRENCIES` is still accepted here (see
    :func:`is_known_currency` for the stricter check).
    """
    if not isinstance(code, str) or not _CURRENCY.fullmatch(code):
        raise InvalidCurrency(f"currency must be three upper-case ISO-4217 letters, got {code!r}")
    return code


def is_known_currency(code: str) -> bool:
    return code in KNOWN_CURRENCIES


# ISO-4217 minor-unit exponents that are not 2.
_NO_MINOR_UNIT = frozenset(
    "BIF CLP DJF GNF ISK JPY KMF KRW PYG RWF UGX UYI VND VUV XAF XOF XPF".split()
)
_THREE_DIGITS = frozenset("BHD IQD JOD KWD LYD OMR TND".split())


def minor_unit_digits(currency: str) -> int:
    """How many digits the minor unit has (2 for EUR: 990 is 9.90; 0 for JPY; 3 for KWD)."""
    if currency in _NO_MINOR_UNIT:
        return 0
    return 3 if currency in _THREE_DIGITS else 2


def format_minor(amount: int, currency: str) -> str:
    """``990, "EUR"`` → ``"9.90 EUR"``: for people to read, with integer arithmetic only."""
    digits = minor_unit_digits(currency)
    sign = "-" if amount < 0 else ""
    whole, part = divmod(abs(amount), 10**digits)
    shown = f"{whole:,}" + (f".{part:0{digits}d}" if digits else "")
    return f"{sign}{shown} {currency}"


def parse_amount(value: object, *, allow_negative: bool = False) -> int:
    """An amount in minor units from untrusted input: ints (or ASCII digit strings) only.

    Rejects floats (even ``10.0``), bools, decimals in strings, negatives unless
    ``allow_negative``, and anything beyond the BIGINT range, with :class:`InvalidAmount`.
    """
    if isinstance(value, bool | float):
        raise InvalidAmount(f"amounts are integers in minor units, got {value!r}")
    if isinstance(value, str):
        text = value.strip()
        if not _DIGITS.fullmatch(text):
            raise InvalidAmount(f"amounts are integers in minor units, got {value[:40]!r}")
        number = int(text)
    elif isinstance(value, int):
        number = int(value)
    else:
        raise InvalidAmount(f"amounts are integers in minor units, got {type(value).__name__}")
    if number < 0 and not allow_negative:
        raise InvalidAmount(f"amount must not be negative, got {number}")
    if abs(number) > BIGINT_MAX:
        raise InvalidAmount("amount is beyond the BIGINT range")
    return number


@dataclass(frozen=True)
class Money:
    amount: int
    currency: str

    def __post_init__(self) -> None:
        validate_currency(self.currency)
        parse_amount(self.amount, allow_negative=True)

    def _same(self, other: Money) -> None:
        if not isinstance(other, Money):
            raise TypeError(f"cannot combine Money with {type(other).__name__}")
        if other.currency != self.currency:
            raise CurrencyMismatch(f"cannot mix {self.currency} and {other.currency}")

    def __add__(self, other: Money) -> Money:
        self._same(other)
        return Money(self.amount + other.amount, self.currency)

    def __sub__(self, other: Money) -> Money:
        self._same(other)
        return Money(self.amount - other.amount, self.currency)
