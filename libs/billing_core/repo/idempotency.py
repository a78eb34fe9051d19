"""Stored responses for the API's ``Idempotency-Key`` header, scoped to the calling API client.

A record is written in the same transaction as the request's effects, so it exists exactly when
those effects were committed. While a request runs, it holds a transaction-scoped advisory lock
on a hash of (client, key): a concurrent request with the same key fails to take it and is told
to retry later instead of running the work twice.

A key is claimed by the CTEs of :func:`claim_sql` — the lock taken without waiting, the stored
response looked up, an expired one deleted — in :func:`claim` for one request and in the create
statement of ``subscription_groups`` for each request of a group. The look-up's snapshot
predates the lock: a first request that committed in between is not seen, and its stored
response makes the second one's insert fail (``pk_idempotency_key``): the caller runs the
request again, and the claim then finds it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from billing_core.db import pg
from billing_core.db.pg import Connection, Statement


@dataclass(frozen=True)
class StoredResponse:
    request_method: str
    request_path: str
    request_hash: bytes
    status: int
    headers: dict[str, str]
    body: bytes
    expires_at: datetime


@dataclass(frozen=True)
class Claim:
    """A key claimed: whether its lock was taken, and the live response stored under it."""

    locked: bool
    stored: StoredResponse | None


def lock_id(client_id: int, key: str) -> int:
    """A signed 64-bit advisory-lock id for (client, key)."""
    digest = hashlib.sha256(f"idempotency:{client_id}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


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
# What a claim reads of a stored response (:func:`stored_response`).
STORED_COLUMNS = tuple(
    c for c, _ in RECORD_COLUMNS if c not in ("client_id", "key", "completed_at")
)


def claim_sql(requests: str) -> str:
    """The claim of each request's key, as CTEs of the caller's ``WITH``: ``requests`` is a
    relation aliased ``r`` with columns ``n`` (the request's number), ``client_id``, ``key``,
    ``lock_id`` and ``completed_at`` (the request's now). ``req``: its rows with ``ok``, the
    key's lock taken; ``found``: the response stored under each locked key, by ``n``, live when
    ``found.expires_at > req.completed_at``; ``expired``: those that were not, deleted."""
    return f"""
req AS MATERIALIZED (
    SELECT r.*, pg_try_advisory_xact_lock(r.lock_id) AS ok FROM {requests}
),
found AS MATERIALIZED (
    SELECT req.n, k.*
    FROM req CROSS JOIN LATERAL (
        SELECT {", ".join(STORED_COLUMNS)} FROM idempotency_key
        WHERE client_id = req.client_id AND key = req.key
        LIMIT 1
    ) k
    WHERE req.ok
),
expired AS MATERIALIZED (
    DELETE FROM idempotency_key k USING req JOIN found ON found.n = req.n
    WHERE found.expires_at <= req.completed_at AND k.client_id = req.client_id
        AND k.key = req.key
    RETURNING k.key
)"""


_CLAIM = Statement(
    f"""
WITH {
        claim_sql(
            "(SELECT 0 AS n, CAST(:client_id AS bigint) AS client_id, "
            "CAST(:key AS varchar) AS key, CAST(:lock_id AS bigint) AS lock_id, "
            "CAST(:now AS timestamptz) AS completed_at) AS r"
        )
    }
SELECT req.ok AS locked, {", ".join(f"found.{c}" for c in STORED_COLUMNS)}
FROM req LEFT JOIN found ON found.n = req.n AND found.expires_at > req.completed_at
"""
)


async def claim(conn: Connection, client_id: int, key: str, *, now: datetime) -> Claim:
    """Claim ``key`` in ``conn``'s transaction (see the module)."""
    row = await pg.fetchrow(
        conn,
        _CLAIM,
        {"client_id": client_id, "key": key, "lock_id": lock_id(client_id, key), "now": now},
    )
    assert row is not None
    return claimed(row)


def claimed(row: Mapping[str, Any]) -> Claim:
    """The :class:`Claim` of a row holding ``locked`` and the :data:`STORED_COLUMNS` of the live
    response (NULL: none)."""
    stored = None if row["request_method"] is None else stored_response(row)
    return Claim(bool(row["locked"]), stored)


def insert_select_sql(rows: str = "") -> str:
    """The one ``INSERT`` of stored responses: the :data:`RECORD_COLUMNS` of each row of
    ``rows`` (a relation of the caller's statement; none: one row of ``:name`` parameters). A
    record is created and completed at once (``completed_at``)."""
    value = {c: f"{rows}.{c}" if rows else f":{c}" for c, _ in RECORD_COLUMNS}
    value["response_headers"] = f"CAST({value['response_headers']} AS jsonb)"
    value["created_at"] = value["completed_at"]
    columns = [c for c, _ in RECORD_COLUMNS] + ["created_at"]
    source = f" FROM {rows}" if rows else ""
    return (
        f"INSERT INTO idempotency_key ({', '.join(columns)}) "
        f"SELECT {', '.join(value[c] for c in columns)}{source}"
    )


_SAVE = Statement(insert_select_sql())


async def save(conn: Connection, record: NewRecord) -> None:
    await pg.execute(conn, _SAVE, record_values(record))


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


_PURGE_EXPIRED = Statement(
    """
    WITH doomed AS (
        SELECT client_id, key FROM idempotency_key
        WHERE expires_at <= :now
        LIMIT :batch_size
        FOR UPDATE SKIP LOCKED
    )
    DELETE FROM idempotency_key
    WHERE (client_id, key) IN (SELECT client_id, key FROM doomed)
    """
)


async def purge_expired(conn: Connection, *, now: datetime, batch_size: int = 1000) -> int:
    """Delete up to ``batch_size`` expired records (rows other replicas hold are skipped)."""
    return await pg.execute(conn, _PURGE_EXPIRED, {"now": now, "batch_size": batch_size})
