"""The line items, discounts and taxes of a renewal batch's invoices.

Each renewal invoice is one period of the plan it was planned at — the subscription's plan
when it was claimed, or the plan of a change scheduled for the period end from that boundary
on (``RenewalInvoice.plan_code``, :func:`billing_core.domain.invoice_lines.period_lines`) —,
less its coupon's discount when the subscription's discount covers that period
(:mod:`billing_core.domain.coupons`), taxed at the subscription's rate when it has one
(:mod:`billing_core.domain.tax`, the built-in rate-table calculator), less the credit it
consumed (a paused period's VOID or DRAFT invoice consumes none); the rates and the discounts
of the whole batch are each read in one statement. :func:`apply_taxes` reprices a planned
renewal before its invoices are written — a discount lowers and an exclusive tax raises the
subtotal, so the credit each invoice takes is applied again to the final amounts;
:func:`write_batch_lines` writes every invoice's lines in one statement that also verifies each
invoice's total against its lines (a mismatch raises and rolls the whole batch back).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from billing_core.domain import invoice as invoice_rules
from billing_core.domain import invoice_lines as line_rules
from billing_core.domain.coupons import Discount, plan_period_lines
from billing_core.domain.credit import apply_credit
from billing_core.domain.invoice_lines import InvoiceLine, LineKind
from billing_core.domain.period import Period
from billing_core.domain.renewal import RenewalInvoice, RenewalPlan
from billing_core.domain.tax import TaxRate, tax_lines
from billing_core.repo import coupons as coupons_repo
from billing_core.repo import invoice_lines as lines_repo
from billing_core.repo import tax as tax_repo
from billing_core.repo.renewal import Db

# An invoice's lines before credit, by (subscription id, period index).
PricedLines = dict[tuple[int, int], list[InvoiceLine]]


@dataclass(frozen=True)
class BatchPricing:
    """What a batch's invoices are priced with besides the plan: each subscription's tax rate
    and discount (absent: none); and the lines priced while planning, kept for writing them."""

    rates: Mapping[int, TaxRate] = field(default_factory=dict)
    discounts: Mapping[int, Discount] = field(default_factory=dict)
    priced: PricedLines = field(default_factory=dict)

    def reprice(self, plan: RenewalPlan, now: datetime) -> RenewalPlan:
        sub = plan.due.id
        return apply_taxes(
            plan, self.rates.get(sub), now, self.discounts.get(sub), priced=self.priced
        )


async def batch_pricing(db: Db, subscription_ids: Sequence[int]) -> BatchPricing:
    """The rates and discounts of a batch's subscriptions: one statement each."""
    return BatchPricing(
        await tax_repo.rates_for(db, subscription_ids),
        await coupons_repo.discounts_for(db, subscription_ids),
    )


def _priced_lines(
    plan: RenewalPlan,
    invoice: RenewalInvoice,
    rate: TaxRate | None,
    discount: Discount | None = None,
) -> list[InvoiceLine]:
    """The invoice's lines before credit: the period of the plan it is invoiced at (the new
    plan from a scheduled change's boundary on), its discount when the subscription's covers
    the period, and its tax when it has a rate."""
    price = invoice.plan_price if invoice.plan_code else plan.due.price_amount
    plan_code = invoice.plan_code or plan.due.state.plan_code
    lines = plan_period_lines(
        plan_code,
        price,
        discount,
        invoice.period_index,
        Period(invoice.period_start, invoice.period_end),
    )
    if rate is None:
        return lines
    # The rate-table calculator's rules for this one rate (the batch's rates were looked up
    # in one statement: RateTableCalculator.rate_for's choice, made in SQL).
    return tax_lines(rate, lines).lines


def apply_taxes(
    plan: RenewalPlan,
    rate: TaxRate | None,
    now: datetime,
    discount: Discount | None = None,
    *,
    priced: PricedLines | None = None,
) -> RenewalPlan:
    """``plan`` with its invoices discounted by ``discount`` where it covers their period and
    taxed at ``rate`` (unchanged without either): each subtotal the final total, the credit
    applied again in order from the subscription's balance (a paused period's VOID or DRAFT
    invoice takes none and keeps its status). Each invoice's lines before credit go into
    ``priced`` when given."""
    if (rate is None and discount is None) or not plan.invoices:
        return plan
    balance = plan.due.credit_balance
    invoices: list[RenewalInvoice] = []
    for invoice in plan.invoices:
        lines = _priced_lines(plan, invoice, rate, discount)
        if priced is not None:
            priced[(invoice.subscription_id, invoice.period_index)] = lines
        subtotal = line_rules.total(lines)
        tax = sum(line.amount for line in lines if line.kind == LineKind.TAX)
        if invoice.paused:  # VOID or DRAFT: priced the same, no credit taken, never collected
            invoices.append(
                invoice.priced(
                    subtotal=subtotal,
                    credit_applied=invoice.credit_applied,
                    amount=subtotal,
                    status=invoice.status,
                    next_attempt_at=invoice.next_attempt_at,
                    paid_at=invoice.paid_at,
                    tax=tax,
                )
            )
            continue
        split = apply_credit(subtotal, balance)
        balance = split.credit_remaining
        opening = invoice_rules.opening(split.amount_due, now)
        invoices.append(
            invoice.priced(
                subtotal=subtotal,
                credit_applied=split.credit_used,
                amount=split.amount_due,
                status=opening.status,
                next_attempt_at=opening.next_attempt_at,
                paid_at=opening.paid_at,
                tax=tax,
            )
        )
    return plan.repriced(invoices, balance)


def invoice_lines(
    plan: RenewalPlan,
    invoice: RenewalInvoice,
    rate: TaxRate | None,
    discount: Discount | None = None,
    *,
    priced: PricedLines | None = None,
) -> list[InvoiceLine]:
    """The lines of one of ``plan``'s invoices (planned with :func:`apply_taxes` at ``rate``
    and ``discount``; their lines before credit taken from ``priced`` when there), checked
    against its figures."""
    before_credit = (priced or {}).get((invoice.subscription_id, invoice.period_index))
    if before_credit is None:
        before_credit = _priced_lines(plan, invoice, rate, discount)
    lines = [*before_credit, *line_rules.credit_line(invoice.credit_applied)]
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
    pricing: BatchPricing,
) -> list[tuple[int, list[InvoiceLine]]]:
    """``(invoice_id, lines)`` for every invoice of the plans; ``invoice_ids`` maps
    ``(subscription_id, period_index)`` to the inserted invoice's id."""
    out: list[tuple[int, list[InvoiceLine]]] = []
    for plan in plans:
        rate = pricing.rates.get(plan.due.id)
        discount = pricing.discounts.get(plan.due.id)
        for invoice in plan.invoices:
            lines = invoice_lines(plan, invoice, rate, discount, priced=pricing.priced)
            out.append((invoice_ids[(invoice.subscription_id, invoice.period_index)], lines))
    return out


async def write_batch_lines(
    db: Db,
    plans: Sequence[RenewalPlan],
    invoice_ids: Mapping[tuple[int, int], int],
    pricing: BatchPricing,
) -> None:
    await lines_repo.insert_lines(db, batch_lines(plans, invoice_ids, pricing))
