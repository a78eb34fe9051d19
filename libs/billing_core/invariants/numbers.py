"""Document numbers (``billing_core.domain.numbering``): each series is 1..its counter, once.

* ``number_gap``: a series whose counter says ``n`` numbers were given, but whose documents do
  not carry exactly the numbers 1..n (one missing, one beyond the counter, or one repeated).
* ``misnumbered``: a number that is not of its document's series (kind and year).

Documents not numbered yet are not violations (the renewer's numbering pass gives them theirs);
the check's notes count them.
"""

from __future__ import annotations

from billing_core.db.pg import Connection, Statement, fetch, fetchval
from billing_core.domain.numbering import DocumentKind, format_number, number_prefix, series
from billing_core.invariants.report import Check

_DOCUMENTS = Statement(
    """
    SELECT 'INVOICE' AS kind, id, number, created_at AS issued_at FROM invoice
    WHERE number IS NOT NULL
    UNION ALL
    SELECT 'CREDIT_NOTE', id, credit_note_number, coalesce(completed_at, updated_at) FROM refund
    WHERE credit_note_number IS NOT NULL
    """
)
_COUNTERS = Statement("SELECT series, last_number FROM document_series")
_UNNUMBERED = Statement(
    "SELECT (SELECT count(*) FROM invoice WHERE number IS NULL) + "
    "(SELECT count(*) FROM refund WHERE status = 'SUCCEEDED' AND credit_note_number IS NULL)"
)


async def check_numbers(conn: Connection) -> Check:
    check = Check("numbers", "each document series numbered 1..n, no gap, no repeat")
    given: dict[str, list[str]] = {}
    for r in await fetch(conn, _DOCUMENTS):
        kind = DocumentKind(r["kind"])
        name = series(kind, r["issued_at"])
        check.checked += 1
        if not r["number"].startswith(number_prefix(name)):
            subject = "invoice" if kind == DocumentKind.INVOICE else "refund"
            check.add(
                "misnumbered", subject, r["id"], f"number {r['number']} is not of series {name}"
            )
        given.setdefault(name, []).append(r["number"])
    counters = {r["series"]: int(r["last_number"]) for r in await fetch(conn, _COUNTERS)}
    for name in sorted(given.keys() | counters.keys()):
        last = counters.get(name, 0)
        numbers = sorted(given.get(name, []))
        want = sorted(format_number(name, n) for n in range(1, last + 1))
        if numbers != want:
            missing = sorted(set(want) - set(numbers))
            check.add(
                "number_gap",
                "series",
                name,
                f"counter at {last}, {len(numbers)} documents numbered, "
                f"{len(missing)} numbers missing {missing[:5]}",
            )
    unnumbered = int(await fetchval(conn, _UNNUMBERED))
    if unnumbered:
        check.notes.append(f"{unnumbered} documents not numbered yet")
    return check
