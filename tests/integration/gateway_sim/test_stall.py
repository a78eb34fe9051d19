"""A stall: calls sent during it are held, then admitted together; answers wait for the end."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from tests.integration.gateway_sim.conftest import charge, configure, summary

pytestmark = pytest.mark.timing  # measures real time: run alone, never beside other tests


async def stall(client: httpx.AsyncClient, seconds: float) -> None:
    response = await client.post("/v1/admin/stall", json={"seconds": seconds})
    assert response.status_code == 200, response.text


async def test_calls_sent_during_a_stall_land_together_when_it_ends(gw: httpx.AsyncClient) -> None:
    await configure(gw, rate_limit_per_second=200, latency_min_ms=0, latency_max_ms=0)
    in_flight = asyncio.create_task(charge(gw, invoice=0))  # admitted before the stall
    await asyncio.sleep(0.05)
    started = time.monotonic()
    # 3 s: sending the 150 calls takes 1.5 s and more on a loaded machine; all must be sent
    # before the stall ends
    await stall(gw, 3.0)
    # 150 calls spread over the stall, far below the limit as sent (at most 100/s) ...
    calls = []
    for n in range(1, 151):
        calls.append(asyncio.create_task(charge(gw, invoice=n)))
        await asyncio.sleep(0.01)
    answers = await asyncio.gather(*calls)
    waited = time.monotonic() - started
    assert (await in_flight).status_code == 200

    assert all(a.status_code == 200 for a in answers)
    assert waited >= 2.95  # nobody was answered before the end of the stall
    result = await summary(gw)
    assert result["stalls"] == 1
    assert result["held_in_stalls"] == 150
    assert result["max_held_in_a_stall"] == 150
    # ... but all arrive at the end of it, in one rolling second, as the gateway sees them
    assert result["max_calls_in_any_rolling_second"] == 150


async def test_more_held_than_the_limit_turns_into_429s(gw: httpx.AsyncClient) -> None:
    """What a client that keeps sending at the limit through a stall gets."""
    await configure(gw, rate_limit_per_second=100, latency_min_ms=0, latency_max_ms=0)
    await stall(gw, 1.0)
    answers = await asyncio.gather(*(charge(gw, invoice=n) for n in range(150)))
    statuses = [a.status_code for a in answers]
    assert statuses.count(200) == 100
    assert statuses.count(429) == 50
    assert (await summary(gw))["rate_limited_429"] == 50


async def test_health_answers_during_a_stall_and_a_new_order_extends_it(
    gw: httpx.AsyncClient,
) -> None:
    await stall(gw, 0.5)
    assert (await gw.get("/healthz")).status_code == 200  # only charges are held
    await stall(gw, 1.0)  # under way: extended, still one stall
    started = time.monotonic()
    assert (await charge(gw, invoice=1)).status_code == 200
    assert time.monotonic() - started >= 0.9
    assert (await summary(gw))["stalls"] == 1


async def test_an_invalid_stall_order_is_a_problem(gw: httpx.AsyncClient) -> None:
    for body in ({"seconds": 0}, {"seconds": 601}, {"seconds": "soon"}, {}):
        response = await gw.post("/v1/admin/stall", json=body)
        assert response.status_code == 422
        assert response.headers["content-type"] == "application/problem+json"
    assert (await summary(gw))["stalls"] == 0
