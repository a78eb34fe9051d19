"""A period invoiced outside the renewer's batch, at once: the first paid period when a trial is
ended early, the new period of a change to another billing interval."""

from __future__ import annotations

from datetime import datetime

from billing_core.db.pg import Connection
from billing_core.domain import invoice_lines as line_rules
from billing_core.domain.credit import CreditSplit
from billing_core.domain.period import Period
from billing_core.domain.tax import TaxedLines
from billing_core.repo import invoice_lines as invoice_lines_repo
from billing_core.repo import invoices as invoices_repo
from billing_core.repo import subscriptions as subscriptions_repo


async def insert_period_invoice(
    conn: Connection,
    sub: subscriptions_repo.Subscription,
    *,
    period_index: int,
    period: Period,
    priced: TaxedLines,
    split: CreditSplit,
    currency: str,
    now: datetime,
) -> invoices_repo.Invoice:
    """Period ``period_index``'s RENEWAL invoice: its lines (``priced``, then the credit it
    takes, their total checked against the invoice's), and the credit taken from the balance
    (``split``: the subscription row already holds what is left)."""
    invoice = await invoices_repo.insert_invoice(
        conn,
        subscription_id=sub.id,
        customer_id=sub.customer_id,
        kind="RENEWAL",
        period_index=period_index,
        period_start=period.start,
        period_end=period.end,
        subtotal=priced.total,
        credit_applied=split.credit_used,
        currency=currency,
        now=now,
    )
    lines = [*priced.lines, *line_rules.credit_line(split.credit_used)]
    line_rules.check_total(
        lines,
        subtotal=invoice.subtotal,
        credit_applied=invoice.credit_applied,
        amount=invoice.amount,
    )
    await invoice_lines_repo.insert_lines(conn, [(invoice.id, lines)])
    if split.credit_used:
        await subscriptions_repo.add_credit_entry(
            conn,
            subscription_id=sub.id,
            amount=-split.credit_used,
            reason="INVOICE",
            invoice_id=invoice.id,
            now=now,
        )
    return invoice
