"""What the routes need from the process: settings, clock, the database pool and caches."""

from __future__ import annotations

import asyncio
import random
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field

import redis.asyncio as aioredis
from fastapi import Request

from billing_core.clock import Clock
from billing_core.db import pg
from billing_core.db.pg import Connection, Pool
from billing_core.domain.dunning import DunningPolicy
from billing_core.repo import ids as ids_repo
from billing_core.repo import plans as plans_repo
from billing_core.repo import subscription_groups
from billing_core.repo.api_clients import ApiClient
from billing_core.repo.plans import Plan, PlanNotFound
from billing_core.repo.subscription_groups import KeyedNew
from billing_core.repo.subscriptions import Claimed
from billing_core.runtime.batcher import Batcher
from billing_core.stripe_gateway import StripePaymentMethods
from billing_core.usecases.webhook_results import WebhookToRecord, record_webhooks
from services.api.client_limits import ClientRateLimit, FailedKeysByAddress
from services.api.settings import ApiSettings


class KeyCache:
    """Verified keys (``ttl_seconds``) and unknown ones (``negative_ttl_seconds``) by hash; at
    most ``max_entries``, the oldest put evicted first (a key in use is put again each time its
    entry ends, so only a flood within one ``ttl_seconds`` evicts it)."""

    def __init__(
        self, ttl_seconds: float, negative_ttl_seconds: float = 0.0, max_entries: int = 10_000
    ) -> None:
        self._ttl = ttl_seconds
        self._negative_ttl = negative_ttl_seconds
        self._max = max_entries
        self._entries: OrderedDict[bytes, tuple[float, ApiClient | None]] = OrderedDict()
        self._looking_up: dict[bytes, asyncio.Future[ApiClient | None]] = {}

    def get(self, key_hash: bytes) -> tuple[bool, ApiClient | None]:
        """(known, client): (False, None) not cached; (True, None) cached as unknown."""
        entry = self._entries.get(key_hash)
        if entry is None:
            return False, None
        expires, client = entry
        if time.monotonic() >= expires:
            self._entries.pop(key_hash, None)
            return False, None
        return True, client

    def put(self, key_hash: bytes, client: ApiClient | None) -> None:
        ttl = self._ttl if client is not None else self._negative_ttl
        if ttl <= 0:
            return
        self._entries.pop(key_hash, None)
        while len(self._entries) >= self._max:
            self._entries.popitem(last=False)
        self._entries[key_hash] = (time.monotonic() + ttl, client)

    async def look_up(
        self, key_hash: bytes, find: Callable[[], Awaitable[ApiClient | None]]
    ) -> ApiClient | None:
        """``find()``'s answer for a key not cached, then cached: requests with the same key
        while it runs wait for that one look-up."""
        looking_up = self._looking_up.get(key_hash)
        if looking_up is None:
            looking_up = asyncio.ensure_future(self._find_and_put(key_hash, find))
            self._looking_up[key_hash] = looking_up
        return await asyncio.shield(looking_up)

    async def _find_and_put(
        self, key_hash: bytes, find: Callable[[], Awaitable[ApiClient | None]]
    ) -> ApiClient | None:
        try:
            client = await find()
        finally:
            del self._looking_up[key_hash]
        self.put(key_hash, client)
        return client

    def forget(self, key_hash: bytes) -> None:
        self._entries.pop(key_hash, None)

    def clear(self) -> None:
        self._entries.clear()


class PlanCatalogue:
    """The active plans, read at most once per ``ttl_seconds`` (the catalogue changes only by
    migration: a plan added or retired is seen within that delay). ``ttl_seconds=0``: every
    look-up reads the database."""

    def __init__(self, ttl_seconds: float) -> None:
        self._ttl = ttl_seconds
        self._expires = 0.0
        self._by_code: dict[str, Plan] = {}

    async def get(self, conn: Connection, code: str) -> Plan:
        """The active plan ``code`` (PlanNotFound otherwise), on ``conn`` when not cached."""
        if time.monotonic() >= self._expires:
            plans = await plans_repo.list_active(conn)
            self._by_code = {plan.code: plan for plan in plans}
            self._expires = time.monotonic() + self._ttl
        return self._plan(code)

    async def get_pooled(self, pool: Pool, code: str) -> Plan:
        """:meth:`get`, taking a connection from ``pool`` only when the catalogue is read."""
        if time.monotonic() >= self._expires:
            async with pool.acquire() as conn:
                return await self.get(conn, code)
        return self._plan(code)

    def _plan(self, code: str) -> Plan:
        plan = self._by_code.get(code)
        if plan is None:
            raise PlanNotFound(code)
        return plan


class IdBlocks:
    """Ids for new rows, drawn from their sequences ``block`` at a time (one statement per
    block instead of one per request); what the process does not use is a gap."""

    def __init__(self, sequences: Sequence[str], block: int = 32) -> None:
        self._sequences = tuple(sequences)
        self._block = block
        self._ready: list[tuple[int, ...]] = []

    async def take(self, conn: Connection) -> tuple[int, ...]:
        if not self._ready:
            drawn = await ids_repo.draw(conn, self._sequences, self._block)
            drawn.reverse()
            self._ready = drawn + self._ready
        return self._ready.pop()

    async def take_pooled(self, pool: Pool) -> tuple[int, ...]:
        """:meth:`take`, taking a connection from ``pool`` only when a block is drawn."""
        if not self._ready:
            async with pool.acquire() as conn:
                return await self.take(conn)
        return self._ready.pop()


@dataclass
class AppContext:
    settings: ApiSettings
    clock: Clock
    key_cache: KeyCache
    failed_keys: FailedKeysByAddress
    plans: PlanCatalogue
    subscription_ids: IdBlocks
    rng: random.Random = field(default_factory=random.SystemRandom)
    policy: DunningPolicy = field(default_factory=DunningPolicy)
    webhooks_: Batcher[WebhookToRecord, str] | None = None
    creates_: Batcher[KeyedNew, Claimed] | None = None
    pg_: Pool | None = None
    # With BILLING_GATEWAY=stripe: checks each payment method set against Stripe.
    payment_methods: StripePaymentMethods | None = None
    rate_limit_: ClientRateLimit | None = None
    redis_: aioredis.Redis | None = None
    internal_port: int | None = None

    @property
    def pg(self) -> Pool:
        """The process's database pool: a read takes ``async with ctx.pg.acquire() as conn``."""
        if self.pg_ is None:
            raise RuntimeError("the application's lifespan has not started")
        return self.pg_

    def transaction(self) -> AbstractAsyncContextManager[Connection]:
        """One unit of work on the driver: ``async with ctx.transaction() as conn``."""
        return pg.transaction(self.pg)

    @property
    def redis(self) -> aioredis.Redis:
        """The process's Redis client (the rate limit's, the console's sessions)."""
        if self.redis_ is None:
            raise RuntimeError("the application's lifespan has not started")
        return self.redis_

    @property
    def rate_limit(self) -> ClientRateLimit:
        """The per-client request limit (Redis)."""
        if self.rate_limit_ is None:
            raise RuntimeError("the application's lifespan has not started")
        return self.rate_limit_

    @property
    def webhooks(self) -> Batcher[WebhookToRecord, str]:
        """Webhook events recorded in groups: those that arrive while a group is recorded
        are recorded together next, in one transaction."""
        if self.webhooks_ is None:
            raise RuntimeError("the application's lifespan has not started")
        return self.webhooks_

    @property
    def creates(self) -> Batcher[KeyedNew, Claimed]:
        """Keyed creates written in groups: those that arrive while a group is written are
        written together next, by one statement (``subscription_groups``)."""
        if self.creates_ is None:
            raise RuntimeError("the application's lifespan has not started")
        return self.creates_

    async def write_creates(self, items: Sequence[KeyedNew]) -> list[Claimed]:
        async with self.pg.acquire() as conn:
            return await subscription_groups.insert_unless_claimed(conn, items)

    async def record_webhooks(self, webhooks: Sequence[WebhookToRecord]) -> list[str]:
        async with self.transaction() as conn:
            return await record_webhooks(
                conn,
                webhooks,
                now=self.clock.now(),
                rng=self.rng,
                policy=self.policy,
                key_prefix=self.settings.gateway_key_prefix,
            )


def get_context(request: Request) -> AppContext:
    ctx = request.app.state.context
    assert isinstance(ctx, AppContext)
    return ctx
