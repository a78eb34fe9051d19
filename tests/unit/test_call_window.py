"""The collector's window of outstanding gateway calls (pure asyncio, no server)."""

from __future__ import annotations

import asyncio

from services.collector.window import CallWindow


def window(**kw: object) -> CallWindow:
    options: dict[str, object] = {
        "limit_per_second": 200,
        "max_window": 128,
        "expected_latency_seconds": 0.2,
    }
    options.update(kw)
    return CallWindow(**options)  # type: ignore[arg-type]


async def answered(w: CallWindow, latency: float, times: int) -> None:
    for _ in range(times):
        await w.wait_for_room()
        assert w.take()
        await w.release(latency)


async def test_sized_by_what_the_limit_allows_over_the_expected_latency() -> None:
    w = window()
    assert w.size == 58  # ceil(200 * 0.2 s * 1.25) + 8
    await answered(w, 0.1, 64)
    assert w.baseline == 0.1
    assert w.size == 33  # a faster gateway: a smaller window at once


async def test_never_more_outstanding_than_the_window() -> None:
    w = window(max_window=8)
    peak = refused = 0

    async def call() -> None:
        nonlocal peak, refused
        while True:
            await w.wait_for_room()
            await asyncio.sleep(0)  # the send slot: others may fill the window meanwhile
            if w.take():
                break
            refused += 1
        peak = max(peak, w.outstanding)
        await asyncio.sleep(0.001)
        await w.release(0.2)

    await asyncio.gather(*[call() for _ in range(100)])
    assert peak == 8
    assert refused > 0
    assert w.outstanding == 0


async def test_a_call_not_sent_does_not_count_as_a_fast_answer() -> None:
    w = window()
    await answered(w, 0.2, 32)
    assert w.take()
    await w.release(None)
    assert w.baseline >= 0.2


async def test_a_latency_spike_shrinks_the_window_and_it_grows_back() -> None:
    w = window()
    await answered(w, 0.2, 32)
    normal = w.size
    await answered(w, 2.0, 32)  # the gateway stalls 2 s: answers come back 10x slower
    assert w.size <= normal // 6
    assert w.baseline < 0.21  # a stall does not become the new normal
    await answered(w, 0.2, 32)
    assert w.size >= normal


async def test_isolated_timeouts_do_not_shrink_it() -> None:
    w = window()
    for _ in range(10):
        await answered(w, 0.2, 30)
        await answered(w, 10.0, 1)  # one call in 31 times out
    assert w.size >= 58


async def test_a_429_halves_it_and_answers_restore_it() -> None:
    w = window()
    await w.on_rate_limited()
    assert w.size == 29
    await answered(w, 0.2, 100)
    assert w.size >= 58


async def test_never_below_the_minimum() -> None:
    w = window(min_window=2)
    for _ in range(10):
        await w.on_rate_limited()
    await answered(w, 30.0, 32)
    assert w.size == 2
