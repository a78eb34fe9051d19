from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from billing_core.domain import errors
from billing_core.domain.credit import apply_credit, credit_from_proration
from billing_core.domain.dunning import DunningPolicy, next_attempt
from billing_core.domain.errors import (
    CurrencyMismatch,
    DomainError,
    InvalidAmount,
    InvalidAttemptCount,
    InvalidCurrency,
    InvalidPolicy,
    NaiveDatetime,
)
from billing_core.domain.money import (
    BIGINT_MAX,
    KNOWN_CURRENCIES,
    Money,
    format_minor,
    is_known_currency,
    parse_amount,
    validate_currency,
)

NOW = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


def test_the_first_retry_comes_a_day_later_and_the_fourth_decline_is_the_last() -> None:
    first = next_attempt(1, NOW, random.Random(7))
    assert first is not None
    assert NOW + timedelta(days=1) <= first < NOW + timedelta(days=1, hours=2)
    assert next_attempt(4, NOW, random.Random(7)) is None


@pytest.mark.parametrize(("failures", "days"), [(1, 1), (2, 3), (3, 5)])
def test_dunning_schedule_and_jitter_bounds(failures: int, days: int) -> None:
    rng = random.Random(failures)
    for _ in range(200):
        at = next_attempt(failures, NOW, rng)
        assert at is not None
        assert NOW + timedelta(days=days) <= at < NOW + timedelta(days=days, minutes=120)


def test_dunning_is_deterministic_with_a_seeded_rng_and_configurable() -> None:
    policy = DunningPolicy(delays=(timedelta(seconds=10),), jitter=timedelta(0))
    assert next_attempt(1, NOW, random.Random(1), policy) == NOW + timedelta(seconds=10)
    assert next_attempt(2, NOW, random.Random(1), policy) is None
    assert policy.max_attempts == 2
    assert next_attempt(2, NOW, random.Random(5)) == next_attempt(2, NOW, random.Random(5))


def test_parse_amount_rejects_floats_bools_negatives_and_overflow() -> None:
    assert parse_amount(1234) == 1234
    assert parse_amount("42") == 42
    for bad in (1.5, 10.0, True, "1.5", "abc", None, [1]):
        with pytest.raises(InvalidAmount):
            parse_amount(bad)
    with pytest.raises(InvalidAmount):
        parse_amount(-1)
    assert parse_amount(-1, allow_negative=True) == -1
    with pytest.raises(InvalidAmount):
        parse_amount(BIGINT_MAX + 1)
    assert parse_amount(BIGINT_MAX) == BIGINT_MAX


def test_money_refuses_to_mix_currencies() -> None:
    assert Money(100, "EUR") + Money(50, "EUR") == Money(150, "EUR")
    assert Money(100, "EUR") - Money(150, "EUR") == Money(-50, "EUR")
    with pytest.raises(CurrencyMismatch):
        Money(1, "EUR") + Money(1, "USD")
    with pytest.raises(InvalidCurrency):
        validate_currency("eur")


@pytest.mark.parametrize(
    ("amount", "balance", "due", "used", "left"),
    [
        (1000, 0, 1000, 0, 0),
        (1000, 300, 700, 300, 0),
        (1000, 1000, 0, 1000, 0),
        (1000, 2500, 0, 1000, 1500),
        (0, 50, 0, 0, 50),
    ],
)
def test_apply_credit(amount: int, balance: int, due: int, used: int, left: int) -> None:
    split = apply_credit(amount, balance)
    assert (split.amount_due, split.credit_used, split.credit_remaining) == (due, used, left)
    assert split.amount_due + split.credit_used == amount
    assert split.credit_used + split.credit_remaining == balance


def test_credit_from_proration() -> None:
    assert credit_from_proration(-700) == 700
    assert credit_from_proration(300) == 0
    with pytest.raises(InvalidAmount):
        apply_credit(-1, 0)


@pytest.mark.parametrize(
    "bad",
    [
        0.0,
        1e3,
        float("nan"),
        False,
        "",
        " ",
        "+5",
        "1e3",
        "1_000",
        "1,000",
        "١٢٣",  # non-ASCII digits
        "9" * 5000,  # beyond any BIGINT, and beyond int()'s digit limit
        str(BIGINT_MAX + 1),
        -(BIGINT_MAX + 1),
        b"12",
        {"amount": 1},
    ],
)
def test_parse_amount_rejections(bad: object) -> None:
    with pytest.raises(InvalidAmount):
        parse_amount(bad, allow_negative=True)


def test_parse_amount_accepts_the_full_bigint_range_when_negatives_are_allowed() -> None:
    assert parse_amount(-BIGINT_MAX, allow_negative=True) == -BIGINT_MAX
    assert parse_amount(f" {BIGINT_MAX} ") == BIGINT_MAX
    assert parse_amount("-12", allow_negative=True) == -12
    assert parse_amount(0) == 0
    with pytest.raises(InvalidAmount):
        parse_amount("-12")


@pytest.mark.parametrize("bad", ["eur", "EU", "EURO", "EUR\n", " EUR", "ÉUR", "", 978])
def test_validate_currency_rejections(bad: object) -> None:
    with pytest.raises(InvalidCurrency):
        validate_currency(bad)  # type: ignore[arg-type]


def test_known_currencies() -> None:
    assert {"EUR", "USD", "JPY", "GBP", "CHF"} <= KNOWN_CURRENCIES
    assert is_known_currency("EUR") and not is_known_currency("ABC")
    assert validate_currency("ABC") == "ABC"  # the shape check alone accepts it
    assert all(validate_currency(code) == code for code in KNOWN_CURRENCIES)


def test_money_is_integer_only_and_stays_in_bigint() -> None:
    with pytest.raises(InvalidAmount):
        Money(1.5, "EUR")  # type: ignore[arg-type]
    with pytest.raises(InvalidAmount):
        Money(True, "EUR")
    with pytest.raises(InvalidCurrency):
        Money(1, "euro")
    with pytest.raises(InvalidAmount):
        Money(BIGINT_MAX, "EUR") + Money(1, "EUR")
    with pytest.raises(CurrencyMismatch):
        Money(1, "EUR") - Money(1, "USD")
    with pytest.raises(TypeError):
        Money(1, "EUR") + 1  # type: ignore[operator]


@settings(max_examples=300, deadline=None)
@given(amount=st.integers(0, BIGINT_MAX), balance=st.integers(0, BIGINT_MAX))
def test_credit_is_never_lost_nor_negative(amount: int, balance: int) -> None:
    split = apply_credit(amount, balance)
    assert split.amount_due == max(0, amount - balance)
    assert min(split.amount_due, split.credit_used, split.credit_remaining) >= 0
    assert split.amount_due + split.credit_used == amount
    assert split.credit_used + split.credit_remaining == balance


def test_credit_from_a_proration() -> None:
    assert credit_from_proration(0) == 0
    assert credit_from_proration(-1) == 1
    with pytest.raises(InvalidAmount):
        apply_credit(10, -1)


def test_dunning_policy_defaults_and_validation() -> None:
    policy = DunningPolicy()
    assert policy.delays == (timedelta(days=1), timedelta(days=3), timedelta(days=5))
    assert policy.jitter == timedelta(minutes=120)
    assert policy.unknown_retry == timedelta(minutes=15)
    assert policy.max_attempts == 4
    with pytest.raises(InvalidPolicy):
        DunningPolicy(delays=(timedelta(days=-1),))
    with pytest.raises(InvalidPolicy):
        DunningPolicy(jitter=timedelta(seconds=-1))
    with pytest.raises(InvalidPolicy):
        DunningPolicy(unknown_retry=timedelta(0))


def test_next_attempt_rejects_impossible_counts_and_naive_times() -> None:
    with pytest.raises(InvalidAttemptCount):
        next_attempt(0, NOW, random.Random(1))
    with pytest.raises(NaiveDatetime):
        next_attempt(1, datetime(2026, 12, 1), random.Random(1))
    assert next_attempt(5, NOW, random.Random(1)) is None


def test_jitter_covers_its_whole_window() -> None:
    rng = random.Random(11)
    offsets = set()
    for _ in range(5000):
        at = next_attempt(1, NOW, rng)
        assert at is not None
        offsets.add((at - NOW - timedelta(days=1)) // timedelta(minutes=10))
    assert offsets == set(range(12))  # every 10-minute slice of [0, 120) minutes is reached


def test_every_domain_error_has_the_one_root() -> None:
    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, Exception)]
    assert len(classes) >= 10
    assert all(issubclass(c, DomainError) for c in classes)


@pytest.mark.parametrize(
    ("amount", "currency", "shown"),
    [
        (990, "EUR", "9.90 EUR"),
        (5, "USD", "0.05 USD"),
        (-1250, "EUR", "-12.50 EUR"),
        (123456789, "EUR", "1,234,567.89 EUR"),
        (500, "JPY", "500 JPY"),
        (1500, "KWD", "1.500 KWD"),
        (0, "GBP", "0.00 GBP"),
    ],
)
def test_format_minor_shows_minor_units_in_the_currencys_own_digits(
    amount: int, currency: str, shown: str
) -> None:
    assert format_minor(amount, currency) == shown
