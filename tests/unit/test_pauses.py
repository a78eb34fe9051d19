"""The garbage-collector settings of processes that keep time on an event loop."""

from __future__ import annotations

import gc

from billing_core.runtime.pauses import FULL_COLLECTION_EVERY, quiet_garbage_collector


def test_startup_objects_are_frozen_and_full_collections_made_rare() -> None:
    before = gc.get_threshold()
    try:
        quiet_garbage_collector()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (before[0], before[1], FULL_COLLECTION_EVERY)
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
