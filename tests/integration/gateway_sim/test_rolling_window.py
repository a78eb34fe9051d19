"""The rolling-second audit and the limiter agree with a brute-force count (pure, no server)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from services.gateway_sim.ledger import max_in_any_window
from services.gateway_sim.limiter import WINDOW_NS, RollingSecondLimiter

stamps = st.lists(st.integers(min_value=0, max_value=5 * WINDOW_NS), max_size=200).map(sorted)


def brute_force(sorted_stamps: list[int]) -> int:
    return max(
        (sum(1 for s in sorted_stamps if end - WINDOW_NS < s <= end) for end in sorted_stamps),
        default=0,
    )


@given(stamps)
def test_max_in_any_window_is_exact(sorted_stamps: list[int]) -> None:
    assert max_in_any_window(sorted_stamps) == brute_force(sorted_stamps)


@given(stamps, st.integers(min_value=1, max_value=20))
def test_admitted_calls_never_exceed_the_limit_in_any_window(
    sorted_stamps: list[int], limit: int
) -> None:
    limiter = RollingSecondLimiter(limit)
    admitted = [s for s in sorted_stamps if limiter.try_acquire(s)]

    assert max_in_any_window(admitted) <= limit
    # Nothing refused needlessly: each refused call had `limit` admitted ones in its window.
    for refused in sorted(set(sorted_stamps) - set(admitted)):
        assert sum(1 for s in admitted if refused - WINDOW_NS < s <= refused) == limit
