"""Fewer, shorter garbage-collection pauses for processes that keep time on an event loop, and
each collection measured.

A full collection scans every object the process holds — after startup, mostly modules,
SQLAlchemy metadata and settings that live as long as the process — and stops the event loop
for tens of milliseconds while it does. For a collector sending calls at 1 000/s in send slots
a millisecond apart, or a gateway stamping their arrival, that is dozens of calls late at once.
What exists once the process has started is frozen (never scanned again), and full collections
of what is left are made rare; young collections, which free almost everything, are unchanged.
Every collection's length goes to ``billing_gc_pause_seconds`` (by generation). It is wall
time: a collection during which the process was off the CPU is counted as long as it lasted.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from prometheus_client import Histogram

FULL_COLLECTION_EVERY = 100  # middle-generation collections (default 10)

COLLECTIONS = Histogram(
    "billing_gc_pause_seconds",
    "Garbage-collection pauses of this process, by generation collected.",
    ["generation"],
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5),
)


class _CollectionClock:
    def __init__(self) -> None:
        self._started = 0.0
        self._observe = [COLLECTIONS.labels(str(generation)) for generation in range(3)]

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        self._observe[int(info["generation"])].observe(time.perf_counter() - self._started)


def quiet_garbage_collector() -> None:
    """Call once, when the process has started (its long-lived objects exist)."""
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)
    if not any(isinstance(callback, _CollectionClock) for callback in gc.callbacks):
        gc.callbacks.append(_CollectionClock())
