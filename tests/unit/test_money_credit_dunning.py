from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from billing_core.domain.credit import apply_credit, credit_from_proration
from billing_core.domain.dunning import DunningPolicy, next_attempt
from billing_core.domain.errors import CurrencyMismatch, InvalidAmount, InvalidCurrency
from billing_core.domain.money import BIGINT_MAX, Money, parse_amount, validate_currency

NOW = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


def test_articles_dunning_example() -> None:
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
