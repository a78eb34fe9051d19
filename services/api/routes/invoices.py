"""An invoice by id: ``GET /invoices/{id}`` (a subscription's list is under /subscriptions)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from starlette.responses import Response

from billing_core.domain.money import BIGINT_MAX
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
    async with get_context(request).reads() as session:
        invoice = await invoices_repo.get_invoice(session, invoice_id)
        lines = await invoice_lines_repo.lines_of(session, [invoice.id])
    return json_response(InvoiceOut.of(invoice, lines.get(invoice.id, ())))
