"""Look-up by idempotency key: what the gateway did with a key, answered from its ledger."""

from __future__ import annotations

import asyncio

import httpx

from tests.integration.gateway_sim.conftest import charge, configure, summary


async def lookup(gw: httpx.AsyncClient, key: str) -> httpx.Response:
    return await gw.post("/v1/charges/lookup", json={"idempotencyKey": key})


async def test_a_charged_key_is_answered_with_the_stored_charge(gw: httpx.AsyncClient) -> None:
    made = await charge(gw, invoice=21, amount=990)
    found = await lookup(gw, "inv-21-try-0")
    assert found.status_code == 200
    assert found.json() == made.json()
    assert (found.json()["status"], found.json()["amount"]) == ("succeeded", 990)
    totals = await summary(gw)
    # a look-up never charges and is not a replay of the charge
    assert (totals["charges_succeeded"], totals["replays"]) == (1, 0)
    assert (totals["lookups"], totals["lookups_found"]) == (1, 1)


async def test_a_declined_key_is_answered_with_its_decline(gw: httpx.AsyncClient) -> None:
    await configure(gw, decline_rate=1.0, decline_codes=["expired_card"])
    await charge(gw, invoice=22)
    found = await lookup(gw, "inv-22-try-0")
    assert found.status_code == 200
    assert (found.json()["status"], found.json()["declineCode"]) == ("declined", "expired_card")


async def test_a_key_never_stored_is_404_even_after_a_5xx(gw: httpx.AsyncClient) -> None:
    """A 5xx stores nothing: the look-up says the key was never charged."""
    await configure(gw, error_rate=1.0)
    assert (await charge(gw, invoice=23)).status_code >= 500
    missing = await lookup(gw, "inv-23-try-0")
    assert missing.status_code == 404
    assert missing.headers["content-type"] == "application/problem+json"
    assert (await lookup(gw, "inv-999-try-0")).status_code == 404


async def test_a_charge_answered_too_late_is_found_at_once(gw: httpx.AsyncClient) -> None:
    """The charge is stored before its late answer: the look-up knows before the caller does."""
    await configure(gw, timeout_rate=1.0, timeout_delay_seconds=5.0)
    late = asyncio.create_task(charge(gw, invoice=24, timeout=1.0))
    await asyncio.sleep(0.3)
    found = await lookup(gw, "inv-24-try-0")
    assert (found.status_code, found.json()["status"]) == (200, "succeeded")
    try:
        await late
    except httpx.TimeoutException:
        pass


async def test_a_key_still_being_processed_is_409_not_404(gw: httpx.AsyncClient) -> None:
    """Not found would be a lie while the charge may still be made."""
    await configure(gw, latency_min_ms=1500, latency_max_ms=1500)
    pending = asyncio.create_task(charge(gw, invoice=25))
    await asyncio.sleep(0.3)
    await configure(gw, latency_min_ms=0, latency_max_ms=0)
    busy = await lookup(gw, "inv-25-try-0")
    assert busy.status_code == 409
    assert (await pending).status_code == 200
    assert (await lookup(gw, "inv-25-try-0")).status_code == 200


async def test_lookups_share_the_rate_limit_and_credentials_of_charges(
    gw: httpx.AsyncClient,
) -> None:
    await configure(gw, rate_limit_per_second=3)
    answers = [(await lookup(gw, f"inv-26-try-{i}")).status_code for i in range(4)]
    assert answers == [404, 404, 404, 429]
    assert (await charge(gw, invoice=26)).status_code == 429  # the look-ups used the budget
    totals = await summary(gw)
    assert (totals["calls"], totals["rate_limited_429"]) == (3, 2)
    await configure(gw, rate_limit_per_second=0, reject_credentials=True)
    assert (await lookup(gw, "inv-26-try-0")).status_code == 401


async def test_lookup_failures_and_bad_requests(gw: httpx.AsyncClient) -> None:
    await charge(gw, invoice=27)
    await configure(gw, lookup_error_rate=1.0)
    assert (await lookup(gw, "inv-27-try-0")).status_code == 503
    assert (await summary(gw))["lookup_errors"] == 1
    await configure(gw, lookup_error_rate=0.0)
    assert (await gw.post("/v1/charges/lookup", json={"key": "x"})).status_code == 400
    assert (await gw.post("/v1/charges/lookup", content=b"nope")).status_code == 400
