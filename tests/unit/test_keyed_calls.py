"""The simulator's idempotency rules, shared by charges and refunds: a stored key answers what
was stored, another body under it is a conflict, a key in flight makes later requests wait."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from services.gateway_sim.charges import KeyedCalls, Reply


class Store:
    def __init__(self) -> None:
        self.stored: dict[str, tuple[int, int]] = {}  # key -> (fingerprint, index)
        self.counted: list[str] = []
        self.calls = 0

    def keyed(self) -> KeyedCalls:
        return KeyedCalls(
            find=lambda key: self.stored[key][1] if key in self.stored else None,
            fingerprint=lambda index: next(f for f, i in self.stored.values() if i == index),
            answer=lambda index: Reply(200, {"index": index}, True, 0.0),
            counted=self.counted.append,
        )

    def call(
        self, key: str, fingerprint: int, *, store: bool = True
    ) -> Callable[[], Awaitable[Reply]]:
        """A call that takes a while, then stores its result under ``key`` (or, not ``store``,
        answers a 5xx and stores nothing)."""

        async def make() -> Reply:
            self.calls += 1
            await asyncio.sleep(0.05)
            if not store:
                return Reply(500, {}, False, 0.0)
            self.stored[key] = (fingerprint, len(self.stored))
            return Reply(200, {"index": self.stored[key][1]}, False, 0.0)

        return make


async def test_requests_under_a_key_in_flight_wait_and_get_the_stored_answer() -> None:
    store = Store()
    keyed = store.keyed()
    first, second = await asyncio.gather(
        keyed.once("k", 1, store.call("k", 1)), keyed.once("k", 1, store.call("k", 1))
    )
    assert store.calls == 1
    assert (first.replayed, second.replayed) == (False, True)
    assert second.body == first.body
    assert store.counted == ["replayed"]
    assert keyed.in_flight == {}


async def test_another_body_under_a_stored_key_is_a_conflict() -> None:
    store = Store()
    keyed = store.keyed()
    await keyed.once("k", 1, store.call("k", 1))
    reply = await keyed.once("k", 2, store.call("k", 2))
    assert reply.status == 409
    assert store.calls == 1
    assert store.counted == ["conflict"]


async def test_a_call_that_stored_nothing_leaves_the_key_to_the_one_waiting() -> None:
    store = Store()
    keyed = store.keyed()
    failed, made = await asyncio.gather(
        keyed.once("k", 1, store.call("k", 1, store=False)),
        keyed.once("k", 1, store.call("k", 1)),
    )
    assert (failed.status, made.status, made.replayed) == (500, 200, False)
    assert store.calls == 2
    assert store.counted == []
