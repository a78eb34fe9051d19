"""The payment gateway's asynchronous results: ``POST /webhooks/payments``.

Order of work: the raw body is read (size-limited) and its signature verified before any
parsing; a ``charge.succeeded`` that does not name its amount, currency and customer is refused
(422). Then, in one transaction — shared with the events that arrive while the previous group
is recorded — the gateway event id is recorded (a duplicate stops there) and the result goes
through the same ``record_charge_results`` the collector uses, which decides
from the invoice's current state: a PAID invoice stays PAID, an older attempt's result never
rolls anything back, a success for a FAILED/VOID invoice is refunded, and an event about an
attempt never sent, a success for an attempt our own call saw declined, or one whose amount,
currency or customer does not match the invoice is recorded (with what the gateway said) but
never applied (MISMATCH, a reconciliation item for a success).

Mounted only where the simulator is the configured gateway (``BILLING_GATEWAY``).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Request
from pydantic import ValidationError
from starlette.responses import Response

from billing_core.domain.charge_result import ChargeOutcome, GatewayReport
from billing_core.domain.charge_result import idempotency_key as gateway_key
from billing_core.logging import get_logger
from billing_core.repo.payment_results import AttemptToRecord
from billing_core.repo.webhook_events import ReceivedEvent
from billing_core.usecases.webhook_results import WebhookToRecord
from services.api.context import get_context
from services.api.problems import MALFORMED_JSON, VALIDATION, ApiProblem
from services.api.routes.common import json_response, problems, signed_body
from services.api.schemas import SUCCEEDED, WebhookAck, WebhookEvent, inline_schema

router = APIRouter(tags=["webhooks"])
log = get_logger(__name__)

OUTCOMES = {SUCCEEDED: ChargeOutcome.SUCCESS, "charge.declined": ChargeOutcome.DECLINED}


def _invalid_body(exc: ValidationError) -> ApiProblem:
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        return ApiProblem(MALFORMED_JSON, "The request body is not valid JSON.")
    fields = [
        {
            "field": ".".join(str(p) for p in ("body", *e.get("loc", ()))),
            "message": e.get("msg", ""),
            "code": e.get("type"),
        }
        for e in errors
    ]
    return ApiProblem(VALIDATION, "The webhook event is not in the expected shape.", errors=fields)


@router.post(
    "/webhooks/payments",
    response_model=WebhookAck,
    summary="Gateway payment results (signed)",
    description="Signed with `Billing-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "
    '"<t>.<raw body>")>`. Idempotent: an event id is processed once.',
    responses=problems(400, 401, 413, 422),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": inline_schema(WebhookEvent)}},
        }
    },
)
async def payment_webhook(
    request: Request,
    billing_signature: Annotated[str | None, Header(alias="Billing-Signature")] = None,
) -> Response:
    ctx = get_context(request)
    body = await signed_body(
        request,
        billing_signature,
        header="Billing-Signature",
        secrets=ctx.settings.webhook_secret_list(),
        tolerance_seconds=ctx.settings.webhook_tolerance_seconds,
        now=ctx.clock.now(),
    )
    try:
        event = WebhookEvent.model_validate_json(body)
    except ValidationError as exc:
        raise _invalid_body(exc) from exc
    data = event.data
    expected = gateway_key(data.invoice_id, data.attempt, ctx.settings.gateway_key_prefix)
    if data.idempotency_key != expected:
        raise ApiProblem(
            VALIDATION,
            "data.idempotencyKey does not match data.invoiceId and data.attempt (or is not one of "
            "this deployment's keys).",
            errors=[{"field": "body.data.idempotencyKey", "message": "mismatch", "code": None}],
        )

    outcome = OUTCOMES.get(event.type)
    report = None
    if outcome is not None:
        report = AttemptToRecord(
            data.invoice_id,
            GatewayReport(
                attempt_number=data.attempt,
                outcome=outcome,
                from_webhook=True,
                idempotency_key=data.idempotency_key,
                decline_code=data.decline_code,
                gateway_reference=data.charge_id,
                amount=data.amount,
                currency=data.currency,
                customer_id=data.customer_id,
            ),
            None,
        )
    received = ReceivedEvent(
        event_id=event.id,
        event_type=event.type,
        invoice_id=data.invoice_id,
        payload=event.model_dump(mode="json", by_alias=True),
    )
    result = await ctx.webhooks.submit(WebhookToRecord(received, report))
    log.info(
        "webhook_processed",
        event_id=event.id,
        event_type=event.type,
        invoice_id=data.invoice_id,
        attempt=data.attempt,
        result=result,
    )
    return json_response(WebhookAck(event_id=event.id, result=result))
