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

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from billing_core.repo.limits import require_positive_limit

Db = AsyncSession | AsyncConnection


@dataclass(frozen=True, slots=True)
class Unnumbered:
    id: int
    issued_at: datetime


_PENDING_INVOICES = text(
    """
    SELECT id, created_at AS issued_at FROM invoice
    WHERE number IS NULL
    ORDER BY id
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
    """
)

_PENDING_CREDIT_NOTES = text(
    """
    SELECT id, coalesce(completed_at, updated_at) AS issued_at FROM refund
    WHERE status = 'SUCCEEDED' AND credit_note_number IS NULL
    ORDER BY id
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
    """
)

_ENSURE_SERIES = text(
    """
    INSERT INTO document_series (series, last_number)
    SELECT unnest(CAST(:series AS text[])), 0
    ON CONFLICT (series) DO NOTHING
    """
)

_ADVANCE = text(
    """
    UPDATE document_series SET last_number = last_number + :count
    WHERE series = :series
    RETURNING last_number - :count AS before
    """
)

_NUMBER_INVOICES = text(
    """
    UPDATE invoice i SET number = u.number
    FROM unnest(CAST(:ids AS bigint[]), CAST(:numbers AS text[])) AS u(id, number)
    WHERE i.id = u.id AND i.number IS NULL
    """
)

_NUMBER_CREDIT_NOTES = text(
    """
    UPDATE refund r SET credit_note_number = u.number
    FROM unnest(CAST(:ids AS bigint[]), CAST(:numbers AS text[])) AS u(id, number)
    WHERE r.id = u.id AND r.credit_note_number IS NULL
    """
)


def _rows(result: object) -> list[Unnumbered]:
    return [Unnumbered(int(r.id), r.issued_at) for r in result]  # type: ignore[attr-defined]


async def lock_unnumbered_invoices(db: Db, *, limit: int) -> list[Unnumbered]:
    """Up to ``limit`` invoices without a number, oldest first, locked (others' locked rows are
    skipped)."""
    require_positive_limit(limit)
    return _rows(await db.execute(_PENDING_INVOICES, {"limit": limit}))


async def lock_unnumbered_credit_notes(db: Db, *, limit: int) -> list[Unnumbered]:
    """Up to ``limit`` succeeded refunds without a credit note number, oldest first, locked."""
    require_positive_limit(limit)
    return _rows(await db.execute(_PENDING_CREDIT_NOTES, {"limit": limit}))


async def reserve(db: Db, counts: Mapping[str, int]) -> dict[str, int]:
    """Advance each series by its count, in series order (a fixed lock order); return, for each,
    the last number given before (the run reserved is ``before + 1 .. before + count``)."""
    if not counts:
        return {}
    await db.execute(_ENSURE_SERIES, {"series": sorted(counts)})
    before: dict[str, int] = {}
    for name in sorted(counts):
        row = (await db.execute(_ADVANCE, {"series": name, "count": counts[name]})).one()
        before[name] = int(row.before)
    return before


async def number_invoices(db: Db, numbers: Sequence[tuple[int, str]]) -> int:
    if not numbers:
        return 0
    result = await db.execute(
        _NUMBER_INVOICES, {"ids": [n[0] for n in numbers], "numbers": [n[1] for n in numbers]}
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


async def number_credit_notes(db: Db, numbers: Sequence[tuple[int, str]]) -> int:
    if not numbers:
        return 0
    result = await db.execute(
        _NUMBER_CREDIT_NOTES,
        {"ids": [n[0] for n in numbers], "numbers": [n[1] for n in numbers]},
    )
    return int(result.rowcount)  # type: ignore[attr-defined]
