"""What the routes need from the process: settings, clock, sessions, caches (one per app)."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from fastapi import Request
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from billing_core.clock import Clock
from billing_core.domain.dunning import DunningPolicy
from billing_core.repo.api_clients import ApiClient
from services.api.settings import ApiSettings


class KeyCache:
    def __init__(self, ttl_seconds: float, max_entries: int = 10_000) -> None:
        self._ttl = ttl_seconds
        self._max = max_entries
        self._entries: dict[bytes, tuple[float, ApiClient]] = {}

    def get(self, key_hash: bytes) -> ApiClient | None:
        entry = self._entries.get(key_hash)
        if entry is None:
            return None
        expires, client = entry
        if time.monotonic() >= expires:
            self._entries.pop(key_hash, None)
            return None
        return client

    def put(self, key_hash: bytes, client: ApiClient) -> None:
        if self._ttl <= 0:
            return
        if len(self._entries) >= self._max:
            self._entries.clear()
        self._entries[key_hash] = (time.monotonic() + self._ttl, client)


@dataclass
class AppContext:
    settings: ApiSettings
    clock: Clock
    key_cache: KeyCache
    rng: random.Random = field(default_factory=random.SystemRandom)
    policy: DunningPolicy = field(default_factory=DunningPolicy)
    engine: AsyncEngine | None = None
    sessions_: async_sessionmaker[AsyncSession] | None = None
    reads_: async_sessionmaker[AsyncSession] | None = None

    @property
    def sessions(self) -> async_sessionmaker[AsyncSession]:
        """Sessions for units of work: ``async with ctx.sessions.begin() as session``."""
        if self.sessions_ is None:
            raise RuntimeError("the application's lifespan has not started")
        return self.sessions_

    @property
    def reads(self) -> async_sessionmaker[AsyncSession]:
        """Autocommit sessions for single-statement reads (no BEGIN/ROLLBACK round trips)."""
        if self.reads_ is None:
            raise RuntimeError("the application's lifespan has not started")
        return self.reads_


def get_context(request: Request) -> AppContext:
    ctx = request.app.state.context
    assert isinstance(ctx, AppContext)
    return ctx
