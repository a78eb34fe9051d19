"""The dunning schedule: when to retry a declined payment, and when to give up.

After the 1st, 2nd and 3rd declined attempt the next try is ``now + delay`` plus a uniform
jitter in ``[0, jitter)`` (whole seconds, drawn from the caller's ``rng`` so tests are
deterministic). After the 4th (``max_attempts``) there is no next try: the invoice fails.
An uncertain answer is retried after ``unknown_retry`` with the same key, within
``unknown_max_retries`` and ``unknown_max_age`` (:func:`uncertainty_exhausted`).
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
    # An attempt whose answers stay uncertain is retried with its key this many times, and no
    # longer than this after the key's first use (below the gateway's key retention, 24 h for
    # most): a retry after the gateway forgot the key could charge a second time.
    unknown_max_retries: int = 48
    unknown_max_age: timedelta = timedelta(hours=20)

    def __post_init__(self) -> None:
        if self.unknown_max_retries < 1 or self.unknown_max_age <= timedelta(0):
            raise InvalidPolicy("uncertain results need a positive retry bound and age")
        if any(d < timedelta(0) for d in self.delays):
            raise InvalidPolicy("dunning delays must not be negative")
        if self.jitter < timedelta(0):
            raise InvalidPolicy("dunning jitter must not be negative")
        if self.unknown_retry <= timedelta(0):
            raise InvalidPolicy("the retry after an uncertain result must be positive")

    @property
    def max_attempts(self) -> int:
        """Declined attempts after which the invoice fails: the first and one per retry delay."""
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


def uncertainty_exhausted(
    uncertain_answers: int,
    key_first_used_at: datetime | None,
    now: datetime,
    policy: DunningPolicy = DunningPolicy(),
) -> bool:
    """True when an attempt's key has had ``uncertain_answers`` (this one included) or has been
    in use so long that retrying it is no longer safe: a person must find out what happened."""
    if uncertain_answers >= policy.unknown_max_retries:
        return True
    return key_first_used_at is not None and now - key_first_used_at >= policy.unknown_max_age
