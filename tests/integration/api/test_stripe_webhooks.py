"""Stripe's events at ``POST /webhooks/stripe``: Stripe-Signature checked as Stripe documents
it, then the same recorder as the simulator's webhooks (dedupe by event id, current-state
rules), and refunds and disputes at Stripe turned into items for a person."""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from tests.integration.api.conftest import STRIPE_SECRETS
from tests.integration.api.helpers import (
    assert_problem,
    known_customers,
    leased,
    rows,
    scalar,
    subscribe,
)

PATH = "/webhooks/stripe"


def stripe_signature(secret: str, timestamp: int, payload: bytes) -> str:
    """As in Stripe's "Verify webhook signatures manually": the signed payload is the timestamp,
    a '.', then the raw body; the signature is its HMAC-SHA256 under the endpoint secret, hex."""
    signed_payload = f"{timestamp}.".encode() + payload
    return hmac.new(secret.encode(), signed_payload, hashlib.sha256).hexdigest()


def intent(
    invoice_id: int, *, attempt: int = 0, amount: int = 990, **fields: Any
) -> dict[str, Any]:
    return {
        "id": f"pi_{uuid.uuid4().hex[:24]}",
        "object": "payment_intent",
        "amount": amount,
        "currency": "eur",
        "customer": "cus_PZrgY7FgXqFqUd",
        "status": "succeeded",
        "last_payment_error": None,
        "metadata": {
            "invoice_id": str(invoice_id),
            "attempt": str(attempt),
            "subscription_id": "1",
            "customer_id": "42",
            "idempotency_key": f"inv-{invoice_id}-try-{attempt}",
        },
        **fields,
    }


def stripe_event(kind: str, obj: dict[str, Any], event_id: str | None = None) -> dict[str, Any]:
    return {
        "id": event_id or f"evt_{uuid.uuid4().hex[:24]}",
        "object": "event",
        "api_version": "2026-10-28.endive",
        "created": 1_773_135_000,
        "livemode": False,
        "pending_webhooks": 1,
        "type": kind,
        "data": {"object": obj},
    }


async def deliver(
    client: httpx.AsyncClient,
    clock: ManualClock,
    payload: dict[str, Any] | bytes,
    *,
    secrets: tuple[str, ...] = STRIPE_SECRETS[:1],
    age_seconds: int = 0,
    header: str | None = None,
) -> httpx.Response:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    t = int(clock.now().timestamp()) - age_seconds
    signed = ",".join([f"t={t}", *(f"v1={stripe_signature(s, t, body)}" for s in secrets)])
    headers = {"content-type": "application/json; charset=utf-8"}
    headers["Stripe-Signature"] = header if header is not None else signed
    return await client.post(PATH, content=body, headers=headers)


async def open_invoice(client: httpx.AsyncClient, engine: AsyncEngine, *, sent: bool = True) -> int:
    """An OPEN invoice; ``sent``: the collector's PaymentIntent for its attempt 0 is at Stripe."""
    await known_customers(engine, 42)  # the customer the intents' metadata names
    sub = await subscribe(client, customer=42)
    invoice_id = int(
        await scalar(engine, "SELECT id FROM invoice WHERE subscription_id = :s", s=sub["id"])
    )
    if sent:
        await leased(engine, invoice_id)
    return invoice_id


async def test_payment_intent_succeeded_pays_the_invoice_once(
    anonymous: httpx.AsyncClient, client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    invoice_id = await open_invoice(client, engine)
    paid = intent(invoice_id)
    evt = stripe_event("payment_intent.succeeded", paid)
    first = await deliver(anonymous, clock, evt)
    assert first.status_code == 200, first.text
    assert first.json() == {"eventId": evt["id"], "result": "APPLIED"}
    assert await scalar(engine, "SELECT status FROM invoice WHERE id = :i", i=invoice_id) == "PAID"
    recorded = await rows(
        engine,
        "SELECT source, outcome, attempt_number, gateway_reference FROM payment_attempt"
        " WHERE invoice_id = :i",
        i=invoice_id,
    )
    assert recorded == [
        {
            "source": "WEBHOOK",
            "outcome": "SUCCESS",
            "attempt_number": 0,
            "gateway_reference": paid["id"],
        }
    ]
    again = await deliver(anonymous, clock, evt)  # Stripe delivers at least once
    assert again.json()["result"] == "DUPLICATE"
    assert await scalar(engine, "SELECT count(*) FROM payment_attempt") == 1
    assert await scalar(engine, "SELECT count(*) FROM webhook_event") == 1


async def test_signature_with_several_v1_and_the_previous_secret_is_accepted(
    anonymous: httpx.AsyncClient, client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    invoice_id = await open_invoice(client, engine)
    body = json.dumps(stripe_event("payment_intent.succeeded", intent(invoice_id))).encode()
    t = int(clock.now().timestamp())
    # During a secret roll Stripe signs with each active secret: one v1 per secret (and a v0
    # in test mode, which is not checked). Here a secret unknown to us and the previous one.
    header = (
        f"t={t},v1={stripe_signature('whsec_not_ours', t, body)},"
        f"v1={stripe_signature(STRIPE_SECRETS[1], t, body)},v0=6ffbb59b2300aae63f272406069a9788"
    )
    answer = await deliver(anonymous, clock, body, header=header)
    assert answer.status_code == 200, answer.text
    assert answer.json()["result"] == "APPLIED"


async def test_bad_signatures_are_refused_before_anything_is_recorded(
    anonymous: httpx.AsyncClient, client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    invoice_id = await open_invoice(client, engine)
    evt = stripe_event("payment_intent.succeeded", intent(invoice_id))
    body = json.dumps(evt).encode()
    t = int(clock.now().timestamp())
    refused = [
        await deliver(anonymous, clock, evt, secrets=("whsec_wrong",)),
        await deliver(anonymous, clock, evt, age_seconds=301),  # beyond the 300 s tolerance
        await deliver(anonymous, clock, evt, age_seconds=-301),  # from the future
        await deliver(anonymous, clock, evt, header=""),
        await deliver(
            anonymous, clock, evt, header=f"t={t},v0={stripe_signature(STRIPE_SECRETS[0], t, body)}"
        ),
        await deliver(
            anonymous,
            clock,
            body.replace(b'"eur"', b'"usd"'),
            header=f"t={t},v1={stripe_signature(STRIPE_SECRETS[0], t, body)}",
        ),
    ]
    for answer in refused:
        assert_problem(answer, 401, "invalid-signature")
    assert await scalar(engine, "SELECT count(*) FROM webhook_event") == 0
    within = await deliver(anonymous, clock, evt, age_seconds=299)
    assert within.json()["result"] == "APPLIED"


async def test_payment_failed_is_a_decline_with_stripes_code(
    anonymous: httpx.AsyncClient, client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    invoice_id = await open_invoice(client, engine)
    failed = intent(
        invoice_id,
        status="requires_payment_method",
        last_payment_error={
            "type": "card_error",
            "code": "card_declined",
            "decline_code": "insufficient_funds",
        },
    )
    answer = await deliver(anonymous, clock, stripe_event("payment_intent.payment_failed", failed))
    assert answer.json()["result"] == "APPLIED"
    assert (
        await scalar(engine, "SELECT attempt_count FROM invoice WHERE id = :i", i=invoice_id) == 1
    )
    code = await scalar(
        engine,
        "SELECT payload->>'declineCode' FROM outbox_event WHERE event_type = 'PaymentFailed'",
    )
    assert code == "insufficient_funds"


async def test_authentication_required_failure_tells_the_customer_to_authenticate(
    anonymous: httpx.AsyncClient, client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    invoice_id = await open_invoice(client, engine)
    failed = intent(
        invoice_id,
        status="requires_payment_method",
        last_payment_error={
            "type": "card_error",
            "code": "authentication_required",
            "decline_code": "authentication_required",
        },
    )
    answer = await deliver(anonymous, clock, stripe_event("payment_intent.payment_failed", failed))
    assert answer.json()["result"] == "APPLIED"
    code = await scalar(
        engine,
        "SELECT payload->>'declineCode' FROM outbox_event WHERE event_type = 'PaymentFailed'",
    )
    assert code == "authentication_required"


async def test_a_report_that_does_not_match_the_invoice_is_never_applied(
    anonymous: httpx.AsyncClient, client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    invoice_id = await open_invoice(client, engine)
    evt = stripe_event("payment_intent.succeeded", intent(invoice_id, amount=1))
    answer = await deliver(anonymous, clock, evt)
    assert answer.json()["result"] == "MISMATCH"
    assert await scalar(engine, "SELECT status FROM invoice WHERE id = :i", i=invoice_id) == "OPEN"


async def test_a_success_for_an_intent_never_created_or_naming_no_customer_never_pays(
    anonymous: httpx.AsyncClient, client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    """The simulator's rules: a PaymentIntent event pays only an attempt the collector sent,
    and only when it says what it charged, to whom."""
    never_sent = await open_invoice(client, engine, sent=False)
    forged = await deliver(
        anonymous, clock, stripe_event("payment_intent.succeeded", intent(never_sent))
    )
    sent = await open_invoice(client, engine)
    nameless = intent(sent)
    del nameless["metadata"]["customer_id"]
    unnamed = await deliver(anonymous, clock, stripe_event("payment_intent.succeeded", nameless))

    assert [forged.json()["result"], unnamed.json()["result"]] == ["MISMATCH", "MISMATCH"]
    statuses = "SELECT status FROM invoice WHERE id = ANY(:ids)"
    assert {r["status"] for r in await rows(engine, statuses, ids=[never_sent, sent])} == {"OPEN"}
    items = await rows(engine, "SELECT invoice_id, reason FROM reconciliation_item ORDER BY id")
    assert [(i["invoice_id"], i["reason"]) for i in items] == [
        (never_sent, "report_mismatch: attempt 0 was never sent (at 0)"),
        (sent, "report_mismatch: a success that names no customer"),
    ]


async def test_events_not_about_our_charges_are_acknowledged_and_kept(
    anonymous: httpx.AsyncClient, client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    invoice_id = await open_invoice(client, engine)
    foreign = intent(invoice_id, metadata={"order": "A-17"})  # another system on the account
    other_prefix = intent(invoice_id)
    other_prefix["metadata"]["idempotency_key"] = f"staging-inv-{invoice_id}-try-0"
    answers = [
        await deliver(anonymous, clock, stripe_event("payment_intent.succeeded", foreign)),
        await deliver(anonymous, clock, stripe_event("payment_intent.succeeded", other_prefix)),
        await deliver(anonymous, clock, stripe_event("customer.created", {"id": "cus_1"})),
    ]
    assert [(a.status_code, a.json()["result"]) for a in answers] == [(200, "IGNORED")] * 3
    assert await scalar(engine, "SELECT status FROM invoice WHERE id = :i", i=invoice_id) == "OPEN"
    assert await scalar(engine, "SELECT count(*) FROM webhook_event") == 3


async def test_malformed_events_are_refused(
    anonymous: httpx.AsyncClient, clock: ManualClock
) -> None:
    assert_problem(await deliver(anonymous, clock, b"{not json"), 400, "malformed-json")
    no_object = {"id": "evt_1", "type": "payment_intent.succeeded", "data": {}}
    assert_problem(await deliver(anonymous, clock, no_object), 422, "validation-error")


async def test_dispute_and_refund_at_stripe_are_items_for_a_person(
    anonymous: httpx.AsyncClient, client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    invoice_id = await open_invoice(client, engine)
    paid = intent(invoice_id)
    await deliver(anonymous, clock, stripe_event("payment_intent.succeeded", paid))
    dispute = {
        "id": "dp_1MtJUT2eZvKYlo2CNaw2HvEv",
        "object": "dispute",
        "amount": 990,
        "currency": "eur",
        "charge": "ch_3MtJUT2eZvKYlo2C",
        "payment_intent": paid["id"],
        "reason": "fraudulent",
        "status": "needs_response",
    }
    refunded = {
        "id": "ch_3MtJUT2eZvKYlo2C",
        "object": "charge",
        "amount": 990,
        "amount_refunded": 990,
        "currency": "eur",
        "payment_intent": paid["id"],
        "refunded": True,
    }
    unknown = {**dispute, "payment_intent": "pi_not_one_of_ours"}
    answers = [
        await deliver(anonymous, clock, stripe_event("charge.dispute.created", dispute)),
        await deliver(anonymous, clock, stripe_event("charge.refunded", refunded)),
        await deliver(anonymous, clock, stripe_event("charge.dispute.created", unknown)),
    ]
    assert [a.json()["result"] for a in answers] == [
        "RECONCILIATION",
        "RECONCILIATION",
        "NOT_FOUND",
    ]
    items = await rows(
        engine,
        "SELECT invoice_id, kind, reason, gateway_reference FROM reconciliation_item ORDER BY id",
    )
    assert [(i["invoice_id"], i["kind"], i["gateway_reference"]) for i in items] == [
        (invoice_id, "dispute_created", paid["id"]),
        (invoice_id, "refunded_at_gateway", paid["id"]),
    ]
    assert "fraudulent" in items[0]["reason"] and "990 EUR" in items[0]["reason"]


async def test_our_own_refund_reported_by_stripe_changes_nothing(
    anonymous: httpx.AsyncClient, client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    invoice_id = await open_invoice(client, engine)
    paid = intent(invoice_id)
    await deliver(anonymous, clock, stripe_event("payment_intent.succeeded", paid))
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO refund (invoice_id, subscription_id, payment_attempt_id, charge_key,"
                " charge_reference, idempotency_key, amount, currency, reason, status,"
                " requested_at)"
                " SELECT i.id, i.subscription_id, pa.id, pa.idempotency_key, pa.gateway_reference,"
                " 'ref-' || pa.id, 990, 'EUR', 'duplicate_charge', 'REQUESTED', now()"
                " FROM invoice i JOIN payment_attempt pa ON pa.invoice_id = i.id WHERE i.id = :i"
            ),
            {"i": invoice_id},
        )
    refunded = {
        "id": "ch_3MtJUT2eZvKYlo2C",
        "object": "charge",
        "amount_refunded": 990,
        "currency": "eur",
        "payment_intent": paid["id"],
    }
    answer = await deliver(anonymous, clock, stripe_event("charge.refunded", refunded))
    assert answer.json()["result"] == "IGNORED"
    assert await scalar(engine, "SELECT count(*) FROM reconciliation_item") == 0
