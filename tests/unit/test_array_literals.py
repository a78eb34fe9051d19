"""Array parameters as PostgreSQL literals (what the batch statements send)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from billing_core.db.arrays import (
    bool_array,
    instant_array,
    int_array,
    json_array,
    nullable_int_array,
    text_array,
)


def test_integers_are_written_in_order_with_their_signs() -> None:
    assert int_array([3, -2990, 0, 9_223_372_036_854_775_807]) == (
        "{3,-2990,0,9223372036854775807}"
    )


def test_an_empty_sequence_is_the_empty_array() -> None:
    assert int_array([]) == "{}"
    assert int_array(x for x in ()) == "{}"
    assert text_array([]) == "{}"
    assert instant_array([]) == "{}"
    assert json_array([]) == "[]"


def test_none_is_null() -> None:
    assert nullable_int_array([1, None, -2]) == "{1,NULL,-2}"
    assert bool_array([True, None, False]) == "{t,NULL,f}"
    assert text_array(["NULL", None]) == '{"NULL",NULL}'


def test_strings_are_quoted_with_backslashes_and_quotes_escaped() -> None:
    assert text_array(['a "b"', "c\\d", "{x,y}", " ", ""]) == (
        '{"a \\"b\\"","c\\\\d","{x,y}"," ",""}'
    )


def test_instants_are_microseconds_since_the_epoch_whatever_their_offset() -> None:
    paris_winter = timezone(timedelta(hours=1))
    assert (
        instant_array(
            [
                datetime(1970, 1, 1, tzinfo=UTC),
                datetime(2026, 12, 1, 1, 0, 0, 7, tzinfo=paris_winter),
                None,
                datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
            ]
        )
        == "{0,1796083200000007,NULL,-1}"
    )


def test_a_naive_instant_is_refused() -> None:
    with pytest.raises(TypeError):
        instant_array([datetime(2026, 12, 1)])


def test_json_documents_make_one_array() -> None:
    assert json_array(['{"a":1}', "[2]", '"x"']) == '[{"a":1},[2],"x"]'
