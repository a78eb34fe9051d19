"""Operator tasks for the API: creating API keys."""

from __future__ import annotations

import asyncio

from billing_core.clock import clock_from_offset
from billing_core.db.engine import create_engine, session_factory
from billing_core.repo import api_clients as api_clients_repo
from billing_core.settings import CoreSettings


async def create_api_key_async(settings: CoreSettings, name: str) -> str:
    """Create an API client named ``name``; return its key (shown once, stored hashed)."""
    if not name.strip():
        raise ValueError("the API client needs a name")
    engine = create_engine(settings, pool_size=1)
    try:
        async with session_factory(engine).begin() as session:
            _client, key = await api_clients_repo.create(
                session,
                name=name.strip(),
                now=clock_from_offset(settings.clock_offset_seconds).now(),
            )
    finally:
        await engine.dispose()
    return key


def create_api_key(settings: CoreSettings, name: str) -> str:
    return asyncio.run(create_api_key_async(settings, name))
