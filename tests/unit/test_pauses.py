"""The garbage-collector settings of processes that keep time on an event loop, and their pauses
measured."""

from __future__ import annotations

import gc

from prometheus_client import REGISTRY

from billing_core.runtime.pauses import FULL_COLLECTION_EVERY, _PauseClock, quiet_garbage_collector


def test_startup_objects_are_frozen_and_full_collections_made_rare() -> None:
    before = gc.get_threshold()
    try:
        quiet_garbage_collector()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (before[0], before[1], FULL_COLLECTION_EVERY)
        assert sum(isinstance(c, _PauseClock) for c in gc.callbacks) == 1
        quiet_garbage_collector()
        assert sum(isinstance(c, _PauseClock) for c in gc.callbacks) == 1
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
        gc.callbacks[:] = [c for c in gc.callbacks if not isinstance(c, _PauseClock)]


def _count(generation: int) -> float:
    value = REGISTRY.get_sample_value(
        "billing_gc_pause_seconds_count", {"generation": str(generation)}
    )
    return value or 0.0


def test_a_full_collection_is_counted_as_one_pause_of_generation_2() -> None:
    before = _count(2)
    clock = _PauseClock()
    gc.callbacks.append(clock)
    try:
        gc.collect(2)
    finally:
        gc.callbacks.remove(clock)
    assert _count(2) == before + 1


def test_a_young_collection_is_counted_apart() -> None:
    before_young, before_full = _count(0), _count(2)
    clock = _PauseClock()
    clock("start", {"generation": 0, "collected": 0, "uncollectable": 0})
    clock("stop", {"generation": 0, "collected": 3, "uncollectable": 0})
    assert (_count(0), _count(2)) == (before_young + 1, before_full)
