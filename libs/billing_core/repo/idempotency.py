"""Stored responses for the API's ``Idempotency-Key`` header, scoped to the calling API client.

A record is written in the same transaction as the request's effects, so it exists exactly when
those effects were committed. While a request runs, it holds a transaction-scoped advisory lock
on a hash of (client, key): a concurrent request with the same key fails to take it and is told
to retry later instead of running the work twice.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select, text, tuple_
from sqlalchemy.ext.asyncio import AsyncSession

from billing_core.db import tables as t

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


# A stored response's columns, as :func:`record_values` names them, with their SQL types (for a
# statement that takes them as arrays).
RECORD_COLUMNS = (
    ("client_id", "bigint"),
    ("key", "varchar"),
    ("request_method", "varchar"),
    ("request_path", "text"),
    ("request_hash", "bytea"),
    ("response_status", "int"),
    ("response_headers", "text"),
    ("response_body", "bytea"),
    ("completed_at", "timestamptz"),
    ("expires_at", "timestamptz"),
)


def insert_select_sql(rows: str = "") -> str:
    """The one ``INSERT`` of stored responses: the :data:`RECORD_COLUMNS` of each row of
    ``rows`` (a relation of the caller's statement; none: one row of ``:name`` parameters). A
    record is created and completed at once (``completed_at``)."""
    value = {c: f"{rows}.{c}" if rows else f":{c}" for c, _ in RECORD_COLUMNS}
    value["response_headers"] = f"CAST({value['response_headers']} AS jsonb)"
    source = f" FROM {rows}" if rows else ""
    return (
        "INSERT INTO idempotency_key (client_id, key, request_method, request_path, "
        "request_hash, response_status, response_headers, response_body, created_at, "
        "completed_at, expires_at) "
        f"SELECT {', '.join(value[c] for c, _ in RECORD_COLUMNS[:8])}, {value['completed_at']}, "
        f"{value['completed_at']}, {value['expires_at']}{source}"
    )


_SAVE = text(insert_select_sql())


async def save(session: AsyncSession, record: NewRecord) -> None:
    await session.execute(_SAVE, record_values(record))


STORED_COLUMNS = (
    "request_method, request_path, request_hash, response_status, response_headers, "
    "response_body, expires_at"
)


def stored_response(row: Mapping[str, Any]) -> StoredResponse:
    """A :class:`StoredResponse` from a row holding ``STORED_COLUMNS`` by name (the headers as
    JSON text)."""
    headers = row["response_headers"]
    return StoredResponse(
        row["request_method"],
        row["request_path"],
        bytes(row["request_hash"]),
        int(row["response_status"] or 0),
        dict(json.loads(headers)) if headers else {},
        bytes(row["response_body"] or b""),
        row["expires_at"],
    )


def record_values(record: NewRecord) -> dict[str, object]:
    """``record`` by the name of its ``idempotency_key`` column (``completed_at``: its ``now``,
    also its ``created_at``; the headers as JSON text)."""
    return {
        "client_id": record.client_id,
        "key": record.key,
        "request_method": record.request_method,
        "request_path": record.request_path,
        "request_hash": record.request_hash,
        "response_status": record.status,
        "response_headers": json.dumps(dict(record.headers), separators=(",", ":")),
        "response_body": record.body,
        "completed_at": record.now,
        "expires_at": record.expires_at,
    }


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
