"""An invoice's document (:class:`~billing_core.documents.invoice_view.InvoiceDocument`), read
from the database: the invoice with its document number and line items, its subscription's plan
and its customer."""

from __future__ import annotations

from dataclasses import dataclass

from billing_core.db.pg import Connection, Statement, fetchrow
from billing_core.documents.invoice_view import (
    InvoiceDocument,
    InvoiceFacts,
    Party,
    from_invoice,
    from_lines,
)
from billing_core.repo import invoice_lines as invoice_lines_repo

_READ = Statement(
    """
    SELECT i.id, i.kind, i.status, i.currency, i.subtotal, i.credit_applied, i.amount,
           i.period_start, i.period_end, i.created_at, i.paid_at, i.number,
           i.customer_id, p.name AS plan_name,
           c.external_id AS customer_external_id, c.name AS customer_name,
           c.email AS customer_email
    FROM invoice i
    JOIN subscription s ON s.id = i.subscription_id
    JOIN plan p ON p.id = s.plan_id
    LEFT JOIN customer c ON c.id = i.customer_id
    WHERE i.id = :invoice_id
    """
)

_FACTS = tuple(InvoiceFacts.__dataclass_fields__)


@dataclass(frozen=True)
class Recipient:
    """Who a document or an e-mail is for."""

    customer_id: int
    external_id: str | None
    name: str | None
    email: str | None

    def party(self) -> Party:
        name = self.name or f"Customer {self.external_id or self.customer_id}"
        details = [self.email] if self.email else []
        details.append(f"Customer reference: {self.external_id or self.customer_id}")
        return Party(name, tuple(details))


async def load(conn: Connection, invoice_id: int, *, seller: Party) -> InvoiceDocument | None:
    """The document of invoice ``invoice_id``, or None when there is no such invoice: its lines
    and tax lines from its line items, its document number once it has one. (An invoice without
    lines, which the checker reports, gets one line naming the subscription's plan as it is
    now.)"""
    row = await fetchrow(conn, _READ, {"invoice_id": invoice_id})
    if row is None:
        return None
    customer = Recipient(
        customer_id=row["customer_id"],
        external_id=row["customer_external_id"],
        name=row["customer_name"],
        email=row["customer_email"],
    )
    facts = InvoiceFacts(**{name: row[name] for name in _FACTS})
    lines = (await invoice_lines_repo.lines_of(conn, [invoice_id])).get(invoice_id)
    if lines:
        return from_lines(
            facts, lines, number=row["number"], seller=seller, customer=customer.party()
        )
    return from_invoice(facts, plan_name=row["plan_name"], seller=seller, customer=customer.party())
