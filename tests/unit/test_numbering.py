"""Document number series: per kind and year (UTC), numbers formatted from 1."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from billing_core.domain.errors import NaiveDatetime
from billing_core.domain.numbering import (
    DocumentKind,
    format_number,
    kind_of_series,
    number_prefix,
    series,
)
from billing_core.repo.document_numbers import Unnumbered
from billing_core.usecases.numbering import assign


def test_the_series_is_the_kind_and_the_utc_year() -> None:
    new_year_in_paris = datetime(2026, 1, 1, 0, 30, tzinfo=timezone(timedelta(hours=1)))
    assert series(DocumentKind.INVOICE, new_year_in_paris) == "INV-2025"  # 23:30 UTC
    assert series(DocumentKind.CREDIT_NOTE, datetime(2026, 5, 1, tzinfo=UTC)) == "CN-2026"
    with pytest.raises(NaiveDatetime):
        series(DocumentKind.INVOICE, datetime(2026, 5, 1))


def test_numbers_are_the_year_and_six_digits_wider_when_needed() -> None:
    assert format_number("INV-2026", 123) == "2026-000123"
    assert format_number("CN-2026", 45) == "CN-2026-000045"
    assert format_number("INV-2026", 1_234_567) == "2026-1234567"
    assert number_prefix("CN-2027") == "CN-2027-"
    assert kind_of_series("CN-2027") == DocumentKind.CREDIT_NOTE
    with pytest.raises(ValueError, match="start at 1"):
        format_number("INV-2026", 0)
    with pytest.raises(ValueError, match="not a document series"):
        kind_of_series("XX-2026")


def test_assign_continues_each_series_after_its_counter() -> None:
    docs = [
        Unnumbered(7, datetime(2025, 12, 31, 23, tzinfo=UTC)),
        Unnumbered(8, datetime(2026, 1, 1, tzinfo=UTC)),
        Unnumbered(9, datetime(2026, 1, 2, tzinfo=UTC)),
    ]
    assert assign(DocumentKind.INVOICE, docs, {"INV-2025": 41, "INV-2026": 0}) == [
        (7, "2025-000042"),
        (8, "2026-000001"),
        (9, "2026-000002"),
    ]
