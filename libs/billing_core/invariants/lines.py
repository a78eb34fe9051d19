"""Every invoice is the sum of its line items (``billing_core.domain.invoice_lines``).

* ``no_lines``: an invoice without any line.
* ``lines_mismatch``: an invoice whose ``amount`` is not the sum of its lines, or whose
  ``credit_applied`` is not minus the sum of its ``CREDIT_APPLIED`` lines (the subtotal then
  follows: ``amounts`` checks ``amount = subtotal - credit_applied``).
"""

from __future__ import annotations

from billing_core.db.pg import Connection, Statement, fetch, fetchval
from billing_core.invariants.report import Check

_COUNT = Statement("SELECT count(*) FROM invoice")

_MISMATCHED = Statement(
    """
    SELECT i.id, i.amount, i.credit_applied, l.total, l.credit, l.lines
    FROM invoice i
    LEFT JOIN (
        SELECT invoice_id, sum(amount) AS total, count(*) AS lines,
               coalesce(-sum(amount) FILTER (WHERE kind = 'CREDIT_APPLIED'), 0) AS credit
        FROM invoice_line GROUP BY invoice_id
    ) l ON l.invoice_id = i.id
    WHERE l.invoice_id IS NULL OR l.total <> i.amount OR l.credit <> i.credit_applied
    ORDER BY i.id
    """
)


async def check_lines(conn: Connection) -> Check:
    check = Check("lines", "invoice amount = sum of its lines, credit = its credit lines")
    check.checked = int(await fetchval(conn, _COUNT))
    for r in await fetch(conn, _MISMATCHED):
        if r["lines"] is None:
            check.add("no_lines", "invoice", r["id"], f"amount {r['amount']} and no line")
        else:
            check.add(
                "lines_mismatch",
                "invoice",
                r["id"],
                f"amount {r['amount']}, credit {r['credit_applied']}; its {r['lines']} lines "
                f"sum to {r['total']}, credit {r['credit']}",
            )
    return check
