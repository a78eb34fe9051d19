"""Send slots placed on the local clock from Redis's: never early, never later than the bound."""

from __future__ import annotations

import random

import pytest

from billing_core.ratelimit import RedisClock

MAX_LATE = 0.010
REDIS_AT_START_US = 1_796_000_000_000_000  # a Redis clock in 2026, in microseconds


def redis_now_us(local: float, offset: float) -> int:
    return REDIS_AT_START_US + round((local + offset) * 1_000_000)


def test_a_slow_answer_places_its_slots_as_precisely_as_the_last_quick_one() -> None:
    clock = RedisClock()
    offset = 0.25  # Redis's clock against ours, beyond the start value
    clock.observe(100.0000, 100.0002, redis_now_us(100.0001, offset))  # 0.2 ms round trip
    # an answer that waited 8 ms on a busy event loop
    clock.observe(100.1000, 100.1080, redis_now_us(100.1001, offset))
    slot_us = redis_now_us(100.1500, offset)
    slot = clock.slot(slot_us, 100.1080, MAX_LATE)
    assert 100.1500 <= slot.send_at < 100.1500 + 0.0005
    assert 100.1500 + MAX_LATE - 0.0005 < slot.latest <= 100.1500 + MAX_LATE


def test_alone_a_slow_answer_leaves_its_whole_round_trip_uncertain() -> None:
    clock = RedisClock()
    clock.observe(5.000, 5.008, redis_now_us(5.004, 0.0))
    slot = clock.slot(redis_now_us(5.100, 0.0), 5.008, MAX_LATE)
    assert slot.latest - slot.send_at == pytest.approx(MAX_LATE - 0.008, abs=3e-4)


@pytest.mark.parametrize("seed", range(20))
def test_a_slot_is_never_used_before_it_comes_nor_after_the_bound(seed: int) -> None:
    """Clocks drifting apart at up to half the assumed rate, answers delayed at random."""
    rng = random.Random(seed)
    rate = rng.uniform(-0.0005, 0.0005)
    start = rng.uniform(-1000.0, 1000.0)
    clock = RedisClock()
    local = rng.uniform(0.0, 10_000.0)
    for _ in range(500):
        local += rng.uniform(0.0, 0.3)
        asked = local
        ran = asked + rng.choice([rng.uniform(0, 0.0003), rng.uniform(0, 0.02)])
        answered = ran + rng.choice([rng.uniform(0, 0.0003), rng.uniform(0, 0.02)])
        clock.observe(asked, answered, redis_now_us(ran, start + rate * ran))
        lo, hi = clock.bounds(answered)
        true_offset = REDIS_AT_START_US / 1_000_000 + start + rate * answered
        assert lo - 1e-6 <= true_offset <= hi + 1e-6
        local_slot = ran + rng.uniform(0.0, 0.2)
        slot = clock.slot(redis_now_us(local_slot, start + rate * local_slot), answered, MAX_LATE)
        assert slot.send_at >= local_slot - 1e-6
        assert slot.latest <= local_slot + MAX_LATE + 1e-6
        local = answered


def test_a_stepped_redis_clock_starts_the_bounds_over() -> None:
    clock = RedisClock()
    clock.observe(10.0, 10.0002, redis_now_us(10.0001, 0.0))
    clock.observe(11.0, 11.0002, redis_now_us(11.0001, 2.0))  # stepped 2 s ahead
    lo, hi = clock.bounds(11.0002)
    base = REDIS_AT_START_US / 1_000_000
    assert lo <= base + 2.0 <= hi
    assert hi - lo == pytest.approx(0.0002, abs=1e-5)
