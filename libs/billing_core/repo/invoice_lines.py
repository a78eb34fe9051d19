"""SQL of ``invoice_line``: write an invoice's lines (and verify its total in the same
statement), read them back.

:func:`insert_lines` writes the lines of any number of invoices in one ``unnest`` statement and,
in the same statement, compares every invoice it wrote lines for with the sums of those lines:
the ids of the invoices whose ``amount`` or ``credit_applied`` disagree come back, and the
caller raises so that its transaction rolls back. Nothing here commits.
"""

from __future__ import annotations

from collections.abc import Sequence

from billing_core.db.arrays import bool_array, instant_array, instant_sql, int_array, text_array
from billing_core.db.pg import Connection, Statement, fetch
from billing_core.domain.invoice_lines import InvoiceLine, InvoiceTotalMismatch, LineKind

_INSERT = Statement(
    f"""
    WITH ins AS (
        INSERT INTO invoice_line (invoice_id, line_no, kind, description, quantity, unit_amount,
                                  amount, period_start, period_end, tax_inclusive)
        SELECT u.invoice_id, u.line_no, u.kind, u.description, u.quantity, u.unit_amount,
               u.amount, {instant_sql("u.period_start")}, {instant_sql("u.period_end")},
               u.tax_inclusive
        FROM unnest(
            CAST(:invoice_ids AS text)::bigint[], CAST(:line_nos AS text)::int[],
            CAST(:kinds AS text)::text[], CAST(:descriptions AS text)::text[],
            CAST(:quantities AS text)::int[], CAST(:unit_amounts AS text)::bigint[],
            CAST(:amounts AS text)::bigint[],
            CAST(:period_starts AS text)::bigint[], CAST(:period_ends AS text)::bigint[],
            CAST(:tax_inclusives AS text)::boolean[])
            AS u(invoice_id, line_no, kind, description, quantity, unit_amount, amount,
                 period_start, period_end, tax_inclusive)
        RETURNING invoice_id, kind, amount
    ), sums AS (
        SELECT invoice_id, sum(amount) AS total,
               -sum(amount) FILTER (WHERE kind = 'CREDIT_APPLIED') AS credit
        FROM ins GROUP BY invoice_id
    )
    SELECT i.id
    FROM sums s JOIN invoice i ON i.id = s.invoice_id
    WHERE i.amount <> s.total OR i.credit_applied <> coalesce(s.credit, 0)
    """
)

# Lines added to an invoice that has some (credit applied later): numbered after its last line,
# then the invoice checked against all of its lines, in the same statement.
_APPEND = Statement(
    f"""
    WITH ins AS (
        INSERT INTO invoice_line (invoice_id, line_no, kind, description, quantity, unit_amount,
                                  amount, period_start, period_end, tax_inclusive)
        SELECT :invoice_id,
               coalesce((SELECT max(line_no) FROM invoice_line WHERE invoice_id = :invoice_id),
                        0) + u.n,
               u.kind, u.description, u.quantity, u.unit_amount, u.amount,
               {instant_sql("u.period_start")}, {instant_sql("u.period_end")}, u.tax_inclusive
        FROM unnest(
            CAST(:kinds AS text)::text[], CAST(:descriptions AS text)::text[],
            CAST(:quantities AS text)::int[], CAST(:unit_amounts AS text)::bigint[],
            CAST(:amounts AS text)::bigint[],
            CAST(:period_starts AS text)::bigint[], CAST(:period_ends AS text)::bigint[],
            CAST(:tax_inclusives AS text)::boolean[]) WITH ORDINALITY
            AS u(kind, description, quantity, unit_amount, amount, period_start, period_end,
                 tax_inclusive, n)
        RETURNING invoice_id, kind, amount
    ), sums AS (
        SELECT sum(amount) AS total,
               -sum(amount) FILTER (WHERE kind = 'CREDIT_APPLIED') AS credit
        FROM (SELECT kind, amount FROM invoice_line WHERE invoice_id = :invoice_id
              UNION ALL SELECT kind, amount FROM ins) l
    )
    SELECT i.id
    FROM invoice i, sums s
    WHERE i.id = :invoice_id
      AND (i.amount <> s.total OR i.credit_applied <> coalesce(s.credit, 0))
    """
)

_SELECT = Statement(
    """
    SELECT invoice_id, line_no, kind, description, quantity, unit_amount, amount, period_start,
           period_end, tax_inclusive
    FROM invoice_line WHERE invoice_id = ANY(CAST(:ids AS text)::bigint[])
    ORDER BY invoice_id, line_no
    """
)


async def insert_lines(
    conn: Connection, lines: Sequence[tuple[int, Sequence[InvoiceLine]]]
) -> None:
    """Write each ``(invoice_id, lines)`` pair's lines, numbered from 1, in one statement.

    Raises :class:`InvoiceTotalMismatch` if a written invoice's amount or credit is not the sum
    of its lines (the caller's transaction must then roll back)."""
    rows = [(invoice_id, n, line) for invoice_id, ls in lines for n, line in enumerate(ls, 1)]
    if not rows:
        return
    wrong = await fetch(
        conn,
        _INSERT,
        {
            "invoice_ids": int_array(r[0] for r in rows),
            "line_nos": int_array(r[1] for r in rows),
            "kinds": text_array(r[2].kind.value for r in rows),
            "descriptions": text_array(r[2].description for r in rows),
            "quantities": int_array(r[2].quantity for r in rows),
            "unit_amounts": int_array(r[2].unit_amount for r in rows),
            "amounts": int_array(r[2].amount for r in rows),
            "period_starts": instant_array(r[2].period_start for r in rows),
            "period_ends": instant_array(r[2].period_end for r in rows),
            "tax_inclusives": bool_array(r[2].tax_inclusive for r in rows),
        },
    )
    if wrong:
        ids = sorted(int(r["id"]) for r in wrong)
        raise InvoiceTotalMismatch(f"invoices whose lines do not add up: {ids[:10]}")


async def append_lines(conn: Connection, invoice_id: int, lines: Sequence[InvoiceLine]) -> None:
    """Add ``lines`` to an invoice after its last line (credit applied to it later), in one
    statement that also checks its amount and credit against all of its lines.

    Raises :class:`InvoiceTotalMismatch` if they do not add up (the caller's transaction must
    then roll back)."""
    if not lines:
        return
    wrong = await fetch(
        conn,
        _APPEND,
        {
            "invoice_id": invoice_id,
            "kinds": text_array(line.kind.value for line in lines),
            "descriptions": text_array(line.description for line in lines),
            "quantities": int_array(line.quantity for line in lines),
            "unit_amounts": int_array(line.unit_amount for line in lines),
            "amounts": int_array(line.amount for line in lines),
            "period_starts": instant_array(line.period_start for line in lines),
            "period_ends": instant_array(line.period_end for line in lines),
            "tax_inclusives": bool_array(line.tax_inclusive for line in lines),
        },
    )
    if wrong:
        raise InvoiceTotalMismatch(f"invoice {invoice_id}: its lines do not add up")


async def lines_of(conn: Connection, invoice_ids: Sequence[int]) -> dict[int, list[InvoiceLine]]:
    """The lines of each invoice, in order (an id without lines is absent)."""
    if not invoice_ids:
        return {}
    out: dict[int, list[InvoiceLine]] = {}
    for r in await fetch(conn, _SELECT, {"ids": int_array(invoice_ids)}):
        out.setdefault(int(r["invoice_id"]), []).append(
            InvoiceLine(
                kind=LineKind(r["kind"]),
                description=r["description"],
                quantity=int(r["quantity"]),
                unit_amount=int(r["unit_amount"]),
                amount=int(r["amount"]),
                period_start=r["period_start"],
                period_end=r["period_end"],
                tax_inclusive=r["tax_inclusive"],
            )
        )
    return out
