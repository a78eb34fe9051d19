"""API clients and their keys. A key is shown once at creation; only its SHA-256 is stored.

A key is valid while it is neither revoked nor past its ``expires_at``. Rotation creates a new
key (a new client row with the same name, scopes and limit, ``rotated_from_id`` pointing at the
old one) and shortens the old key's life to a grace period. The keys of one rotation chain share
their idempotency records (:attr:`ApiClient.chain_id`).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from billing_core.db import pg
from billing_core.db.arrays import text_array
from billing_core.db.pg import Connection, Statement
from billing_core.domain.errors import DomainError
from billing_core.domain.scopes import Scope

KEY_PREFIX = "bk_"
# last_used_at is written by the look-up at most this often per key (a hot key would otherwise
# rewrite its row on every cache miss of every replica).
LAST_USED_RESOLUTION = timedelta(minutes=1)


class ApiKeyNotFound(DomainError):
    def __init__(self, prefix: str) -> None:
        super().__init__(f"no API key with prefix {prefix!r}")
        self.prefix = prefix


class ApiKeyAmbiguous(DomainError):
    def __init__(self, prefix: str) -> None:
        super().__init__(f"more than one API key has prefix {prefix!r}: give more characters")
        self.prefix = prefix


class ApiKeyInactive(DomainError):
    def __init__(self, prefix: str) -> None:
        super().__init__(f"the API key {prefix!r} is revoked or expired")
        self.prefix = prefix


@dataclass(frozen=True)
class ApiClient:
    """A verified key's client: what the API needs on every request (kept in its cache)."""

    id: int
    name: str
    key_prefix: str
    scopes: frozenset[Scope] = frozenset(Scope)
    expires_at: datetime | None = None
    rate_limit_per_minute: int | None = None
    # The first key of this key's rotation chain (None: this key is the first).
    first_key_id: int | None = None

    def active_at(self, now: datetime) -> bool:
        return self.expires_at is None or now < self.expires_at

    @property
    def chain_id(self) -> int:
        """What the client's idempotency records belong to: the first key of its rotation
        chain, so that a retry sent with a rotated key is the request its old key sent."""
        return self.id if self.first_key_id is None else self.first_key_id


@dataclass(frozen=True)
class ApiKeyInfo:
    """A key as an operator sees it (never the key itself)."""

    id: int
    name: str
    key_prefix: str
    scopes: tuple[Scope, ...]
    created_at: datetime
    last_used_at: datetime | None
    expires_at: datetime | None
    revoked_at: datetime | None
    rate_limit_per_minute: int | None
    rotated_from_id: int | None

    def status_at(self, now: datetime) -> Literal["active", "expired", "revoked"]:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "active"


def hash_key(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def new_key() -> str:
    """``bk_`` + 43 url-safe characters (256 random bits)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def display_prefix(key: str) -> str:
    """The part of a key that may be shown and logged to identify it (never enough to use it)."""
    return key[:11]


def _scopes(values: Sequence[str]) -> tuple[Scope, ...]:
    wanted = {Scope(v) for v in values}
    return tuple(s for s in Scope if s in wanted)


_INFO_COLUMNS = (
    "id, name, key_prefix, scopes, created_at, last_used_at, expires_at, revoked_at, "
    "rate_limit_per_minute, rotated_from_id"
)


def _info(row: Any) -> ApiKeyInfo:
    values = dict(row)
    values["scopes"] = _scopes(values["scopes"])
    return ApiKeyInfo(**values)


_CREATE = Statement(
    f"""
    INSERT INTO api_client (name, key_prefix, key_hash, created_at, scopes, expires_at,
                            rate_limit_per_minute, rotated_from_id)
    VALUES (:name, :key_prefix, :key_hash, :created_at, CAST(:scopes AS text)::text[],
            :expires_at, :rate_limit_per_minute, :rotated_from_id)
    RETURNING {_INFO_COLUMNS}
    """
)


async def create(
    conn: Connection,
    *,
    name: str,
    now: datetime,
    scopes: Sequence[Scope] = tuple(Scope),
    expires_at: datetime | None = None,
    rate_limit_per_minute: int | None = None,
    rotated_from_id: int | None = None,
) -> tuple[ApiKeyInfo, str]:
    """Create a client and return it with its key; the key cannot be recovered later."""
    if not scopes:
        raise ValueError("an API key needs at least one scope")
    key = new_key()
    row = await pg.fetchrow(
        conn,
        _CREATE,
        {
            "name": name,
            "key_prefix": display_prefix(key),
            "key_hash": hash_key(key),
            "created_at": now,
            "scopes": text_array(str(s) for s in _scopes([str(s) for s in scopes])),
            "expires_at": expires_at,
            "rate_limit_per_minute": rate_limit_per_minute,
            "rotated_from_id": rotated_from_id,
        },
    )
    assert row is not None
    return _info(row), key


# The verification of a key, the first key of its rotation chain, and its last use noted (at
# most once per LAST_USED_RESOLUTION), in one statement.
_FIND_ACTIVE = Statement(
    """
WITH RECURSIVE k AS (
    SELECT id, name, key_prefix, scopes, expires_at, rate_limit_per_minute, last_used_at,
        rotated_from_id
    FROM api_client
    WHERE key_hash = :hash AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > :now)
), chain AS (
    SELECT id, rotated_from_id FROM k
    UNION ALL
    SELECT a.id, a.rotated_from_id FROM api_client a JOIN chain ON a.id = chain.rotated_from_id
), used AS (
    UPDATE api_client SET last_used_at = :now
    FROM k WHERE api_client.id = k.id AND (k.last_used_at IS NULL OR k.last_used_at < :stale)
)
SELECT id, name, key_prefix, scopes, expires_at, rate_limit_per_minute,
    (SELECT chain.id FROM chain WHERE chain.rotated_from_id IS NULL) AS first_key_id
FROM k
"""
)


async def find_active_by_key(conn: Connection, key: str, *, now: datetime) -> ApiClient | None:
    row = await pg.fetchrow(
        conn,
        _FIND_ACTIVE,
        {"hash": hash_key(key), "now": now, "stale": now - LAST_USED_RESOLUTION},
    )
    if row is None:
        return None
    return ApiClient(
        id=int(row["id"]),
        name=row["name"],
        key_prefix=row["key_prefix"],
        scopes=frozenset(_scopes(row["scopes"])),
        expires_at=row["expires_at"],
        rate_limit_per_minute=row["rate_limit_per_minute"],
        first_key_id=row["first_key_id"] if row["first_key_id"] != row["id"] else None,
    )


_STILL_HOLDS = Statement(
    """
    SELECT 1 FROM api_client
    WHERE id = :id AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > :now)
      AND CAST(:scope AS text) = ANY(scopes)
    """
)


async def still_holds(conn: Connection, client_id: int, scope: Scope, *, now: datetime) -> bool:
    """Is this client still active (not revoked, not expired) and does it still hold ``scope``?"""
    found = await pg.fetchrow(
        conn, _STILL_HOLDS, {"id": client_id, "scope": str(scope), "now": now}
    )
    return found is not None


_LIST_ALL = Statement(f"SELECT {_INFO_COLUMNS} FROM api_client ORDER BY id")
_LIST_ACTIVE = Statement(
    f"""
    SELECT {_INFO_COLUMNS} FROM api_client
    WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > :now)
    ORDER BY id
    """
)


async def list_all(conn: Connection, *, include_inactive: bool, now: datetime) -> list[ApiKeyInfo]:
    if include_inactive:
        rows = await pg.fetch(conn, _LIST_ALL)
    else:
        rows = await pg.fetch(conn, _LIST_ACTIVE, {"now": now})
    return [_info(row) for row in rows]


_LOCK_BY_PREFIX = Statement(
    f"""
    SELECT {_INFO_COLUMNS} FROM api_client
    WHERE starts_with(key_prefix, :prefix)
    ORDER BY id
    LIMIT 2
    FOR UPDATE
    """
)


async def lock_by_prefix(conn: Connection, prefix: str) -> ApiKeyInfo:
    """The key whose prefix starts with ``prefix``, row-locked until the end of the transaction."""
    if len(prefix) < 6:
        raise ApiKeyAmbiguous(prefix)
    rows = await pg.fetch(conn, _LOCK_BY_PREFIX, {"prefix": prefix})
    if not rows:
        raise ApiKeyNotFound(prefix)
    if len(rows) > 1:
        raise ApiKeyAmbiguous(prefix)
    return _info(rows[0])


_REVOKE = Statement("UPDATE api_client SET revoked_at = :now WHERE id = :id AND revoked_at IS NULL")


async def revoke(conn: Connection, client_id: int, *, now: datetime) -> bool:
    return await pg.execute(conn, _REVOKE, {"id": client_id, "now": now}) > 0


async def revoke_by_prefix(conn: Connection, prefix: str, *, now: datetime) -> ApiKeyInfo:
    """Revoke the key (already revoked: unchanged); return it as it is now."""
    found = await lock_by_prefix(conn, prefix)
    await revoke(conn, found.id, now=now)
    return await lock_by_prefix(conn, found.key_prefix)


_SHORTEN = Statement("UPDATE api_client SET expires_at = :expires_at WHERE id = :id")


async def rotate(
    conn: Connection,
    prefix: str,
    *,
    now: datetime,
    grace: timedelta,
    expires_at: datetime | None = None,
) -> tuple[ApiKeyInfo, ApiKeyInfo, str]:
    """A new key like the active key ``prefix`` (name, scopes, limit); the old one stays valid
    for ``grace`` more (or until it expires, if sooner). Returns (old, new, the new key)."""
    old = await lock_by_prefix(conn, prefix)
    if old.status_at(now) != "active":
        raise ApiKeyInactive(old.key_prefix)
    old_ends = now + grace
    if old.expires_at is not None and old.expires_at < old_ends:
        old_ends = old.expires_at
    await pg.execute(conn, _SHORTEN, {"id": old.id, "expires_at": old_ends})
    new, key = await create(
        conn,
        name=old.name,
        now=now,
        scopes=old.scopes,
        expires_at=expires_at,
        rate_limit_per_minute=old.rate_limit_per_minute,
        rotated_from_id=old.id,
    )
    return await lock_by_prefix(conn, old.key_prefix), new, key
