"""The numbering pass: give the documents that have none their numbers, in one transaction of
the caller's (which commits; nothing here does).

Invoices first, then credit notes (succeeded refunds): lock up to ``limit`` unnumbered ones,
oldest first, skipping those another transaction holds; group them by series
(:func:`billing_core.domain.numbering.series`); advance each series' counter by its count;
write the numbers. The counter and the numbers commit or roll back together, so a series has no
gap and no number is given twice, however many passes run at once (the renewer runs one after
each tick, on every replica). A document another transaction held is numbered by a later pass:
numbers follow the order documents are numbered in, which is their id order but for those.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from billing_core.db.pg import Connection
from billing_core.domain import numbering as rules
from billing_core.domain.numbering import DocumentKind
from billing_core.repo import document_numbers as repo


@dataclass(frozen=True, slots=True)
class NumberingResult:
    invoices: int
    credit_notes: int


def assign(
    kind: DocumentKind, docs: Sequence[repo.Unnumbered], before: dict[str, int]
) -> list[tuple[int, str]]:
    """Numbers for ``docs`` in order, each series continuing after ``before[series]``."""
    last = dict(before)
    out: list[tuple[int, str]] = []
    for doc in docs:
        name = rules.series(kind, doc.issued_at)
        last[name] += 1
        out.append((doc.id, rules.format_number(name, last[name])))
    return out


async def _number(
    conn: Connection,
    kind: DocumentKind,
    docs: Sequence[repo.Unnumbered],
    write: Callable[[Connection, Sequence[tuple[int, str]]], Awaitable[int]],
) -> int:
    if not docs:
        return 0
    counts = Counter(rules.series(kind, d.issued_at) for d in docs)
    before = await repo.reserve(conn, counts)
    numbers = assign(kind, docs, before)
    written = await write(conn, numbers)
    if written != len(numbers):  # the rows were locked: this cannot happen but by a bug
        raise RuntimeError(f"{kind} numbering wrote {written} of {len(numbers)} numbers")
    return written


async def number_documents(conn: Connection, *, limit: int) -> NumberingResult:
    """Number up to ``limit`` invoices and ``limit`` credit notes."""
    invoices = await repo.lock_unnumbered_invoices(conn, limit=limit)
    n_invoices = await _number(conn, DocumentKind.INVOICE, invoices, repo.number_invoices)
    refunds = await repo.lock_unnumbered_credit_notes(conn, limit=limit)
    n_notes = await _number(conn, DocumentKind.CREDIT_NOTE, refunds, repo.number_credit_notes)
    return NumberingResult(n_invoices, n_notes)
