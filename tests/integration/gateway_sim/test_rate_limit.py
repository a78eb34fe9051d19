"""The simulator's own limit: calls admitted per ROLLING second, 429 past it, all counted."""

from __future__ import annotations

import asyncio

import httpx

from tests.integration.gateway_sim.conftest import charge, configure, summary


async def test_a_burst_of_300_gets_200_charges_and_100_refusals(gw: httpx.AsyncClient) -> None:
    await configure(gw, rate_limit_per_second=200)
    # Open the connections first so the burst itself is only the 300 charges.
    await asyncio.gather(*(gw.get("/healthz") for _ in range(300)))

    responses = await asyncio.gather(*(charge(gw, invoice=1000 + n) for n in range(300)))

    totals = await summary(gw)
    # The server's own clock says all 300 arrived within one rolling second.
    assert totals["max_arrivals_in_any_rolling_second"] == 300
    statuses = [r.status_code for r in responses]
    assert statuses.count(200) == 200
    assert statuses.count(429) == 100
    refused = next(r for r in responses if r.status_code == 429)
    assert refused.headers["content-type"] == "application/problem+json"
    assert int(refused.headers["retry-after"]) >= 1
    assert totals["charges_succeeded"] == 200
    assert totals["rate_limited_429"] == 100
    assert totals["calls"] == 200
    assert totals["max_calls_in_any_rolling_second"] <= 200
    per_second = (await gw.get("/v1/ledger/calls-per-second")).json()
    assert sum(row["calls"] for row in per_second) == 200
    assert sum(row["rate_limited"] for row in per_second) == 100


async def test_the_window_rolls(gw: httpx.AsyncClient) -> None:
    await configure(gw, rate_limit_per_second=20)
    first = await asyncio.gather(*(charge(gw, invoice=2000 + n) for n in range(20)))
    over = await charge(gw, invoice=2100)
    await asyncio.sleep(1.05)
    after = await charge(gw, invoice=2101)

    assert {r.status_code for r in first} == {200}
    assert over.status_code == 429
    assert after.status_code == 200
    totals = await summary(gw)
    assert totals["max_calls_in_any_rolling_second"] == 20
    assert totals["rate_limited_429"] == 1
