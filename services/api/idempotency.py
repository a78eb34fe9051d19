"""``Idempotency-Key`` for every POST, scoped to the calling API client: to the first key of its
rotation chain, so that a retry sent with the key that replaced it finds the same record.

* First request with a key: it runs, and its status, headers and body are stored in the same
  transaction as its effects (so a stored response exists exactly when the effects do).
* Same key, same request (method, path, body): the stored response is replayed byte for byte
  with ``Idempotent-Replayed: true``.
* Same key, different request: 422.
* Same key while the first request is still running: 409 with ``Retry-After``. The running
  request holds a transaction-scoped advisory lock on (client, key), taken before anything else.
* Only successful (2xx) responses are stored. A refused request changed nothing, so retrying it
  with the same key runs it again (e.g. after a 409 version conflict the client re-reads and
  retries).
* Records expire after ``idempotency_retention_seconds``. An expired record met on write is
  replaced; the API process also deletes expired records every
  ``idempotency_purge_interval_seconds`` (:func:`purge_loop`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Annotated, Any

from asyncpg import UniqueViolationError  # type: ignore[import-untyped]
from fastapi import Depends, Header, Request
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.responses import Response

from billing_core.db.pg import Connection
from billing_core.domain.errors import DomainError
from billing_core.domain.scopes import Scope
from billing_core.logging import get_logger
from billing_core.repo import audit as audit_repo
from billing_core.repo import idempotency as idempotency_repo
from billing_core.repo import subscriptions as subscriptions_repo
from billing_core.repo.api_clients import ApiClient
from billing_core.repo.idempotency import StoredResponse
from billing_core.repo.subscription_groups import KeyedNew
from services.api.auth import actor_of, requires
from services.api.context import AppContext, get_context
from services.api.problems import (
    IDEMPOTENCY_IN_FLIGHT,
    IDEMPOTENCY_KEY_INVALID,
    IDEMPOTENCY_KEY_REQUIRED,
    IDEMPOTENCY_MISMATCH,
    ApiProblem,
)

log = get_logger(__name__)

MAX_KEY_LENGTH = 255
IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
RETRY_AFTER_SECONDS = 1
JSON = "application/json"
STORED_KEY_CONSTRAINT = "pk_idempotency_key"
# Attempts of a write that names no version and meets concurrent writes (``run``).
CONFLICT_ATTEMPTS = 3
# Response headers worth replaying (the body's type and where the resource lives).
_STORED_HEADERS = ("content-type", "location", "etag")


@dataclass(frozen=True)
class Outcome:
    """What a write produced: status, JSON body bytes, extra headers."""

    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)


Work = Callable[[AsyncSession, datetime], Awaitable[Outcome]]
# (connection, now, the ids drawn, the record to store for an outcome) -> the outcome
Record = Callable[[Outcome], idempotency_repo.NewRecord]
PoolWork = Callable[[Connection, datetime, Sequence[int], Record], Awaitable[Outcome]]
# (now, the record to store for an outcome) -> the whole keyed request to write in one
# statement, and the outcome it stores
Prepare = Callable[[datetime, Record], Awaitable[tuple[KeyedNew, Outcome]]]


def request_fingerprint(method: str, path: str, body: bytes) -> bytes:
    """Hash of what makes two requests "the same": method, path and the JSON body's meaning."""
    try:
        canonical = json.dumps(
            json.loads(body), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        ).encode()
    except ValueError:
        canonical = body
    return hashlib.sha256(method.encode() + b"\n" + path.encode() + b"\n" + canonical).digest()


def _validate_key(raw: str | None) -> str | None:
    if raw is None:
        return None
    key = raw.strip()
    if not key or len(key) > MAX_KEY_LENGTH or not key.isprintable() or not key.isascii():
        raise ApiProblem(
            IDEMPOTENCY_KEY_INVALID,
            f"Idempotency-Key must be 1 to {MAX_KEY_LENGTH} printable ASCII characters.",
        )
    return key


class IdempotentWrite:
    """Runs one write in one transaction, under the request's Idempotency-Key if any."""

    def __init__(
        self, ctx: AppContext, request: Request, client: ApiClient, key: str | None
    ) -> None:
        self._ctx = ctx
        self._request = request
        self.client = client
        self.key = key

    @property
    def actor(self) -> audit_repo.Actor:
        """Who makes this write, for its ``audit_event`` row."""
        return actor_of(self._request, self.client.id)

    async def _fingerprint(self, method: str, path: str) -> bytes:
        return request_fingerprint(method, path, await self._request.body())

    def require_key(self) -> None:
        if self.key is None:
            raise ApiProblem(
                IDEMPOTENCY_KEY_REQUIRED,
                "This operation requires an Idempotency-Key header (e.g. a UUID).",
            )

    async def run(self, work: Work, *, expected_version: int | None = None) -> Response:
        """``work`` in one transaction. ``expected_version``: the version the request named
        (If-Match or expectedVersion); a write that then meets a concurrent one answers 409.
        A request that named none wants the change on the row as it is: a write that met a
        concurrent one on the same subscription (``VersionConflict``: a renewal, a payment
        result) runs again, in a new transaction on the row as it now is; at most
        ``CONFLICT_ATTEMPTS`` times."""
        retry_conflicts = expected_version is None
        attempt = 1
        while True:
            try:
                return await self._run_once(work)
            except subscriptions_repo.VersionConflict:
                if not retry_conflicts or attempt >= CONFLICT_ATTEMPTS:
                    raise
                attempt += 1
                log.info("write_retried_after_version_conflict", attempt=attempt)

    async def _run_once(self, work: Work) -> Response:
        ctx = self._ctx
        method = self._request.method
        path = self._request.scope["path"]
        fingerprint = await self._fingerprint(method, path) if self.key is not None else b""
        async with ctx.sessions.begin() as session:
            now = ctx.clock.now()
            if self.key is not None:
                replay = await self._claim(session, method, path, fingerprint, now)
                if replay is not None:
                    return replay
            outcome = await work(session, now)
            headers = {"content-type": JSON, **outcome.headers}
            if self.key is not None and 200 <= outcome.status < 300:
                await idempotency_repo.save(
                    session,
                    client_id=self.client.chain_id,
                    key=self.key,
                    request_method=method,
                    request_path=path,
                    request_hash=fingerprint,
                    status=outcome.status,
                    headers=_stored_headers(headers),
                    body=outcome.body,
                    now=now,
                    expires_at=now + timedelta(seconds=ctx.settings.idempotency_retention_seconds),
                )
        return Response(outcome.body, status_code=outcome.status, headers=headers)

    async def _claim(
        self, session: AsyncSession, method: str, path: str, fingerprint: bytes, now: datetime
    ) -> Response | None:
        assert self.key is not None
        if not await idempotency_repo.try_lock(session, self.client.chain_id, self.key):
            raise _in_flight()
        stored = await idempotency_repo.find(session, self.client.chain_id, self.key)
        if stored is not None and stored.expires_at <= now:
            await idempotency_repo.delete_key(session, self.client.chain_id, self.key)
            stored = None
        return None if stored is None else self._replay(stored, method, path, fingerprint)

    async def run_in_one_statement(
        self, prepare: Prepare, work: PoolWork, *, sequences: Sequence[str] = ()
    ) -> Response:
        """:meth:`run_on_pool` in one statement when it can be: ``prepare`` builds the request's
        rows and the statement writes everything (the key's lock, the look-up, the rows and the
        stored response) if the key is free and nothing is stored under it; the requests that
        arrive while one such statement runs are written together by the next
        (``ctx.creates``). What that statement cannot decide alone goes to :meth:`run_on_pool`
        with ``work``: a refused request (its error must not hide a response stored under the
        key), an expired stored response, and a first request that committed while this one
        started."""
        self.require_key()
        key = self.key
        assert key is not None
        ctx = self._ctx
        method = self._request.method
        path = self._request.scope["path"]
        fingerprint = await self._fingerprint(method, path)
        claimed: subscriptions_repo.Claimed | None = None
        try:
            now = ctx.clock.now()
            new, outcome = await prepare(now, self._record_for(key, method, path, fingerprint, now))
            claimed = await ctx.creates.submit(new)
        except DomainError:
            claimed = None
        except UniqueViolationError as exc:
            if exc.constraint_name != STORED_KEY_CONSTRAINT:
                raise
            claimed = None
        if claimed is None or (
            not claimed.created and claimed.stored is not None and claimed.stored.expires_at <= now
        ):
            return await self.run_on_pool(work, sequences=sequences)
        if not claimed.locked:
            raise _in_flight()
        if claimed.stored is not None:
            return self._replay(claimed.stored, method, path, fingerprint)
        assert claimed.created
        return Response(
            outcome.body,
            status_code=outcome.status,
            headers={"content-type": JSON, **outcome.headers},
        )

    def _record_for(
        self, key: str, method: str, path: str, fingerprint: bytes, now: datetime
    ) -> Record:
        client_id = self.client.chain_id
        expires_at = now + timedelta(seconds=self._ctx.settings.idempotency_retention_seconds)

        def record(outcome: Outcome) -> idempotency_repo.NewRecord:
            if not 200 <= outcome.status < 300:
                raise ValueError("only successful responses are stored")
            return idempotency_repo.NewRecord(
                client_id=client_id,
                key=key,
                request_method=method,
                request_path=path,
                request_hash=fingerprint,
                status=outcome.status,
                headers=_stored_headers({"content-type": JSON, **outcome.headers}),
                body=outcome.body,
                now=now,
                expires_at=expires_at,
            )

        return record

    async def run_on_pool(self, work: PoolWork, *, sequences: Sequence[str] = ()) -> Response:
        """:meth:`run` for a write that requires a key, on the plain asyncpg pool and in fewer
        round trips: the key's lock is taken by the statement that draws the ids ``work`` will
        insert (the next values of ``sequences``), and ``work`` stores the response with its
        own statement: it is given ``record(outcome)``, the row to write for its outcome (a
        2xx). Same rules as :meth:`run`: replay, mismatch, in flight, expiry."""
        self.require_key()
        key = self.key
        assert key is not None
        ctx = self._ctx
        method = self._request.method
        path = self._request.scope["path"]
        fingerprint = await self._fingerprint(method, path)
        client_id = self.client.chain_id
        async with ctx.pg.acquire() as conn, conn.transaction():
            now = ctx.clock.now()
            locked, ids = await idempotency_repo.try_lock_and_draw(conn, client_id, key, sequences)
            if not locked:
                raise _in_flight()
            stored = await idempotency_repo.find_on(conn, client_id, key)
            if stored is not None and stored.expires_at <= now:
                await idempotency_repo.delete_key_on(conn, client_id, key)
                stored = None
            if stored is not None:
                return self._replay(stored, method, path, fingerprint)
            record = self._record_for(key, method, path, fingerprint, now)
            outcome = await work(conn, now, ids, record)
        return Response(
            outcome.body,
            status_code=outcome.status,
            headers={"content-type": JSON, **outcome.headers},
        )

    def _replay(
        self, stored: StoredResponse, method: str, path: str, fingerprint: bytes
    ) -> Response:
        if (stored.request_method, stored.request_path, stored.request_hash) != (
            method,
            path,
            fingerprint,
        ):
            raise ApiProblem(
                IDEMPOTENCY_MISMATCH,
                "This Idempotency-Key was used for a different request "
                f"({stored.request_method} {stored.request_path}); use a new key.",
            )
        log.info("idempotent_replay", client_id=self.client.id, path=path)
        return Response(
            stored.body,
            status_code=stored.status,
            headers={**stored.headers, REPLAYED_HEADER: "true"},
        )


def _in_flight() -> ApiProblem:
    return ApiProblem(
        IDEMPOTENCY_IN_FLIGHT,
        "A request with this Idempotency-Key is still being processed; retry later.",
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


def _stored_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items() if k.lower() in _STORED_HEADERS}


_IdempotencyKey = Annotated[
    str | None,
    Header(
        alias=IDEMPOTENCY_KEY_HEADER,
        description="Makes the request safe to retry: the first response is stored and "
        "replayed for the same key (24 h by default).",
    ),
]


def idempotent_write(scope: Scope) -> Any:
    """``Annotated[IdempotentWrite, idempotent_write(Scope.X)]``: a write that needs a key with
    scope X (the route's one scope declaration; see ``services.api.auth.requires``)."""
    dependency = _WRITES.get(scope)
    if dependency is None:

        async def write(
            request: Request, client: ApiClient, idempotency_key: str | None = None
        ) -> IdempotentWrite:
            return IdempotentWrite(
                get_context(request), request, client, _validate_key(idempotency_key)
            )

        # Real objects, not the strings of postponed annotations: the scope is this call's.
        write.__annotations__ = {
            "request": Request,
            "client": Annotated[ApiClient, requires(scope)],
            "idempotency_key": _IdempotencyKey,
            "return": IdempotentWrite,
        }
        dependency = _WRITES[scope] = Depends(write)
    return dependency


_WRITES: dict[Scope, Any] = {}


# The write of most routes: subscriptions and what they bill (customers, trials, renewals).
SubscriptionsWrite = Annotated[IdempotentWrite, idempotent_write(Scope.SUBSCRIPTIONS_WRITE)]


async def purge_expired(ctx: AppContext, *, batch_size: int = 1000) -> int:
    total = 0
    while True:
        async with ctx.sessions.begin() as session:
            n = await idempotency_repo.purge_expired(
                session, now=ctx.clock.now(), batch_size=batch_size
            )
        total += n
        if n < batch_size:
            return total


async def purge_loop(ctx: AppContext, interval: float) -> None:
    """Delete expired idempotency records every ``interval`` seconds until cancelled."""
    while True:
        await asyncio.sleep(interval)
        try:
            purged = await purge_expired(ctx)
            if purged:
                log.info("idempotency_keys_purged", count=purged)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("idempotency_purge_failed", error=repr(exc))


async def rolled_back(ctx: AppContext, work: Work) -> Response:
    """Run ``work`` in a transaction that is always rolled back and answer its outcome: a
    preview made by the real code path, which writes nothing (and stores nothing under an
    Idempotency-Key). Its row locks last only as long as the work."""
    async with ctx.sessions() as session:
        transaction = await session.begin()
        try:
            result = await work(session, ctx.clock.now())
        finally:
            await transaction.rollback()
    return Response(
        result.body,
        status_code=result.status,
        media_type=JSON,
        headers={k: v for k, v in result.headers.items() if k.lower() != "etag"},
    )
