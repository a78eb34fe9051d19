"""How much a caller may ask: the per-client rate limit (Redis) and the per-address limit on
unknown API keys (in the process).

* **Per client**: a fixed window (``api_rate_limit_window_seconds``) counted in Redis, shared by
  every replica. Each request takes the next number of its client's window; a replica reserves
  those numbers in Redis a block at a time (``INCRBY``, and the expiry set by the window's first
  block) and hands them out in the process: a block is a hundredth of the limit, at most
  :data:`MAX_BLOCK`, and 1 for a limit under 200, which counts every request in Redis as it
  comes. A request is allowed when its number is within the limit, so no more than the limit
  is ever allowed across replicas; a replica's unused numbers at the window's end are counted
  all the same, so a client near its limit may be refused up to a hundredth of it early per
  replica. The block requests that arrive while one is in flight share one script call (a
  :class:`~billing_core.runtime.batcher.Batcher` with no wait; a single Redis, not a
  cluster). The limit is the key's ``rate_limit_per_minute`` or, when it sets
  none, ``api_rate_limit_per_minute``, scaled to the window. Every answer carries
  ``RateLimit-Limit``, ``RateLimit-Remaining``, ``RateLimit-Reset`` and ``RateLimit-Policy``
  (IETF httpapi draft names); past the limit, a 429 problem with ``Retry-After``.
* **Redis down**: reads go on unlimited (the API stays up); writes get a 503 problem with
  ``Retry-After`` until Redis answers: a write becomes a charge within seconds, so the limit is
  not dropped where it matters most, and every write is safe to retry (``Idempotency-Key``).
  Redis not answering within ``REDIS_TIMEOUT_SECONDS`` counts as down; after a failure it is
  not asked again for ``REDIS_PAUSE_SECONDS``: requests do not each wait for a timeout.
* **Unknown keys**: counted per source address in the process (it must hold when Redis is
  down too); past ``auth_failures_per_address`` per window, that address's key look-ups are
  refused with 429 before any database work. A look-up is counted before it is awaited (and
  taken back when its key is valid), so requests in parallel cannot pass the limit together.
  With the negative cache of unknown keys (:class:`services.api.context.KeyCache`) a token
  scan costs at most that many look-ups per window and replica. The addresses kept are
  bounded: a new one evicts the oldest, never the whole table.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import redis.asyncio as aioredis
from prometheus_client import Counter

from billing_core.clock import Clock
from billing_core.logging import get_logger
from billing_core.repo.api_clients import ApiClient
from billing_core.runtime.batcher import Batcher
from services.api.problems import ProblemKind

log = get_logger(__name__)

RATE_LIMITED = ProblemKind(429, "rate-limited", "Too many requests")
LIMIT_UNAVAILABLE = ProblemKind(503, "rate-limit-unavailable", "Rate limit unavailable")
REDIS_PAUSE_SECONDS = 1.0
REDIS_TIMEOUT_SECONDS = 2.0

UNLIMITED = Counter(
    "billing_api_rate_limit_unavailable_total",
    "Requests answered without the rate limit (reads) or refused (writes): Redis did not answer.",
    ["kind"],
)
REFUSED = Counter("billing_api_rate_limited_total", "Requests refused with 429.", ["reason"])

# Reserve a block of numbers in each window (KEYS[i] by ARGV[i + 1]; repeats allowed): the
# block's last number. A window's key expires with the window (ARGV[1] ms).
_RESERVE = """
local tops = {}
for i, key in ipairs(KEYS) do
    local size = tonumber(ARGV[i + 1])
    local top = redis.call('INCRBY', key, size)
    if top == size then redis.call('PEXPIRE', key, ARGV[1]) end
    tops[i] = top
end
return tops
"""
MAX_GROUP = 256
MAX_BLOCK = 100


@dataclass(frozen=True)
class Quota:
    """One request counted: the window's limit, what is left, seconds to the window's end."""

    limit: int
    used: int
    reset_seconds: int
    window_seconds: int

    @property
    def allowed(self) -> bool:
        return self.used <= self.limit

    def headers(self) -> dict[str, str]:
        return {
            "RateLimit-Limit": str(self.limit),
            "RateLimit-Remaining": str(max(0, self.limit - self.used)),
            "RateLimit-Reset": str(self.reset_seconds),
            "RateLimit-Policy": f"{self.limit};w={self.window_seconds}",
        }


class ClientRateLimit:
    def __init__(
        self,
        redis: aioredis.Redis,
        *,
        key_prefix: str,
        per_minute: int,
        window_seconds: int,
        clock: Clock,
    ) -> None:
        self._redis = redis
        self._script = redis.register_script(_RESERVE)
        self._prefix = key_prefix
        self._per_minute = per_minute
        self._window = window_seconds
        self._clock = clock
        self._paused_until = 0.0
        self._ttl_ms = window_seconds * 1000 + 1000
        self._reserved: Batcher[tuple[str, int], int | None] = Batcher(
            self._reserve, max_size=MAX_GROUP, max_wait=0
        )
        # Per client: its window's key, the next number to hand out and the last one reserved;
        # per window key, the block being reserved (requests wait for it, not each reserve one).
        self._blocks: dict[int, tuple[str, int, int]] = {}
        self._reserving: dict[str, asyncio.Future[bool]] = {}

    def limit_of(self, client: ApiClient) -> int:
        per_minute = client.rate_limit_per_minute or self._per_minute
        return max(1, math.ceil(per_minute * self._window / 60))

    async def hit(self, client: ApiClient) -> Quota | None:
        """Count one request of ``client``; None when Redis does not answer."""
        if time.monotonic() < self._paused_until:
            return None
        now = self._clock.now().timestamp()
        window = int(now // self._window)
        reset = max(1, math.ceil((window + 1) * self._window - now))
        limit = self.limit_of(client)
        key = f"{self._prefix}{client.id}:{window}"
        size = min(MAX_BLOCK, max(1, limit // 100))
        if size == 1:
            used = await self._reserved.submit((key, 1))
            return None if used is None else Quota(limit, used, reset, self._window)
        while True:
            block = self._blocks.get(client.id)
            if block is not None and block[0] == key and block[1] <= block[2]:
                self._blocks[client.id] = (key, block[1] + 1, block[2])
                return Quota(limit, block[1], reset, self._window)
            reserving = self._reserving.get(key)
            if reserving is None:
                reserving = asyncio.ensure_future(self._reserve_block(client.id, key, size))
                self._reserving[key] = reserving
            if not await asyncio.shield(reserving):
                return None

    async def _reserve_block(self, client_id: int, key: str, size: int) -> bool:
        try:
            top = await self._reserved.submit((key, size))
        finally:
            del self._reserving[key]
        if top is None:
            return False
        self._blocks[client_id] = (key, top - size + 1, top)
        return True

    async def _reserve(self, blocks: Sequence[tuple[str, int]]) -> list[int | None]:
        """One script call for a group of blocks; None for each when Redis fails."""
        try:
            tops = await self._script(
                keys=[key for key, _ in blocks],
                args=[self._ttl_ms, *(size for _, size in blocks)],
            )
        except (aioredis.RedisError, OSError) as exc:
            self._paused_until = time.monotonic() + REDIS_PAUSE_SECONDS
            log.warning("rate_limit_unavailable", error=repr(exc))
            return [None] * len(blocks)
        return [int(n) for n in tops]


class FailedKeysByAddress:
    """Unknown keys per source address in fixed windows, in this process. At most
    ``max_addresses`` addresses are kept: a new one evicts the address whose window started
    first, never the others' counts."""

    def __init__(self, limit: int, window_seconds: float, max_addresses: int = 100_000) -> None:
        self._limit = limit
        self._window = window_seconds
        self._max = max_addresses
        self._counts: OrderedDict[str, tuple[float, int]] = OrderedDict()

    def retry_after(self, address: str) -> int | None:
        """Seconds until ``address`` may try keys again, or None if it may now."""
        entry = self._counts.get(address)
        if entry is None:
            return None
        started, count = entry
        left = started + self._window - time.monotonic()
        if left <= 0:
            self._counts.pop(address, None)
            return None
        return max(1, math.ceil(left)) if count >= self._limit else None

    def add(self, address: str) -> None:
        """Count one key of ``address`` as unknown (before its look-up: see :meth:`forgive`)."""
        now = time.monotonic()
        entry = self._counts.get(address)
        if entry is not None and now < entry[0] + self._window:
            self._counts[address] = (entry[0], entry[1] + 1)
            return
        self._counts.pop(address, None)
        while len(self._counts) >= self._max:
            self._counts.popitem(last=False)
        self._counts[address] = (now, 1)

    def forgive(self, address: str) -> None:
        """Take back one count of ``address``: the key counted was found valid."""
        entry = self._counts.get(address)
        if entry is not None and entry[1] > 0:
            self._counts[address] = (entry[0], entry[1] - 1)
