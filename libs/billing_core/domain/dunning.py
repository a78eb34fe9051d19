"""The dunning schedule: when to retry a declined payment, and when to give up."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True)
class DunningPolicy:
    delays: tuple[timedelta, ...] = (timedelta(days=1), timedelta(days=3), timedelta(days=5))
    jitter: timedelta = timedelta(minutes=120)
    unknown_retry: timedelta = timedelta(minutes=15)

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
    if failed_attempts < 1:
        raise ValueError("failed_attempts starts at 1")
    if failed_attempts > len(policy.delays):
        return None
    jitter_seconds = policy.jitter // timedelta(seconds=1)
    jitter = rng.randrange(jitter_seconds) if jitter_seconds > 0 else 0
    return now + policy.delays[failed_attempts - 1] + timedelta(seconds=jitter)
