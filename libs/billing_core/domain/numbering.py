"""Document numbers: a gap-free sequence per series, one series per kind of document and year.

Invoices are numbered ``2026-000123`` (series ``INV-2026``), credit notes — the documents of
the refunds that succeeded — ``CN-2026-000045`` (series ``CN-2026``): each series counts from 1
with no gap and no repeat. The year is the document's issue date in UTC (an invoice's creation,
a refund's completion). A number is given once and never changes; the counter of a series is
advanced in the same transaction that writes the numbers, so a rolled-back transaction gives its
numbers back (``billing_core.usecases.numbering``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum

from billing_core.domain.instant import require_aware


class DocumentKind(StrEnum):
    INVOICE = "INVOICE"
    CREDIT_NOTE = "CREDIT_NOTE"


_SERIES_PREFIX = {DocumentKind.INVOICE: "INV", DocumentKind.CREDIT_NOTE: "CN"}
_NUMBER_PREFIX = {DocumentKind.INVOICE: "", DocumentKind.CREDIT_NOTE: "CN-"}
DIGITS = 6


def series(kind: DocumentKind, issued_at: datetime) -> str:
    """The series a document issued at ``issued_at`` is numbered in, e.g. ``INV-2026``."""
    require_aware(issued_at, "issued_at")
    return f"{_SERIES_PREFIX[kind]}-{issued_at.astimezone(UTC).year}"


def kind_of_series(series_name: str) -> DocumentKind:
    prefix = series_name.split("-", 1)[0]
    for kind, known in _SERIES_PREFIX.items():
        if known == prefix:
            return kind
    raise ValueError(f"not a document series: {series_name!r}")


def number_prefix(series_name: str) -> str:
    """What every number of the series starts with (``2026-``, ``CN-2026-``)."""
    year = series_name.rsplit("-", 1)[1]
    return f"{_NUMBER_PREFIX[kind_of_series(series_name)]}{year}-"


def format_number(series_name: str, n: int) -> str:
    """The printed number of the ``n``-th document of a series (``2026-000123``; wider past
    999 999)."""
    if n < 1:
        raise ValueError(f"document numbers start at 1, not {n}")
    return f"{number_prefix(series_name)}{n:0{DIGITS}d}"
