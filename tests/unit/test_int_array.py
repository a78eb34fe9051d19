"""Integer arrays as PostgreSQL array literals (what the batch statements send)."""

from __future__ import annotations

from billing_core.db.arrays import int_array


def test_integers_are_written_in_order_with_their_signs() -> None:
    assert int_array([3, -2990, 0, 9_223_372_036_854_775_807]) == (
        "{3,-2990,0,9223372036854775807}"
    )


def test_an_empty_sequence_is_the_empty_array() -> None:
    assert int_array([]) == "{}"
    assert int_array(x for x in ()) == "{}"
