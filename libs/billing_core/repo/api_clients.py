"""API clients and their keys. A key is shown once at creation; only its SHA-256 is stored."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from billing_core.db import tables as t

KEY_PREFIX = "bk_"
_c = t.api_client


@dataclass(frozen=True)
class ApiClient:
    id: int
    name: str
    key_prefix: str


def hash_key(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def new_key() -> str:
    """``bk_`` + 43 url-safe characters (256 random bits)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def display_prefix(key: str) -> str:
    """The part of a key that may be shown and logged to identify it (never enough to use it)."""
    return key[:11]


async def create(session: AsyncSession, *, name: str, now: datetime) -> tuple[ApiClient, str]:
    """Create a client and return it with its key; the key cannot be recovered later."""
    key = new_key()
    prefix = display_prefix(key)
    client_id = (
        await session.execute(
            insert(_c)
            .values(name=name, key_prefix=prefix, key_hash=hash_key(key), created_at=now)
            .returning(_c.c.id)
        )
    ).scalar_one()
    return ApiClient(int(client_id), name, prefix), key


async def find_active_by_key(session: AsyncSession, key: str) -> ApiClient | None:
    row = (
        (
            await session.execute(
                select(_c.c.id, _c.c.name, _c.c.key_prefix).where(
                    _c.c.key_hash == hash_key(key), _c.c.revoked_at.is_(None)
                )
            )
        )
        .mappings()
        .first()
    )
    return None if row is None else ApiClient(**row)


async def revoke(session: AsyncSession, client_id: int, *, now: datetime) -> bool:
    result = await session.execute(
        update(_c)
        .where(_c.c.id == client_id, _c.c.revoked_at.is_(None))
        .values(revoked_at=now)
        .returning(_c.c.id)
    )
    return result.first() is not None
