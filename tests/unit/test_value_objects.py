"""Value objects: compared and hashed by their fields, slotted, built with their defaults."""

from __future__ import annotations

from billing_core.domain.credit import CreditSplit
from billing_core.domain.values import value_object


@value_object
class _Point:
    x: int
    y: int = 0


def test_equal_fields_make_equal_values_with_equal_hashes() -> None:
    assert _Point(1, 2) == _Point(1, 2)
    assert _Point(1, 2) != _Point(2, 1)
    assert hash(_Point(1)) == hash(_Point(1, 0))
    assert len({_Point(1, 2), _Point(1, 2), _Point(3)}) == 2


def test_a_value_has_only_its_fields() -> None:
    assert not hasattr(_Point(1), "__dict__")
    assert _Point.__slots__ == ("x", "y")
    assert CreditSplit(5, 5, 0) == CreditSplit(amount_due=5, credit_used=5, credit_remaining=0)
