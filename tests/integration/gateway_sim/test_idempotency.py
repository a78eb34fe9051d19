"""Idempotency: a key is charged at most once, whatever the timing of its requests."""

from __future__ import annotations

import asyncio

import httpx

from tests.integration.gateway_sim.conftest import (
    charge,
    charge_body,
    configure,
    ledger_charges,
    summary,
)


async def test_replays_a_success_with_the_stored_result(gw: httpx.AsyncClient) -> None:
    first = await charge(gw, invoice=11)
    again = await charge(gw, invoice=11)

    assert first.status_code == 200
    assert first.json()["status"] == "succeeded"
    assert "idempotent-replayed" not in first.headers
    assert again.status_code == 200
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json() == first.json()
    assert (await summary(gw))["charges_succeeded"] == 1


async def test_replays_a_decline_with_the_stored_result(gw: httpx.AsyncClient) -> None:
    await configure(gw, decline_rate=1.0, decline_codes=["do_not_honor"])
    first = await charge(gw, invoice=12)
    await configure(gw, decline_rate=0.0)
    again = await charge(gw, invoice=12)

    assert first.status_code == 402
    assert first.json()["declineCode"] == "do_not_honor"
    assert again.status_code == 402
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json() == first.json()
    totals = await summary(gw)
    assert (totals["charges_succeeded"], totals["declines"]) == (0, 1)


async def test_same_key_with_a_different_body_is_a_conflict(gw: httpx.AsyncClient) -> None:
    assert (await charge(gw, invoice=13, amount=500)).status_code == 200

    conflict = await charge(gw, invoice=13, amount=501)

    assert conflict.status_code == 409
    assert conflict.headers["content-type"] == "application/problem+json"
    assert conflict.json()["status"] == 409
    assert [c["amount"] for c in await ledger_charges(gw, invoiceId=13)] == [500]


async def test_key_order_and_spacing_of_the_body_do_not_make_it_different(
    gw: httpx.AsyncClient,
) -> None:
    body = charge_body(14)
    first = await gw.post("/v1/charges", json=body, headers={"Idempotency-Key": "k-14"})
    reordered = '{"metadata": {"attempt": 0, "invoiceId": 14}, "currency": "EUR", ' + (
        f'"amount": {body["amount"]}, "customerId": {body["customerId"]}}}'
    )
    again = await gw.post(
        "/v1/charges",
        content=reordered,
        headers={"Idempotency-Key": "k-14", "Content-Type": "application/json"},
    )

    assert first.status_code == 200
    assert again.status_code == 200
    assert again.headers["idempotent-replayed"] == "true"


async def test_concurrent_requests_with_one_key_charge_once(gw: httpx.AsyncClient) -> None:
    await configure(gw, latency_min_ms=200, latency_max_ms=200)

    responses = await asyncio.gather(*(charge(gw, invoice=15) for _ in range(10)))

    assert {r.status_code for r in responses} == {200}
    assert len({r.json()["id"] for r in responses}) == 1
    fresh = [r for r in responses if "idempotent-replayed" not in r.headers]
    assert len(fresh) == 1
    totals = await summary(gw)
    assert totals["charges_succeeded"] == 1
    assert totals["calls"] == 10
    assert totals["replays"] == 9
    assert len(await ledger_charges(gw, invoiceId=15)) == 1


async def test_timeout_charges_then_answers_too_late_and_the_retry_gets_the_charge(
    gw: httpx.AsyncClient,
) -> None:
    await configure(gw, timeout_rate=1.0, timeout_delay_seconds=3.0)
    try:
        await charge(gw, invoice=16, timeout=0.5)
        raise AssertionError("the simulator answered before the client timeout")
    except httpx.ReadTimeout:
        pass
    stored = await ledger_charges(gw, invoiceId=16)
    await configure(gw, timeout_rate=0.0)

    retry = await charge(gw, invoice=16, timeout=2.0)

    assert [(c["status"], c["late"]) for c in stored] == [("succeeded", True)]
    assert retry.status_code == 200
    assert retry.headers["idempotent-replayed"] == "true"
    assert retry.json()["id"] == stored[0]["id"]
    totals = await summary(gw)
    assert (totals["charges_succeeded"], totals["timeouts"]) == (1, 1)


async def test_server_error_stores_nothing_and_the_key_stays_free(gw: httpx.AsyncClient) -> None:
    await configure(gw, error_rate=1.0)
    failed = await charge(gw, invoice=17)
    assert failed.status_code in (500, 502, 503)
    assert failed.headers["content-type"] == "application/problem+json"
    assert await ledger_charges(gw, idempotencyKey="inv-17-try-0") == []
    await configure(gw, error_rate=0.0)

    retry = await charge(gw, invoice=17)

    assert retry.status_code == 200
    assert "idempotent-replayed" not in retry.headers
    totals = await summary(gw)
    assert (totals["charges_succeeded"], totals["server_errors"], totals["calls"]) == (1, 1, 2)


async def test_invalid_requests_are_refused_with_a_problem(gw: httpx.AsyncClient) -> None:
    no_key = await gw.post("/v1/charges", json=charge_body(18))
    float_amount = await gw.post(
        "/v1/charges",
        json={**charge_body(18), "amount": 19.9},
        headers={"Idempotency-Key": "inv-18-try-0"},
    )
    no_invoice = await gw.post(
        "/v1/charges",
        json={**charge_body(18), "metadata": {"attempt": 0}},
        headers={"Idempotency-Key": "inv-18-try-0"},
    )

    for response in (no_key, float_amount, no_invoice):
        assert response.status_code == 400
        assert response.headers["content-type"] == "application/problem+json"
    totals = await summary(gw)
    assert (totals["invalid_requests"], totals["charges_succeeded"]) == (3, 0)
