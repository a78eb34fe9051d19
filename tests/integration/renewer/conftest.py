from __future__ import annotations

from datetime import UTC, datetime

import pytest

from billing_core.clock import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime(2025, 3, 10, 12, 0, tzinfo=UTC))
