"""The simulator's own limit: calls admitted per ROLLING second, 429 past it, all counted."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from tests.integration.gateway_sim.conftest import (
    SimProcess,
    charge,
    charge_body,
    configure,
    summary,
)

pytestmark = pytest.mark.timing  # measures real time: run alone, never beside other tests


async def _burst(url: str, requests: list[bytes]) -> list[tuple[int, dict[str, str]]]:
    """Send each request on its own already-open connection, all at once; (status, headers).

    A plain HTTP/1.1 writer rather than httpx: its per-request work, multiplied by 300, could
    spread the burst over more than a second on a busy machine and test the client instead.
    """
    host, port = url.removeprefix("http://").split(":")
    connections = [await asyncio.open_connection(host, int(port)) for _ in requests]
    for (_, writer), request in zip(connections, requests, strict=True):
        writer.write(request)

    async def answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        headers = dict(line.lower().split(": ", 1) for line in head[1:] if line)
        await reader.readexactly(int(headers["content-length"]))
        return int(head[0].split()[1]), headers

    try:
        return await asyncio.gather(*(answer(reader) for reader, _ in connections))
    finally:
        for _, writer in connections:
            writer.close()


def _raw_charge(invoice: int) -> bytes:
    body = json.dumps(charge_body(invoice)).encode()
    head = (
        f"POST /v1/charges HTTP/1.1\r\nHost: gateway\r\nIdempotency-Key: inv-{invoice}-try-0\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def test_a_burst_of_300_gets_200_charges_and_100_refusals(
    gw: httpx.AsyncClient, simulator: SimProcess
) -> None:
    await configure(gw, rate_limit_per_second=200)

    answers = await _burst(simulator.url, [_raw_charge(1000 + n) for n in range(300)])

    totals = await summary(gw)
    # The server's own clock says all 300 arrived within one rolling second.
    assert totals["max_arrivals_in_any_rolling_second"] == 300
    statuses = [status for status, _ in answers]
    assert statuses.count(200) == 200
    assert statuses.count(429) == 100
    refused = next(headers for status, headers in answers if status == 429)
    assert refused["content-type"] == "application/problem+json"
    assert int(refused["retry-after"]) >= 1
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
