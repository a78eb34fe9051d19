"""Gateway webhooks: signature checks first, then exactly-once, order-proof recording."""

from __future__ import annotations

import json
import random
import uuid
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from billing_core.db import pg
from billing_core.domain.charge_result import ChargeOutcome, RecordOutcome
from billing_core.domain.dunning import DunningPolicy
from billing_core.usecases.payment_result import record_charge_result
from services.api.app import create_app
from services.api.settings import ApiSettings
from services.api.signatures import compute, sign_header
from tests.integration.api.conftest import SECRETS, asgi_client
from tests.integration.api.helpers import (
    assert_problem,
    known_customers,
    leased,
    rows,
    scalar,
    subscribe,
)

PATH = "/webhooks/payments"


def event(
    invoice_id: int,
    *,
    attempt: int = 0,
    kind: str = "charge.succeeded",
    event_id: str | None = None,
) -> dict[str, Any]:
    return {
        "id": event_id or f"evt_{uuid.uuid4().hex}",
        "type": kind,
        "created": 1_773_135_000,
        "data": {
            "chargeId": f"ch_{uuid.uuid4().hex[:12]}",
            "idempotencyKey": f"inv-{invoice_id}-try-{attempt}",
            "invoiceId": invoice_id,
            "attempt": attempt,
            "customerId": 42,
            "amount": 990,
            "currency": "EUR",
            "declineCode": "card_declined" if kind == "charge.declined" else None,
        },
    }


async def deliver(
    client: httpx.AsyncClient,
    clock: ManualClock,
    payload: dict[str, Any] | bytes,
    *,
    secret: str = SECRETS[0],
    age_seconds: int = 0,
    header: str | None = None,
) -> httpx.Response:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    t = int(clock.now().timestamp()) - age_seconds
    headers = {"content-type": "application/json"}
    headers["Billing-Signature"] = header or sign_header(secret.encode(), t, body)
    return await client.post(PATH, content=body, headers=headers)


async def open_invoice(client: httpx.AsyncClient, engine: AsyncEngine) -> tuple[int, int]:
    await known_customers(engine, 42)  # the customer the gateway's events name
    sub = await subscribe(client, customer=42)
    invoice_id = await scalar(
        engine, "SELECT id FROM invoice WHERE subscription_id = :s", s=sub["id"]
    )
    return int(sub["id"]), int(invoice_id)


async def invoice_state(engine: AsyncEngine, invoice_id: int) -> tuple[str, int]:
    row = (
        await rows(engine, "SELECT status, attempt_count FROM invoice WHERE id = :i", i=invoice_id)
    )[0]
    return row["status"], row["attempt_count"]


async def attempts(engine: AsyncEngine, invoice_id: int) -> list[tuple[str, str, int]]:
    found = await rows(
        engine,
        "SELECT source, outcome, attempt_number FROM payment_attempt WHERE invoice_id = :i "
        "ORDER BY id",
        i=invoice_id,
    )
    return [(r["source"], r["outcome"], r["attempt_number"]) for r in found]


async def collector_answered(
    pool: pg.Pool,
    clock: ManualClock,
    invoice_id: int,
    attempt: int,
    outcome: ChargeOutcome = ChargeOutcome.DECLINED,
) -> RecordOutcome:
    """The answer to the collector's own call under ``inv-<id>-try-<attempt>``, recorded."""
    async with pg.transaction(pool) as conn:
        return await record_charge_result(
            conn,
            invoice_id=invoice_id,
            attempt_number=attempt,
            outcome=outcome,
            source="COLLECTOR",
            idempotency_key=f"inv-{invoice_id}-try-{attempt}",
            decline_code="card_declined" if outcome == ChargeOutcome.DECLINED else None,
            now=clock.now(),
            rng=random.Random(1),
            policy=DunningPolicy(),
        )


async def test_valid_success_pays_the_invoice_and_duplicate_has_no_effect(
    anonymous: httpx.AsyncClient, client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    _, invoice_id = await open_invoice(client, engine)
    await leased(engine, invoice_id)
    evt = event(invoice_id)
    first = await deliver(anonymous, clock, evt)
    assert first.status_code == 200, first.text
    assert first.json() == {"eventId": evt["id"], "result": "APPLIED"}
    assert await invoice_state(engine, invoice_id) == ("PAID", 0)
    assert await attempts(engine, invoice_id) == [("WEBHOOK", "SUCCESS", 0)]

    again = await deliver(anonymous, clock, evt)  # the gateway redelivers
    assert again.status_code == 200
    assert again.json()["result"] == "DUPLICATE"
    assert await attempts(engine, invoice_id) == [("WEBHOOK", "SUCCESS", 0)]
    assert await scalar(engine, "SELECT count(*) FROM webhook_event") == 1


async def test_signature_failures_are_401_before_parsing(
    anonymous: httpx.AsyncClient, client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    _, invoice_id = await open_invoice(client, engine)
    evt = event(invoice_id)
    body = json.dumps(evt).encode()
    t = int(clock.now().timestamp())

    wrong_secret = await deliver(anonymous, clock, evt, secret="whsec_attacker")
    assert_problem(wrong_secret, 401, "invalid-signature")
    missing = await anonymous.post(PATH, content=body, headers={"content-type": "application/json"})
    assert_problem(missing, 401, "invalid-signature")
    expired = await deliver(anonymous, clock, evt, age_seconds=301)
    assert_problem(expired, 401, "invalid-signature")
    future = await deliver(anonymous, clock, evt, age_seconds=-301)
    assert_problem(future, 401, "invalid-signature")
    tampered = await deliver(
        anonymous,
        clock,
        body.replace(b'"amount": 990', b'"amount": 1'),
        header=sign_header(SECRETS[0].encode(), t, body),
    )
    assert_problem(tampered, 401, "invalid-signature")
    garbage = await deliver(anonymous, clock, b"{not json", header=f"t={t},v1={'0' * 64}")
    assert_problem(garbage, 401, "invalid-signature")  # not 400: never parsed unverified
    no_timestamp = await deliver(
        anonymous, clock, evt, header=f"v1={compute(SECRETS[0].encode(), t, body)}"
    )
    assert_problem(no_timestamp, 401, "invalid-signature")

    assert await invoice_state(engine, invoice_id) == ("OPEN", 0)
    assert await attempts(engine, invoice_id) == []
    assert await scalar(engine, "SELECT count(*) FROM webhook_event") == 0

    almost_too_old = await deliver(anonymous, clock, evt, age_seconds=299)
    assert almost_too_old.status_code == 200


async def test_rotated_secrets(
    anonymous: httpx.AsyncClient, client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    _, invoice_id = await open_invoice(client, engine)
    await leased(engine, invoice_id)
    by_old_secret = await deliver(
        anonymous, clock, event(invoice_id, kind="charge.declined"), secret=SECRETS[1]
    )
    assert by_old_secret.status_code == 200, by_old_secret.text

    await leased(engine, invoice_id)
    evt = event(invoice_id, attempt=1)
    body = json.dumps(evt).encode()
    t = int(clock.now().timestamp())
    two_entries = (
        f"t={t},v1={compute(b'whsec_retired', t, body)},v1={compute(SECRETS[0].encode(), t, body)}"
    )
    both = await deliver(anonymous, clock, body, header=two_entries)
    assert both.status_code == 200, both.text
    assert both.json()["result"] == "APPLIED"
    assert await invoice_state(engine, invoice_id) == ("PAID", 1)


async def test_out_of_order_results_never_roll_back(
    anonymous: httpx.AsyncClient,
    client: httpx.AsyncClient,
    engine: AsyncEngine,
    pool: pg.Pool,
    clock: ManualClock,
) -> None:
    _, invoice_id = await open_invoice(client, engine)
    # Attempt 0 was declined, attempt 1 succeeded; the webhooks arrive success first.
    await collector_answered(pool, clock, invoice_id, 0)
    await leased(engine, invoice_id)
    paid = await deliver(anonymous, clock, event(invoice_id, attempt=1))
    assert paid.json()["result"] == "APPLIED"
    late_decline = await deliver(anonymous, clock, event(invoice_id, kind="charge.declined"))
    assert late_decline.status_code == 200
    assert late_decline.json()["result"] == "ALREADY_SETTLED"
    assert await invoice_state(engine, invoice_id) == ("PAID", 1)
    assert [a[1] for a in await attempts(engine, invoice_id)] == ["DECLINED", "SUCCESS", "DECLINED"]


async def test_stale_attempt_is_recorded_without_effect(
    anonymous: httpx.AsyncClient,
    client: httpx.AsyncClient,
    engine: AsyncEngine,
    pool: pg.Pool,
    clock: ManualClock,
) -> None:
    sub_id, invoice_id = await open_invoice(client, engine)
    await leased(engine, invoice_id)
    declined = await deliver(anonymous, clock, event(invoice_id, kind="charge.declined"))
    assert declined.json()["result"] == "APPLIED"
    assert await invoice_state(engine, invoice_id) == ("OPEN", 1)
    assert await scalar(engine, "SELECT status FROM subscription WHERE id = :s", s=sub_id) == (
        "PAST_DUE"
    )
    # The collector's own answer, then a second, different event about attempt 0 (already
    # decided): neither changes anything.
    own = await collector_answered(pool, clock, invoice_id, 0)
    assert own == RecordOutcome.STALE_ATTEMPT
    stale = await deliver(anonymous, clock, event(invoice_id, kind="charge.declined"))
    assert stale.json()["result"] == "STALE_ATTEMPT"
    assert await invoice_state(engine, invoice_id) == ("OPEN", 1)
    assert len(await attempts(engine, invoice_id)) == 3

    await leased(engine, invoice_id)
    recovered = await deliver(anonymous, clock, event(invoice_id, attempt=1))
    assert recovered.json()["result"] == "APPLIED"
    assert await invoice_state(engine, invoice_id) == ("PAID", 1)
    assert await scalar(engine, "SELECT status FROM subscription WHERE id = :s", s=sub_id) == (
        "ACTIVE"
    )


async def test_success_after_failed_or_void_is_refunded(
    anonymous: httpx.AsyncClient,
    client: httpx.AsyncClient,
    engine: AsyncEngine,
    pool: pg.Pool,
    clock: ManualClock,
) -> None:
    _, invoice_id = await open_invoice(client, engine)
    await leased(engine, invoice_id)  # its call's answer never recorded
    async with engine.begin() as conn:  # dunning gave up on it
        from sqlalchemy import text  # noqa: PLC0415

        await conn.execute(
            text("UPDATE invoice SET status = 'FAILED', next_attempt_at = NULL WHERE id = :i"),
            {"i": invoice_id},
        )
    late = await deliver(anonymous, clock, event(invoice_id))
    assert late.status_code == 200
    assert late.json()["result"] == "REFUND"
    assert await invoice_state(engine, invoice_id) == ("FAILED", 0)
    assert await attempts(engine, invoice_id) == [("WEBHOOK", "SUCCESS", 0)]
    requested = await scalar(
        engine,
        "SELECT count(*) FROM refund WHERE invoice_id = :i AND status = 'REQUESTED' "
        "AND reason = 'charged_closed_invoice'",
        i=invoice_id,
    )
    assert requested == 1
    # The same event delivered again, under a new event id: still one refund for that charge.
    replayed = await deliver(anonymous, clock, event(invoice_id))
    assert replayed.json()["result"] == "REFUND"
    refunds = "SELECT count(*) FROM refund WHERE invoice_id = :i"
    assert await scalar(engine, refunds, i=invoice_id) == 1

    other_sub, other_invoice = await open_invoice(client, engine)
    uncertain = ChargeOutcome.UNKNOWN  # the collector's call timed out: it may have charged
    await collector_answered(pool, clock, other_invoice, 0, uncertain)
    canceled = await client.post(f"/subscriptions/{other_sub}/cancel", json={"atPeriodEnd": False})
    assert canceled.status_code == 200
    after_void = await deliver(anonymous, clock, event(other_invoice))
    assert after_void.json()["result"] == "REFUND"
    assert await invoice_state(engine, other_invoice) == ("VOID", 0)
    assert await attempts(engine, other_invoice) == [
        ("COLLECTOR", "UNKNOWN", 0),
        ("WEBHOOK", "SUCCESS", 0),
    ]
    assert await scalar(engine, refunds, i=other_invoice) == 1


async def test_signed_but_invalid_bodies(
    anonymous: httpx.AsyncClient, client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    _, invoice_id = await open_invoice(client, engine)
    assert_problem(await deliver(anonymous, clock, b'{"id": '), 400, "malformed-json")
    missing_data = await deliver(anonymous, clock, {"id": "evt_1", "type": "charge.succeeded"})
    assert_problem(missing_data, 422, "validation-error")
    mismatched = event(invoice_id)
    mismatched["data"]["idempotencyKey"] = f"inv-{invoice_id}-try-7"
    assert_problem(await deliver(anonymous, clock, mismatched), 422, "validation-error")
    unknown_type = await deliver(anonymous, clock, event(invoice_id, kind="charge.refunded"))
    assert unknown_type.status_code == 200
    assert unknown_type.json()["result"] == "IGNORED"
    unknown_invoice = await deliver(anonymous, clock, event(invoice_id + 1000))
    assert unknown_invoice.json()["result"] == "NOT_FOUND"
    assert await invoice_state(engine, invoice_id) == ("OPEN", 0)


async def test_a_signed_event_that_does_not_match_the_invoice_is_recorded_never_applied(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    """The probe that once paid an invoice: attempt 99 (never made) and amount 1 (it is 990)."""
    sub_id, invoice_id = await open_invoice(client, engine)
    await leased(engine, invoice_id)  # attempt 0's call is at the gateway
    forged = event(invoice_id, attempt=99)
    forged["data"]["amount"] = 1
    response = await deliver(client, clock, forged)
    assert response.status_code == 200 and response.json()["result"] == "MISMATCH"
    assert await invoice_state(engine, invoice_id) == ("OPEN", 0)
    [audit] = await rows(
        engine,
        "SELECT attempt_number, outcome, amount, currency FROM payment_attempt"
        " WHERE invoice_id = :i",
        i=invoice_id,
    )
    assert (audit["attempt_number"], audit["outcome"], audit["amount"]) == (99, "SUCCESS", 1)
    reasons = await rows(
        engine,
        "SELECT payload->>'reason' AS reason FROM outbox_event"
        " WHERE aggregate_id = :s AND event_type = 'PaymentReconciliationNeeded'",
        s=sub_id,
    )
    assert [r["reason"] for r in reasons] == ["report_mismatch: attempt 99 was never sent (at 0)"]

    other_amount = event(invoice_id)
    other_amount["data"]["amount"] = 1
    assert (await deliver(client, clock, other_amount)).json()["result"] == "MISMATCH"
    other_customer = event(invoice_id)
    other_customer["data"]["customerId"] = 43
    assert (await deliver(client, clock, other_customer)).json()["result"] == "MISMATCH"
    assert await invoice_state(engine, invoice_id) == ("OPEN", 0)

    assert (await deliver(client, clock, event(invoice_id))).json()["result"] == "APPLIED"
    assert await invoice_state(engine, invoice_id) == ("PAID", 0)


async def test_with_a_key_prefix_only_this_deployments_keys_are_accepted(
    api_settings: ApiSettings, clock: ManualClock, engine: AsyncEngine, api_key: str
) -> None:
    """A staging system sharing the gateway account (or a restored backup) has other keys."""
    prefixed = api_settings.model_copy(update={"gateway_key_prefix": "prod-"})
    app = create_app(prefixed, clock)
    async with app.router.lifespan_context(app), asgi_client(app, api_key) as client:
        _, invoice_id = await open_invoice(client, engine)
        await leased(engine, invoice_id)
        unprefixed = event(invoice_id)
        response = await deliver(client, clock, unprefixed)
        assert response.status_code == 422
        assert await invoice_state(engine, invoice_id) == ("OPEN", 0)
        ours = event(invoice_id)
        ours["data"]["idempotencyKey"] = f"prod-inv-{invoice_id}-try-0"
        assert (await deliver(client, clock, ours)).json()["result"] == "APPLIED"
        assert await invoice_state(engine, invoice_id) == ("PAID", 0)


async def test_a_signed_success_for_an_attempt_never_sent_or_declined_never_pays(
    anonymous: httpx.AsyncClient,
    client: httpx.AsyncClient,
    engine: AsyncEngine,
    pool: pg.Pool,
    clock: ManualClock,
) -> None:
    """In dunning after two declines of the collector's calls, the next attempt not yet made:
    a signed success for that attempt (never sent) or for the last declined one pays nothing;
    each is an item for a person, and the one under a declined key holds the invoice (were it
    true, the next attempt would charge twice)."""
    sub_id, invoice_id = await open_invoice(client, engine)
    for attempt in (0, 1):
        await collector_answered(pool, clock, invoice_id, attempt)
    assert await invoice_state(engine, invoice_id) == ("OPEN", 2)

    never_sent = await deliver(anonymous, clock, event(invoice_id, attempt=2))
    declined = await deliver(anonymous, clock, event(invoice_id, attempt=1))

    assert (never_sent.status_code, never_sent.json()["result"]) == (200, "MISMATCH")
    assert (declined.status_code, declined.json()["result"]) == (200, "MISMATCH")
    assert await invoice_state(engine, invoice_id) == ("OPEN", 2)
    held = "SELECT next_attempt_at FROM invoice WHERE id = :i"
    assert await scalar(engine, held, i=invoice_id) is None
    items = await rows(
        engine,
        "SELECT kind, idempotency_key, reason FROM reconciliation_item WHERE invoice_id = :i"
        " ORDER BY id",
        i=invoice_id,
    )
    assert [(i["kind"], i["idempotency_key"], i["reason"]) for i in items] == [
        (
            "report_mismatch",
            f"inv-{invoice_id}-try-2",
            "report_mismatch: attempt 2 was never sent (at 2)",
        ),
        (
            "report_mismatch",
            f"inv-{invoice_id}-try-1",
            "report_mismatch: attempt 1 was declined, and a success is reported for it",
        ),
    ]
    paid = (
        "SELECT count(*) FROM outbox_event WHERE aggregate_id = :s AND event_type = 'InvoicePaid'"
    )
    assert await scalar(engine, paid, s=sub_id) == 0

    await leased(engine, invoice_id)  # the collector's call for attempt 2 is at the gateway
    sent = await deliver(anonymous, clock, event(invoice_id, attempt=2))
    assert sent.json()["result"] == "APPLIED"
    assert await invoice_state(engine, invoice_id) == ("PAID", 2)


async def test_a_signed_success_that_names_no_amount_currency_or_customer_is_refused(
    anonymous: httpx.AsyncClient, client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    _, invoice_id = await open_invoice(client, engine)
    await leased(engine, invoice_id)  # its call is at the gateway: a full success would pay it
    unsaid = event(invoice_id)
    for name in ("amount", "currency", "customerId"):
        del unsaid["data"][name]
    refused = await deliver(anonymous, clock, unsaid)
    problem = assert_problem(refused, 422, "validation-error")
    assert "data.amount, data.currency, data.customerId" in json.dumps(problem["errors"])
    decline = event(invoice_id, kind="charge.declined")
    del decline["data"]["amount"]  # a decline need not say what it did not charge
    assert (await deliver(anonymous, clock, decline)).json()["result"] == "APPLIED"
    assert await invoice_state(engine, invoice_id) == ("OPEN", 1)
    assert await attempts(engine, invoice_id) == [("WEBHOOK", "DECLINED", 0)]
