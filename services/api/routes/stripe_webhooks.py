"""Stripe's events: ``POST /webhooks/stripe``, authenticated by ``Stripe-Signature``.

The raw body is read (size-limited) and its signature verified against every configured
endpoint secret before anything is parsed; then the event goes to the same recorder as the
simulator's webhooks (``record_webhooks``: each event id once, the invoice's current state
decides): ``payment_intent.succeeded`` / ``payment_intent.payment_failed`` as a charge result of
the attempt named in the PaymentIntent's metadata, ``charge.dispute.created`` and a
``charge.refunded`` we did not ask for as an item for a person (``billing reconcile``).

Any other event, and a PaymentIntent this deployment did not create, is acknowledged (200,
IGNORED) and kept: Stripe retries every answer but a 2xx for days.
"""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Header, Request
from starlette.responses import Response

from billing_core.domain import stripe_events
from billing_core.logging import get_logger
from billing_core.repo.payment_results import AttemptToRecord
from billing_core.repo.webhook_events import ReceivedEvent
from billing_core.usecases.webhook_results import AboutACharge, WebhookToRecord
from services.api.context import get_context
from services.api.problems import MALFORMED_JSON, VALIDATION, ApiProblem
from services.api.routes.common import json_response, problems, signed_body
from services.api.schemas import StripeEventBody, WebhookAck, inline_schema

router = APIRouter(tags=["webhooks"])
log = get_logger(__name__)


@router.post(
    "/webhooks/stripe",
    response_model=WebhookAck,
    summary="Stripe events (signed by Stripe)",
    description="Signed with `Stripe-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(endpoint "
    'secret, "<t>.<raw body>")>` (several v1 entries and several secrets allowed). Handles '
    "payment_intent.succeeded, payment_intent.payment_failed, charge.refunded and "
    "charge.dispute.created; acknowledges every other event. Idempotent: an event id is "
    "processed once.",
    responses=problems(400, 401, 413, 422),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": inline_schema(StripeEventBody)}},
        }
    },
)
async def stripe_webhook(
    request: Request,
    stripe_signature: Annotated[str | None, Header(alias="Stripe-Signature")] = None,
) -> Response:
    ctx = get_context(request)
    body = await signed_body(
        request,
        stripe_signature,
        header="Stripe-Signature",
        secrets=ctx.settings.stripe_webhook_secret_list(),
        tolerance_seconds=ctx.settings.stripe_webhook_tolerance_seconds,
        now=ctx.clock.now(),
    )
    try:
        payload = json.loads(body)
    except ValueError as exc:
        raise ApiProblem(MALFORMED_JSON, "The request body is not valid JSON.") from exc
    try:
        event = stripe_events.read_event(payload, key_prefix=ctx.settings.gateway_key_prefix)
    except stripe_events.MalformedEvent as exc:
        raise ApiProblem(VALIDATION, f"Not a Stripe event: {exc}.") from exc

    result = await ctx.webhooks.submit(_to_record(event, payload))
    log.info(
        "stripe_webhook_processed",
        event_id=event.event_id,
        event_type=event.event_type,
        invoice_id=event.invoice_id,
        payment_intent=event.payment_intent,
        result=result,
    )
    return json_response(WebhookAck(event_id=event.event_id, result=result))


def _to_record(event: stripe_events.StripeEvent, payload: dict[str, object]) -> WebhookToRecord:
    received = ReceivedEvent(
        event_id=event.event_id,
        event_type=event.event_type,
        invoice_id=event.invoice_id,
        payload=payload,
    )
    if event.report is not None and event.invoice_id is not None:
        return WebhookToRecord(received, AttemptToRecord(event.invoice_id, event.report, None))
    if event.payment_intent is None:
        return WebhookToRecord(received, None)
    money = f"{event.amount} {event.currency}" if event.amount is not None else "amount unknown"
    if event.event_type == stripe_events.DISPUTE_CREATED:
        about = AboutACharge(
            event.payment_intent, f"dispute_created: {event.detail} ({money}) at Stripe"
        )
        return WebhookToRecord(received, None, about)
    if event.event_type == stripe_events.CHARGE_REFUNDED:
        about = AboutACharge(
            event.payment_intent,
            f"refunded_at_gateway: {event.detail} ({money} refunded) without a refund of ours",
            ours_if_refund_requested=True,
        )
        return WebhookToRecord(received, None, about)
    return WebhookToRecord(received, None)
