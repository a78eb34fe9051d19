"""The line items and taxes of a renewal batch's invoices.

Each renewal invoice is one period of the plan the subscription had when it was claimed
(:func:`billing_core.domain.invoice_lines.period_lines`), taxed at the subscription's rate when
it has one (:mod:`billing_core.domain.tax`, the built-in rate-table calculator; the rates of
the whole batch are read in one statement), less the credit it consumed. :func:`apply_taxes`
reprices a planned renewal before its invoices are written — an exclusive tax raises the
subtotal, so the credit each invoice takes is applied again to the taxed amounts;
:func:`write_batch_lines` writes every invoice's lines in one statement that also verifies each
invoice's total against its lines (a mismatch raises and rolls the whole batch back).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from billing_core.domain import invoice as invoice_rules
from billing_core.domain import invoice_lines as line_rules
from billing_core.domain.credit import apply_credit
from billing_core.domain.invoice_lines import InvoiceLine, LineKind
from billing_core.domain.renewal import RenewalInvoice, RenewalPlan
from billing_core.domain.tax import RateTableCalculator, TaxLocation, TaxRate, TaxRequest
from billing_core.repo import invoice_lines as lines_repo
from billing_core.repo.renewal import Db


def _priced_lines(
    plan: RenewalPlan, invoice: RenewalInvoice, rate: TaxRate | None
) -> list[InvoiceLine]:
    """The invoice's lines before credit: the plan's period, and its tax when it has a rate."""
    lines = [
        line_rules.single(
            LineKind.PLAN_PERIOD,
            line_rules.plan_period_description(plan.due.state.plan_code),
            plan.due.price_amount,
            invoice.period_start,
            invoice.period_end,
        )
    ]
    if rate is None:
        return lines
    location = TaxLocation(rate.country, rate.region)
    [taxed] = RateTableCalculator([rate]).calculate([TaxRequest(location, invoice.currency, lines)])
    return taxed.lines


def apply_taxes(plan: RenewalPlan, rate: TaxRate | None, now: datetime) -> RenewalPlan:
    """``plan`` with its invoices taxed at ``rate`` (unchanged without one): each subtotal the
    taxed total, the credit applied again in order from the subscription's balance."""
    if rate is None or not plan.invoices:
        return plan
    balance = plan.due.credit_balance
    invoices: list[RenewalInvoice] = []
    for invoice in plan.invoices:
        priced = _priced_lines(plan, invoice, rate)
        subtotal = line_rules.total(priced)
        split = apply_credit(subtotal, balance)
        balance = split.credit_remaining
        opening = invoice_rules.opening(split.amount_due, now)
        invoices.append(
            replace(
                invoice,
                subtotal=subtotal,
                credit_applied=split.credit_used,
                amount=split.amount_due,
                status=opening.status,
                next_attempt_at=opening.next_attempt_at,
                paid_at=opening.paid_at,
                tax=sum(line.amount for line in priced if line.kind == LineKind.TAX),
            )
        )
    return replace(plan, invoices=invoices, write=replace(plan.write, credit_balance=balance))


def invoice_lines(
    plan: RenewalPlan, invoice: RenewalInvoice, rate: TaxRate | None
) -> list[InvoiceLine]:
    """The lines of one of ``plan``'s invoices (planned with :func:`apply_taxes` at ``rate``),
    checked against its figures."""
    lines = [*_priced_lines(plan, invoice, rate), *line_rules.credit_line(invoice.credit_applied)]
    line_rules.check_total(
        lines,
        subtotal=invoice.subtotal,
        credit_applied=invoice.credit_applied,
        amount=invoice.amount,
    )
    return lines


def batch_lines(
    plans: Sequence[RenewalPlan],
    invoice_ids: Mapping[tuple[int, int], int],
    rates: Mapping[int, TaxRate],
) -> list[tuple[int, list[InvoiceLine]]]:
    """``(invoice_id, lines)`` for every invoice of the plans; ``invoice_ids`` maps
    ``(subscription_id, period_index)`` to the inserted invoice's id."""
    out: list[tuple[int, list[InvoiceLine]]] = []
    for plan in plans:
        rate = rates.get(plan.due.id)
        for invoice in plan.invoices:
            lines = invoice_lines(plan, invoice, rate)
            out.append((invoice_ids[(invoice.subscription_id, invoice.period_index)], lines))
    return out


async def write_batch_lines(
    db: Db,
    plans: Sequence[RenewalPlan],
    invoice_ids: Mapping[tuple[int, int], int],
    rates: Mapping[int, TaxRate],
) -> None:
    await lines_repo.insert_lines(db, batch_lines(plans, invoice_ids, rates))
