"""The dunning schedule: when to retry a declined payment, and when to give up.

After the 1st, 2nd and 3rd declined attempt the next try is ``now + delay`` plus a uniform
jitter in ``[0, jitter)`` (whole seconds, drawn from the caller's ``rng`` so tests are
deterministic). After the 4th (``max_attempts``) there is no next try: the invoice fails.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from billing_core.domain.errors import InvalidAttemptCount, InvalidPolicy
from billing_core.domain.instant import require_aware, whole_seconds


@dataclass(frozen=True)
class DunningPolicy:
    delays: tuple[timedelta, ...] = (timedelta(days=1), timedelta(days=3), timedelta(days=5))
    jitter: timedelta = timedelta(minutes=120)
    unknown_retry: timedelta = timedelta(minutes=15)

    def __post_init__(self) -> None:
        if any(d < timedelta(0) for d in self.delays):
            raise InvalidPolicy("dunning delays must not be negative")
        if self.jitter < timedelta(0):
            raise InvalidPolicy("dunning jitter must not be negative")
        if self.unknown_retry <= timedelta(0):
            raise InvalidPolicy("the retry after an uncertain result must be positive")

    @property
    def max_attempts(self) -> int:
        """Declined attempts after which the invoice fails (the article's 4)."""
        return len(self.delays) + 1


def next_attempt(
    failed_attempts: int,
    now: datetime,
    rng: random.Random,
    policy: DunningPolicy = DunningPolicy(),
) -> datetime | None:
    """After failure 1..len(delays): now + delay + jitter in [0, jitter); after that: None."""
    require_aware(now, "now")
    if failed_attempts < 1:
        raise InvalidAttemptCount(f"failed attempts start at 1, got {failed_attempts}")
    if failed_attempts >= policy.max_attempts:
        return None
    jitter_seconds = whole_seconds(policy.jitter)
    jitter = rng.randrange(jitter_seconds) if jitter_seconds > 0 else 0
    return now + policy.delays[failed_attempts - 1] + timedelta(seconds=jitter)
