"""Key management (create, revoke, rotate), each with its ``audit_event`` row, for the
``billing api-keys`` command and the API's admin routes alike. A create or rotate is given the
scopes its maker ``holds`` (the command line: all) and makes no key with another."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from billing_core.db.pg import Connection
from billing_core.domain.scopes import ALL_SCOPES, Scope, require_held
from billing_core.repo import api_clients as api_clients_repo
from billing_core.repo import audit
from billing_core.repo.api_clients import ApiKeyInfo


@dataclass(frozen=True)
class NewKey:
    info: ApiKeyInfo
    key: str  # shown once; only its hash is stored


async def create(
    conn: Connection,
    *,
    name: str,
    scopes: Sequence[Scope],
    now: datetime,
    actor: audit.Actor,
    expires_in: timedelta | None = None,
    rate_limit_per_minute: int | None = None,
    holds: Collection[Scope] = ALL_SCOPES,
) -> NewKey:
    name = name.strip()
    if not name:
        raise ValueError("the API client needs a name")
    require_held(scopes, holds)
    info, key = await api_clients_repo.create(
        conn,
        name=name,
        now=now,
        scopes=scopes,
        expires_at=None if expires_in is None else now + expires_in,
        rate_limit_per_minute=rate_limit_per_minute,
    )
    await _audit(conn, actor, audit.API_KEY_CREATE, info, now)
    return NewKey(info, key)


async def revoke(conn: Connection, prefix: str, *, now: datetime, actor: audit.Actor) -> ApiKeyInfo:
    info = await api_clients_repo.revoke_by_prefix(conn, prefix, now=now)
    await _audit(conn, actor, audit.API_KEY_REVOKE, info, now)
    return info


async def rotate(
    conn: Connection,
    prefix: str,
    *,
    now: datetime,
    grace: timedelta,
    actor: audit.Actor,
    expires_in: timedelta | None = None,
    holds: Collection[Scope] = ALL_SCOPES,
) -> tuple[ApiKeyInfo, NewKey]:
    """A new key for the client of ``prefix``; the old key works for ``grace`` more."""
    require_held((await api_clients_repo.lock_by_prefix(conn, prefix)).scopes, holds)
    old, new, key = await api_clients_repo.rotate(
        conn,
        prefix,
        now=now,
        grace=grace,
        expires_at=None if expires_in is None else now + expires_in,
    )
    await _audit(conn, actor, audit.API_KEY_ROTATE, old, now, new_prefix=new.key_prefix)
    return old, NewKey(new, key)


async def _audit(
    conn: Connection,
    actor: audit.Actor,
    action: str,
    info: ApiKeyInfo,
    now: datetime,
    **extra: str,
) -> None:
    detail: dict[str, object] = {
        "prefix": info.key_prefix,
        "name": info.name,
        "scopes": [str(s) for s in info.scopes],
        "expiresAt": None if info.expires_at is None else info.expires_at.isoformat(),
        **extra,
    }
    await audit.record(
        conn,
        audit.AuditEntry(actor, action, audit.API_CLIENT, info.id, detail=detail),
        now=now,
    )


def seconds(value: int) -> timedelta:
    return timedelta(seconds=value)
