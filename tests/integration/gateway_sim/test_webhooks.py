"""Signed webhooks: valid signatures, duplicates and reordering at the configured rates, retries."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import time
from collections import Counter

import httpx

from services.api.schemas import WebhookEvent
from tests.integration.gateway_sim.conftest import Receiver, charge, configure

SECRETS = ("whsec_old", "whsec_new")


def signature_valid(header: str, body: bytes, secret: str) -> bool:
    parts = [p.split("=", 1) for p in header.split(",")]
    timestamp = next(v for k, v in parts if k == "t")
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return any(k == "v1" and hmac.compare_digest(v, expected.hexdigest()) for k, v in parts)


def signed_at(header: str) -> int:
    return int(dict(p.split("=", 1) for p in header.split(",") if p.startswith("t="))["t"])


async def test_webhooks_are_signed_duplicated_and_reordered_at_the_configured_rates(
    gw: httpx.AsyncClient, receiver: Receiver
) -> None:
    await configure(
        gw,
        decline_rate=0.3,
        webhook_url=receiver.url,
        webhook_secret=",".join(SECRETS),
        webhook_delay_min_ms=20,
        webhook_delay_max_ms=20,
        webhook_duplicate_rate=0.2,
        webhook_reorder_rate=0.2,
        webhook_reorder_delay_ms=1500,
    )
    answered: dict[int, float] = {}
    charges: dict[int, dict[str, object]] = {}
    invoices = range(1, 301)
    for invoice in invoices:
        response = await charge(gw, invoice=invoice)
        answered[invoice] = time.monotonic()
        charges[invoice] = response.json()
    await receiver.settle(quiet=2.0)

    deliveries = receiver.deliveries
    events = [json.loads(d.body) for d in deliveries]
    # Every delivery is signed with every configured secret, at about the time it was sent.
    unsigned = [
        d for d in deliveries if not all(signature_valid(d.signature, d.body, s) for s in SECRETS)
    ]
    assert unsigned == []
    assert [d for d in deliveries if abs(signed_at(d.signature) - time.time()) > 30] == []
    assert not signature_valid(deliveries[0].signature, deliveries[0].body, "whsec_wrong")
    # One event per charge, describing it; duplicates repeat the same event byte for byte.
    by_invoice: dict[int, set[str]] = {}
    bodies_by_id: dict[str, set[bytes]] = {}
    for event, delivery in zip(events, deliveries, strict=True):
        WebhookEvent.model_validate_json(delivery.body)  # what the API's receiver requires
        data = event["data"]
        stored = charges[data["invoiceId"]]
        assert (data["amount"], data["currency"]) == (stored["amount"], stored["currency"])
        assert data["chargeId"] == stored["id"]
        assert data["idempotencyKey"] == f"inv-{data['invoiceId']}-try-0"
        assert event["type"] == f"charge.{stored['status']}"
        assert data["declineCode"] == stored["declineCode"]
        by_invoice.setdefault(data["invoiceId"], set()).add(event["id"])
        bodies_by_id.setdefault(event["id"], set()).add(delivery.body)
    assert sorted(by_invoice) == list(invoices)
    assert all(len(ids) == 1 for ids in by_invoice.values())
    assert all(len(bodies) == 1 for bodies in bodies_by_id.values())
    copies = Counter(e["id"] for e in events)
    assert set(copies.values()) <= {1, 2}
    duplicated = sum(1 for n in copies.values() if n == 2)
    # 300 events at p = 0.2: mean 60, standard deviation 6.9; allow 4 deviations.
    assert 32 <= duplicated <= 88
    # Held-back deliveries arrive 1.5 s late; the others after about 20 ms.
    delays = [
        d.arrived - answered[e["data"]["invoiceId"]]
        for d, e in zip(deliveries, events, strict=True)
    ]
    held_back = sum(1 for delay in delays if delay > 0.9)
    # len(deliveries) (about 360) at p = 0.2: mean about 72, deviation about 7.6.
    assert 0.2 * len(deliveries) - 31 <= held_back <= 0.2 * len(deliveries) + 31
    # ... so later events overtake them.
    first_seen: dict[int, int] = {}
    for position, event in enumerate(events):
        first_seen.setdefault(event["data"]["invoiceId"], position)
    order = [invoice for invoice, _ in sorted(first_seen.items(), key=lambda kv: kv[1])]
    assert order != sorted(order)


async def test_failed_deliveries_are_retried_with_backoff(
    gw: httpx.AsyncClient, receiver: Receiver
) -> None:
    receiver.fail_attempts = 2
    await configure(
        gw,
        webhook_url=receiver.url,
        webhook_secret="whsec_x",
        webhook_delay_min_ms=0,
        webhook_delay_max_ms=0,
        webhook_max_attempts=4,
        webhook_retry_base_ms=50,
    )
    for invoice in range(5):
        await charge(gw, invoice=invoice)
    await receiver.settle()

    assert sorted(receiver.attempts_by_event.values()) == [3] * 5
    by_event: dict[str, list[float]] = {}
    for delivery in receiver.deliveries:
        by_event.setdefault(json.loads(delivery.body)["id"], []).append(delivery.arrived)
    for arrivals in by_event.values():
        gaps = [b - a for a, b in itertools.pairwise(arrivals)]
        assert gaps[0] >= 0.045 and gaps[1] >= 0.095  # 50 ms, then doubled


async def test_retries_are_bounded(gw: httpx.AsyncClient, receiver: Receiver) -> None:
    receiver.fail_attempts = 1000
    await configure(
        gw,
        webhook_url=receiver.url,
        webhook_secret="whsec_x",
        webhook_delay_min_ms=0,
        webhook_delay_max_ms=0,
        webhook_max_attempts=3,
        webhook_retry_base_ms=20,
    )
    await charge(gw, invoice=1)
    await receiver.settle()

    assert list(receiver.attempts_by_event.values()) == [3]


async def test_no_webhooks_without_a_url(gw: httpx.AsyncClient, receiver: Receiver) -> None:
    await configure(gw, webhook_delay_min_ms=0, webhook_delay_max_ms=0)
    await charge(gw, invoice=1)
    await configure(gw, webhook_url=receiver.url, webhook_secret="whsec_x")
    await charge(gw, invoice=2)
    await receiver.settle()

    assert [json.loads(d.body)["data"]["invoiceId"] for d in receiver.deliveries] == [2]


async def test_lost_webhooks_are_never_sent_and_counted(
    gw: httpx.AsyncClient, receiver: Receiver
) -> None:
    """With ``webhook_loss_rate`` a result's webhook never comes (the charge is made all the
    same): only the call's answer, or a look-up of its key, tells what happened."""
    await configure(
        gw,
        webhook_url=receiver.url,
        webhook_secret=SECRETS[0],
        webhook_delay_min_ms=10,
        webhook_delay_max_ms=10,
        webhook_loss_rate=0.5,
    )
    for invoice in range(200):
        assert (await charge(gw, invoice=invoice)).status_code == 200
    await receiver.settle(quiet=1.0)
    delivered = {json.loads(d.body)["data"]["invoiceId"] for d in receiver.deliveries}
    summary = (await gw.get("/v1/ledger/summary")).json()
    assert summary["charges_succeeded"] == 200
    assert len(delivered) + summary["webhooks_lost"] == 200
    assert 60 < summary["webhooks_lost"] < 140
