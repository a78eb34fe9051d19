"""``GET /invoices/{id}/pdf``: the invoice document as a PDF, read back with pypdf."""

from __future__ import annotations

import io
import uuid

import httpx
from pypdf import PdfReader

from billing_core.domain.money import format_minor
from tests.integration.api.helpers import assert_problem, subscribe


async def test_an_invoice_as_a_pdf(client: httpx.AsyncClient) -> None:
    created = await client.post(
        "/customers",
        json={
            "externalId": f"crm-{uuid.uuid4().hex[:8]}",
            "email": "ada@example.com",
            "name": "Ada Lovelace",
        },
    )
    assert created.status_code == 201, created.text
    sub = await subscribe(client, customer=created.json()["id"])
    (invoice,) = (await client.get(f"/subscriptions/{sub['id']}/invoices")).json()["items"]

    response = await client.get(f"/invoices/{invoice['id']}/pdf")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/pdf"
    assert f'filename="invoice-{invoice["id"]}.pdf"' in response.headers["content-disposition"]
    text = "\n".join(p.extract_text() for p in PdfReader(io.BytesIO(response.content)).pages)
    for expected in (
        f"Invoice #{invoice['id']}",
        "Billing Example Ltd",  # the default seller
        "Ada Lovelace",
        "ada@example.com",
        f"Status: {invoice['status']}",
        f"Total {format_minor(invoice['amount'], invoice['currency'])}",
    ):
        assert expected in text, (expected, text)


async def test_an_unknown_invoice_is_a_404_problem(client: httpx.AsyncClient) -> None:
    assert_problem(await client.get("/invoices/987654321/pdf"), 404, "invoice-not-found")
    assert_problem(await client.get("/invoices/0/pdf"), 422, "validation-error")
