"""The line items of a renewal batch's invoices, and what they are priced with.

The planner prices each renewal invoice once (:func:`billing_core.domain.renewal.plan_renewal`:
the period of the plan it is invoiced at, less the subscription's discount where it covers the
period, taxed at its rate, then the credit it consumes); the batch's rates and discounts are
each read in one statement (:func:`batch_pricing`). :func:`write_batch_lines` writes every
invoice's lines — those before credit, then its credit line — in one statement that also
verifies each invoice's total against its lines (a mismatch raises and rolls the whole batch
back).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from billing_core.db.pg import Connection
from billing_core.domain import invoice_lines as line_rules
from billing_core.domain.coupons import Discount
from billing_core.domain.invoice_lines import InvoiceLine
from billing_core.domain.renewal import RenewalInvoice, RenewalPlan
from billing_core.domain.tax import TaxRate
from billing_core.repo import coupons as coupons_repo
from billing_core.repo import invoice_lines as lines_repo
from billing_core.repo import tax as tax_repo


@dataclass(frozen=True)
class BatchPricing:
    """What a batch's invoices are priced with besides the plan: each subscription's tax rate
    and discount (absent: none)."""

    rates: Mapping[int, TaxRate] = field(default_factory=dict)
    discounts: Mapping[int, Discount] = field(default_factory=dict)


async def batch_pricing(conn: Connection, subscription_ids: Sequence[int]) -> BatchPricing:
    """The rates and discounts of a batch's subscriptions: one statement each."""
    return BatchPricing(
        await tax_repo.rates_for(conn, subscription_ids),
        await coupons_repo.discounts_for(conn, subscription_ids),
    )


def invoice_lines(invoice: RenewalInvoice) -> list[InvoiceLine]:
    """A planned invoice's lines — those it was priced with, then its credit line —, checked
    against its figures."""
    lines = [*invoice.lines, *line_rules.credit_line(invoice.credit_applied)]
    line_rules.check_total(
        lines,
        subtotal=invoice.subtotal,
        credit_applied=invoice.credit_applied,
        amount=invoice.amount,
    )
    return lines


def batch_lines(
    plans: Sequence[RenewalPlan], invoice_ids: Mapping[tuple[int, int], int]
) -> list[tuple[int, list[InvoiceLine]]]:
    """``(invoice_id, lines)`` for every invoice of the plans; ``invoice_ids`` maps
    ``(subscription_id, period_index)`` to the inserted invoice's id."""
    return [
        (invoice_ids[(invoice.subscription_id, invoice.period_index)], invoice_lines(invoice))
        for plan in plans
        for invoice in plan.invoices
    ]


async def write_batch_lines(
    conn: Connection, plans: Sequence[RenewalPlan], invoice_ids: Mapping[tuple[int, int], int]
) -> None:
    await lines_repo.insert_lines(conn, batch_lines(plans, invoice_ids))
