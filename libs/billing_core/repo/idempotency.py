"""Stored responses for the API's ``Idempotency-Key`` header, scoped to the calling API client.

A record is written in the same transaction as the request's effects, so it exists exactly when
those effects were committed. While a request runs, it holds a transaction-scoped advisory lock
on a hash of (client, key): a concurrent request with the same key fails to take it and is told
to retry later instead of running the work twice.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, insert, select, text, tuple_
from sqlalchemy.ext.asyncio import AsyncSession

from billing_core.db import tables as t
from billing_core.db.pg import Connection

_k = t.idempotency_key


@dataclass(frozen=True)
class StoredResponse:
    request_method: str
    request_path: str
    request_hash: bytes
    status: int
    headers: dict[str, str]
    body: bytes
    expires_at: datetime


def lock_id(client_id: int, key: str) -> int:
    """A signed 64-bit advisory-lock id for (client, key)."""
    digest = hashlib.sha256(f"idempotency:{client_id}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


async def try_lock(session: AsyncSession, client_id: int, key: str) -> bool:
    """Take the (client, key) lock until the end of the transaction, without waiting."""
    result = await session.execute(
        text("SELECT pg_try_advisory_xact_lock(:id)"), {"id": lock_id(client_id, key)}
    )
    return bool(result.scalar_one())


async def find(session: AsyncSession, client_id: int, key: str) -> StoredResponse | None:
    row = (
        await session.execute(
            select(
                _k.c.request_method,
                _k.c.request_path,
                _k.c.request_hash,
                _k.c.response_status,
                _k.c.response_headers,
                _k.c.response_body,
                _k.c.expires_at,
            ).where(_k.c.client_id == client_id, _k.c.key == key)
        )
    ).first()
    if row is None:
        return None
    method, path, req_hash, status, headers, body, expires_at = row
    return StoredResponse(
        method,
        path,
        bytes(req_hash),
        int(status or 0),
        dict(headers or {}),
        bytes(body or b""),
        expires_at,
    )


async def delete_key(session: AsyncSession, client_id: int, key: str) -> None:
    await session.execute(delete(_k).where(_k.c.client_id == client_id, _k.c.key == key))


async def save(
    session: AsyncSession,
    *,
    client_id: int,
    key: str,
    request_method: str,
    request_path: str,
    request_hash: bytes,
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    now: datetime,
    expires_at: datetime,
) -> None:
    await session.execute(
        insert(_k).values(
            client_id=client_id,
            key=key,
            request_method=request_method,
            request_path=request_path,
            request_hash=request_hash,
            response_status=status,
            response_headers=dict(headers),
            response_body=body,
            created_at=now,
            completed_at=now,
            expires_at=expires_at,
        )
    )


@dataclass(frozen=True)
class NewRecord:
    """A response to store under (client, key), written by the statement that made it."""

    client_id: int
    key: str
    request_method: str
    request_path: str
    request_hash: bytes
    status: int
    headers: Mapping[str, str]
    body: bytes
    now: datetime
    expires_at: datetime


def insert_record_sql(first: int, source: str | None = None) -> str:
    """``INSERT`` of a :class:`NewRecord` whose parameters start at ``$first`` (to be one part
    of a caller's statement), once per row of ``source`` if given (a CTE of that statement);
    :func:`record_parameters` gives them in order."""
    p = [f"${first + i}" for i in range(10)]
    values = (
        f"{p[0]}, {p[1]}, {p[2]}, {p[3]}, {p[4]}, {p[5]}, {p[6]}::jsonb, {p[7]}, {p[8]}, "
        f"{p[8]}, {p[9]}"
    )
    rows = f"VALUES ({values})" if source is None else f"SELECT {values} FROM {source}"
    return (
        "INSERT INTO idempotency_key (client_id, key, request_method, request_path, "
        "request_hash, response_status, response_headers, response_body, created_at, "
        f"completed_at, expires_at) {rows}"
    )


def stored_response(row: Sequence[Any]) -> StoredResponse:
    """A :class:`StoredResponse` from the columns of ``STORED_COLUMNS``, in order."""
    method, path, req_hash, status, headers, body, expires_at = row
    return StoredResponse(
        method,
        path,
        bytes(req_hash),
        int(status or 0),
        dict(json.loads(headers)) if headers else {},
        bytes(body or b""),
        expires_at,
    )


STORED_COLUMNS = (
    "request_method, request_path, request_hash, response_status, response_headers, "
    "response_body, expires_at"
)


def record_parameters(record: NewRecord) -> tuple[object, ...]:
    return (
        record.client_id,
        record.key,
        record.request_method,
        record.request_path,
        record.request_hash,
        record.status,
        json.dumps(dict(record.headers), separators=(",", ":")),
        record.body,
        record.now,
        record.expires_at,
    )


_SEQUENCE = re.compile(r"^[a-z_][a-z0-9_]*$")
_LOCK_AND_DRAW: dict[tuple[str, ...], str] = {}


async def try_lock_and_draw(
    conn: Connection, client_id: int, key: str, sequences: Sequence[str] = ()
) -> tuple[bool, list[int]]:
    """:func:`try_lock` on a driver connection, drawing in the same statement the next value of
    each of ``sequences`` (the ids the request will insert; unused ones leave harmless gaps)."""
    names = tuple(sequences)
    sql = _LOCK_AND_DRAW.get(names)
    if sql is None:
        if not all(_SEQUENCE.match(name) for name in names):
            raise ValueError(f"not sequence names: {names!r}")
        sql = "SELECT pg_try_advisory_xact_lock($1)" + "".join(
            f", nextval('{name}')" for name in names
        )
        _LOCK_AND_DRAW[names] = sql
    row = await conn.fetchrow(sql, lock_id(client_id, key))
    return bool(row[0]), [int(v) for v in row[1:]]


_FIND = f"SELECT {STORED_COLUMNS} FROM idempotency_key WHERE client_id = $1 AND key = $2"


async def find_on(conn: Connection, client_id: int, key: str) -> StoredResponse | None:
    """:func:`find` on a driver connection."""
    row = await conn.fetchrow(_FIND, client_id, key)
    return None if row is None else stored_response(row)


_DELETE = "DELETE FROM idempotency_key WHERE client_id = $1 AND key = $2"


async def delete_key_on(conn: Connection, client_id: int, key: str) -> None:
    await conn.execute(
        "DELETE FROM idempotency_key WHERE client_id = $1 AND key = $2", client_id, key
    )


async def purge_expired(session: AsyncSession, *, now: datetime, batch_size: int = 1000) -> int:
    """Delete up to ``batch_size`` expired records (rows other replicas hold are skipped)."""
    doomed = (
        select(_k.c.client_id, _k.c.key)
        .where(_k.c.expires_at <= now)
        .limit(batch_size)
        .with_for_update(skip_locked=True)
        .cte("doomed")
    )
    result = await session.execute(
        delete(_k)
        .where(tuple_(_k.c.client_id, _k.c.key).in_(select(doomed.c.client_id, doomed.c.key)))
        .returning(_k.c.key)
    )
    return len(result.all())
