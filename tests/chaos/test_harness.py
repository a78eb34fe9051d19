"""The harness's own bounds: its customers' requests in flight, and the deadline of a run."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.chaos.harness import (
    ChaosConfig,
    Progress,
    customers,
    left_undone,
    within_deadline,
)
from tests.support.asgi_server import serving
from tests.support.processes import free_port


@dataclass
class Api:
    """A stand-in for the API's subscription routes that counts what reaches it."""

    url: str
    hold: asyncio.Event = field(default_factory=asyncio.Event)  # answers wait for it while unset
    in_flight: int = 0
    most_in_flight: int = 0
    connections: set[int] = field(default_factory=set)  # client ports seen


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    port = free_port()
    state = Api(url=f"http://127.0.0.1:{port}")
    state.hold.set()

    async def change(request: Request) -> JSONResponse:
        assert request.client is not None
        state.connections.add(request.client.port)
        state.in_flight += 1
        state.most_in_flight = max(state.most_in_flight, state.in_flight)
        try:
            await asyncio.sleep(0.01)
            await state.hold.wait()
        finally:
            state.in_flight -= 1
        return JSONResponse({"id": int(request.path_params["id"])})

    app = Starlette(routes=[Route("/subscriptions/{id}/{what}", change, methods=["POST"])])
    async with serving(app, port):
        try:
            yield state
        finally:
            state.hold.set()


def planned(n: int, at: float) -> list[tuple[float, int, str]]:
    return [(at, subscription, "cancel now") for subscription in range(1, n + 1)]


async def test_customer_actions_in_flight_never_exceed_the_bound_nor_its_connections(
    api: Api,
) -> None:
    progress = Progress(planned_actions=300)
    await customers(api.url, "key", planned(300, time.time()), progress, concurrency=8)
    assert progress.answers == {"cancel now": {"200": 300}}
    assert api.most_in_flight == 8
    assert len(api.connections) <= 8


async def test_the_deadline_stops_the_actions_where_they_are_and_says_what_was_left(
    api: Api,
) -> None:
    api.hold.clear()  # the API never answers
    config = ChaosConfig(kills=5)
    progress = Progress(stage="answering the customer actions", planned_actions=50)
    progress.faults["kill -9"] = 2
    progress.faults["redis outage"] = 1
    actions = planned(10, time.time()) + planned(40, time.time() + 60)
    started = time.monotonic()

    finished = await within_deadline(
        customers(api.url, "key", actions, progress, concurrency=4), 0.5, progress
    )

    assert not finished
    assert time.monotonic() - started < 3
    assert progress.problems == ["deadline of 0.5 s reached while answering the customer actions"]
    assert progress.answers == {}
    state = {"due_subscriptions": 7, "open_invoices": 3, "unpublished": 0}
    assert left_undone(progress, config, state) == {
        "kill -9 not made": 3,
        "kafka outage not made": 1,
        "postgres restart not made": 1,
        "customer actions not answered": 50,
        "due subscriptions": 7,
        "open invoices": 3,
    }


async def test_work_done_in_time_is_not_cut_and_a_failed_stage_is_not_the_deadline() -> None:
    progress = Progress(stage="making the kills")
    assert await within_deadline(asyncio.sleep(0.01), 5, progress)
    assert progress.problems == []

    async def fails() -> None:
        await asyncio.sleep(0.01)
        raise RuntimeError("collector-0 not ready in 60 s:\n(its log)")

    assert not await within_deadline(fails(), 5, progress)
    assert progress.problems == [
        "RuntimeError while making the kills: collector-0 not ready in 60 s:"
    ]
