"""Operator tasks for the API: API keys (``billing api-keys ...``), each change with its
``audit_event`` row (source CLI)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import TypeVar

from billing_core.clock import clock_from_offset
from billing_core.db import pg
from billing_core.db.pg import Connection
from billing_core.domain.scopes import ALL_SCOPES, Scope
from billing_core.repo import api_clients as api_clients_repo
from billing_core.repo import audit
from billing_core.repo.api_clients import ApiKeyInfo
from billing_core.settings import CoreSettings
from billing_core.usecases import api_keys as api_keys_uc

T = TypeVar("T")
_DURATION = re.compile(r"^\s*(\d{1,6})\s*([smhdw])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


def parse_duration(text: str) -> timedelta:
    """``90d``, ``12h``, ``30m``, ``45s``, ``2w`` as a duration."""
    m = _DURATION.match(text)
    if m is None:
        raise ValueError(f"not a duration: {text!r} (e.g. 90d, 12h, 30m)")
    return timedelta(seconds=int(m.group(1)) * _UNITS[m.group(2)])


async def _in_transaction(
    settings: CoreSettings, work: Callable[[Connection, datetime], Awaitable[T]]
) -> T:
    pool = await pg.create_pool(settings, max_size=1)
    try:
        async with pg.transaction(pool) as conn:
            return await work(conn, clock_from_offset(settings.clock_offset_seconds).now())
    finally:
        await pool.close()


async def create_key_async(
    settings: CoreSettings,
    name: str,
    *,
    scopes: Sequence[Scope] = ALL_SCOPES,
    expires_in: timedelta | None = None,
    rate_limit_per_minute: int | None = None,
) -> api_keys_uc.NewKey:
    async def work(conn: Connection, now: datetime) -> api_keys_uc.NewKey:
        return await api_keys_uc.create(
            conn,
            name=name,
            scopes=scopes,
            now=now,
            actor=audit.Actor.cli(),
            expires_in=expires_in,
            rate_limit_per_minute=rate_limit_per_minute,
        )

    return await _in_transaction(settings, work)


async def create_api_key_async(
    settings: CoreSettings,
    name: str,
    *,
    scopes: Sequence[Scope] = ALL_SCOPES,
    expires_in: timedelta | None = None,
    rate_limit_per_minute: int | None = None,
) -> str:
    """Create an API client named ``name``; return its key (shown once, stored hashed)."""
    new = await create_key_async(
        settings,
        name,
        scopes=scopes,
        expires_in=expires_in,
        rate_limit_per_minute=rate_limit_per_minute,
    )
    return new.key


def create_api_key(
    settings: CoreSettings,
    name: str,
    *,
    scopes: Sequence[Scope] = ALL_SCOPES,
    rate_limit_per_minute: int | None = None,
) -> str:
    return asyncio.run(
        create_api_key_async(
            settings, name, scopes=scopes, rate_limit_per_minute=rate_limit_per_minute
        )
    )


def create_key(
    settings: CoreSettings,
    name: str,
    *,
    scopes: Sequence[Scope],
    expires_in: timedelta | None,
    rate_limit_per_minute: int | None,
) -> api_keys_uc.NewKey:
    return asyncio.run(
        create_key_async(
            settings,
            name,
            scopes=scopes,
            expires_in=expires_in,
            rate_limit_per_minute=rate_limit_per_minute,
        )
    )


def list_keys(
    settings: CoreSettings, *, include_inactive: bool
) -> tuple[datetime, list[ApiKeyInfo]]:
    async def work(conn: Connection, now: datetime) -> tuple[datetime, list[ApiKeyInfo]]:
        return now, await api_clients_repo.list_all(
            conn, include_inactive=include_inactive, now=now
        )

    return asyncio.run(_in_transaction(settings, work))


def revoke_key(settings: CoreSettings, prefix: str) -> ApiKeyInfo:
    async def work(conn: Connection, now: datetime) -> ApiKeyInfo:
        return await api_keys_uc.revoke(conn, prefix, now=now, actor=audit.Actor.cli())

    return asyncio.run(_in_transaction(settings, work))


def rotate_key(
    settings: CoreSettings, prefix: str, *, grace: timedelta, expires_in: timedelta | None
) -> tuple[ApiKeyInfo, api_keys_uc.NewKey]:
    async def work(conn: Connection, now: datetime) -> tuple[ApiKeyInfo, api_keys_uc.NewKey]:
        return await api_keys_uc.rotate(
            conn, prefix, now=now, grace=grace, actor=audit.Actor.cli(), expires_in=expires_in
        )

    return asyncio.run(_in_transaction(settings, work))
