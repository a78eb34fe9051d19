"""The garbage-collector settings of processes that keep time on an event loop, and their
collections measured."""

from __future__ import annotations

import gc
import time

import pytest
from prometheus_client import REGISTRY

from billing_core.runtime.garbage_collection import (
    FULL_COLLECTION_EVERY,
    _CollectionClock,
    quiet_garbage_collector,
)


def test_startup_objects_are_frozen_and_full_collections_made_rare() -> None:
    before = gc.get_threshold()
    try:
        quiet_garbage_collector()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (before[0], before[1], FULL_COLLECTION_EVERY)
        assert sum(isinstance(c, _CollectionClock) for c in gc.callbacks) == 1
        quiet_garbage_collector()
        assert sum(isinstance(c, _CollectionClock) for c in gc.callbacks) == 1
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
        gc.callbacks[:] = [c for c in gc.callbacks if not isinstance(c, _CollectionClock)]


def _count(generation: int) -> float:
    value = REGISTRY.get_sample_value(
        "billing_gc_pause_seconds_count", {"generation": str(generation)}
    )
    return value or 0.0


def test_a_full_collection_is_counted_as_one_pause_of_generation_2() -> None:
    before = _count(2)
    clock = _CollectionClock()
    gc.callbacks.append(clock)
    try:
        gc.collect(2)
    finally:
        gc.callbacks.remove(clock)
    assert _count(2) == before + 1


def test_a_young_collection_is_counted_apart() -> None:
    before_young, before_full = _count(0), _count(2)
    clock = _CollectionClock()
    clock("start", {"generation": 0, "collected": 0, "uncollectable": 0})
    clock("stop", {"generation": 0, "collected": 3, "uncollectable": 0})
    assert (_count(0), _count(2)) == (before_young + 1, before_full)


def test_a_long_pause_is_counted_and_not_logged(capsys: pytest.CaptureFixture[str]) -> None:
    """A wall-time pause is mostly the process off the CPU: the histogram says it, no log line."""
    before = _count(1)
    clock = _CollectionClock()
    clock("start", {"generation": 1, "collected": 0, "uncollectable": 0})
    time.sleep(0.02)
    clock("stop", {"generation": 1, "collected": 0, "uncollectable": 0})
    assert _count(1) == before + 1
    captured = capsys.readouterr()
    assert captured.out + captured.err == ""
