"""SQL of document numbering: the documents still without a number, the series counters, and
the numbers written onto invoices and refunds. Nothing here commits.

The documents to number are locked ``FOR UPDATE SKIP LOCKED``, so concurrent numbering passes
take disjoint sets; the series rows they then advance are locked until commit, so each pass gets
its own contiguous run of numbers, and a pass that rolls back returns its run with its counter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from billing_core.db.arrays import int_array, text_array
from billing_core.db.pg import Connection, Statement, execute, fetch, fetchval
from billing_core.repo.limits import require_positive_limit


@dataclass(frozen=True, slots=True)
class Unnumbered:
    id: int
    issued_at: datetime


_PENDING_INVOICES = Statement(
    """
    SELECT id, created_at AS issued_at FROM invoice
    WHERE number IS NULL
    ORDER BY id
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
    """
)

_PENDING_CREDIT_NOTES = Statement(
    """
    SELECT id, coalesce(completed_at, updated_at) AS issued_at FROM refund
    WHERE status = 'SUCCEEDED' AND credit_note_number IS NULL
    ORDER BY id
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
    """
)

_ENSURE_SERIES = Statement(
    """
    INSERT INTO document_series (series, last_number)
    SELECT unnest(CAST(:series AS text)::text[]), 0
    ON CONFLICT (series) DO NOTHING
    """
)

_ADVANCE = Statement(
    """
    UPDATE document_series SET last_number = last_number + :count
    WHERE series = :series
    RETURNING last_number - :count AS before
    """
)

_NUMBER_INVOICES = Statement(
    """
    UPDATE invoice i SET number = u.number
    FROM unnest(CAST(:ids AS text)::bigint[], CAST(:numbers AS text)::text[]) AS u(id, number)
    WHERE i.id = u.id AND i.number IS NULL
    """
)

_NUMBER_CREDIT_NOTES = Statement(
    """
    UPDATE refund r SET credit_note_number = u.number
    FROM unnest(CAST(:ids AS text)::bigint[], CAST(:numbers AS text)::text[]) AS u(id, number)
    WHERE r.id = u.id AND r.credit_note_number IS NULL
    """
)


def _rows(rows: Sequence[Mapping[str, Any]]) -> list[Unnumbered]:
    return [Unnumbered(int(r["id"]), r["issued_at"]) for r in rows]


async def lock_unnumbered_invoices(conn: Connection, *, limit: int) -> list[Unnumbered]:
    """Up to ``limit`` invoices without a number, oldest first, locked (others' locked rows are
    skipped)."""
    require_positive_limit(limit)
    return _rows(await fetch(conn, _PENDING_INVOICES, {"limit": limit}))


async def lock_unnumbered_credit_notes(conn: Connection, *, limit: int) -> list[Unnumbered]:
    """Up to ``limit`` succeeded refunds without a credit note number, oldest first, locked."""
    require_positive_limit(limit)
    return _rows(await fetch(conn, _PENDING_CREDIT_NOTES, {"limit": limit}))


async def reserve(conn: Connection, counts: Mapping[str, int]) -> dict[str, int]:
    """Advance each series by its count, in series order (a fixed lock order); return, for each,
    the last number given before (the run reserved is ``before + 1 .. before + count``)."""
    if not counts:
        return {}
    await execute(conn, _ENSURE_SERIES, {"series": text_array(sorted(counts))})
    before: dict[str, int] = {}
    for name in sorted(counts):
        before[name] = int(await fetchval(conn, _ADVANCE, {"series": name, "count": counts[name]}))
    return before


def _numbers(numbers: Sequence[tuple[int, str]]) -> dict[str, str]:
    return {"ids": int_array(n[0] for n in numbers), "numbers": text_array(n[1] for n in numbers)}


async def number_invoices(conn: Connection, numbers: Sequence[tuple[int, str]]) -> int:
    if not numbers:
        return 0
    return await execute(conn, _NUMBER_INVOICES, _numbers(numbers))


async def number_credit_notes(conn: Connection, numbers: Sequence[tuple[int, str]]) -> int:
    if not numbers:
        return 0
    return await execute(conn, _NUMBER_CREDIT_NOTES, _numbers(numbers))
