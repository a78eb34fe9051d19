"""The ids a read by ``{id}`` takes its short path for: plain decimals in range, nothing else."""

from __future__ import annotations

import pytest

from billing_core.domain.money import BIGINT_MAX
from services.api.routes.id_reads import plain_id


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("1", 1), ("42", 42), (str(BIGINT_MAX), BIGINT_MAX)],
)
def test_plain_decimals_in_range_are_ids(raw: str, expected: int) -> None:
    assert plain_id(raw) == expected


@pytest.mark.parametrize(
    "raw",
    [
        "0",
        "007",
        "-1",
        "+1",
        " 1",
        "1 ",
        "1_000",
        "1.0",
        "abc",
        "١٢",
        "²",
        str(BIGINT_MAX + 1),
        "9" * 30,
    ],
)
def test_anything_else_is_left_to_the_declared_validation(raw: str) -> None:
    assert plain_id(raw) is None
