"""The line items of a renewal batch's invoices, written in one statement for the batch.

Each renewal invoice is one period of the plan the subscription had when it was claimed, less
the credit it consumed (:func:`billing_core.domain.invoice_lines.period_lines`). The statement
that writes them also verifies every invoice's total against its lines; a mismatch raises and
rolls the whole batch back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from billing_core.domain import invoice_lines as line_rules
from billing_core.domain.invoice_lines import InvoiceLine
from billing_core.domain.renewal import RenewalPlan
from billing_core.repo import invoice_lines as lines_repo
from billing_core.repo.renewal import Db


def batch_lines(
    plans: Sequence[RenewalPlan], invoice_ids: Mapping[tuple[int, int], int]
) -> list[tuple[int, list[InvoiceLine]]]:
    """``(invoice_id, lines)`` for every invoice of the plans; ``invoice_ids`` maps
    ``(subscription_id, period_index)`` to the inserted invoice's id."""
    out: list[tuple[int, list[InvoiceLine]]] = []
    for plan in plans:
        code = plan.due.state.plan_code
        for invoice in plan.invoices:
            lines = line_rules.period_lines(
                code,
                invoice.subtotal,
                invoice.period_start,
                invoice.period_end,
                invoice.credit_applied,
            )
            line_rules.check_total(
                lines,
                subtotal=invoice.subtotal,
                credit_applied=invoice.credit_applied,
                amount=invoice.amount,
            )
            out.append((invoice_ids[(invoice.subscription_id, invoice.period_index)], lines))
    return out


async def write_batch_lines(
    db: Db, plans: Sequence[RenewalPlan], invoice_ids: Mapping[tuple[int, int], int]
) -> None:
    await lines_repo.insert_lines(db, batch_lines(plans, invoice_ids))
