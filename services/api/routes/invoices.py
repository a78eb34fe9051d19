"""An invoice by id: ``GET /invoices/{id}`` and its document, ``GET /invoices/{id}/pdf`` (a
subscription's list is under /subscriptions)."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Path, Request
from starlette.responses import Response

from billing_core.documents import invoice_pdf
from billing_core.documents.invoice_view import Party
from billing_core.domain.money import BIGINT_MAX
from billing_core.repo import invoice_documents
from billing_core.repo import invoice_lines as invoice_lines_repo
from billing_core.repo import invoices as invoices_repo
from services.api.auth import InvoicesReader
from services.api.context import get_context
from services.api.routes.common import json_response, problems
from services.api.schemas import InvoiceOut

router = APIRouter(tags=["invoices"])

InvoiceId = Annotated[int, Path(ge=1, le=BIGINT_MAX, description="Invoice id.", alias="id")]


@router.get(
    "/invoices/{id}",
    response_model=InvoiceOut,
    summary="Read an invoice",
    responses=problems(401, 403, 404, 422, 429),
)
async def get_invoice(request: Request, invoice_id: InvoiceId, _client: InvoicesReader) -> Response:
    async with get_context(request).pg.acquire() as conn:
        invoice = await invoices_repo.get_invoice(conn, invoice_id)
        lines = await invoice_lines_repo.lines_of(conn, [invoice.id])
    return json_response(InvoiceOut.of(invoice, lines.get(invoice.id, ())))


@router.get(
    "/invoices/{id}/pdf",
    summary="Download an invoice as a PDF",
    description="The invoice document: seller, customer, its document number (once it has "
    "one), its line items (the plan's period, proration, discount, credit applied), its tax "
    "lines and totals, amounts in the invoice's currency. The seller is "
    "`BILLING_SELLER_NAME` and `BILLING_SELLER_DETAILS`.",
    response_class=Response,
    responses={
        200: {
            "description": "The PDF document.",
            "content": {"application/pdf": {"schema": {"type": "string", "format": "binary"}}},
        },
        **problems(401, 403, 404, 422, 429),
    },
)
async def get_invoice_pdf(
    request: Request, invoice_id: InvoiceId, _client: InvoicesReader
) -> Response:
    context = get_context(request)
    seller = Party(context.settings.seller_name, context.settings.seller_details)
    async with context.pg.acquire() as conn:
        document = await invoice_documents.load(conn, invoice_id, seller=seller)
    if document is None:
        raise invoices_repo.InvoiceNotFound(invoice_id)
    pdf = await asyncio.to_thread(invoice_pdf.render, document)  # CPU: off the event loop
    return Response(
        pdf,
        media_type="application/pdf",
        headers={
            "Content-Disposition": f'inline; filename="invoice-{invoice_id}.pdf"',
            "Cache-Control": "private, no-store",
        },
    )
