"""``Idempotency-Key`` for every POST, scoped to the calling API client: to the first key of its
rotation chain, so that a retry sent with the key that replaced it finds the same record.

* First request with a key: it runs, and its status, headers and body are stored in the same
  transaction as its effects (so a stored response exists exactly when the effects do).
* Same key, same request (method, path, body): the stored response is replayed byte for byte
  with ``Idempotent-Replayed: true``.
* Same key, different request: 422.
* Same key while the first request is still running: 409 with ``Retry-After``. The running
  request holds a transaction-scoped advisory lock on (client, key) until it commits.
* Only successful (2xx) responses are stored. A refused request changed nothing, so retrying it
  with the same key runs it again (e.g. after a 409 version conflict the client re-reads and
  retries).
* Records expire after ``idempotency_retention_seconds``. An expired record met on write is
  replaced; the API process also deletes expired records every
  ``idempotency_purge_interval_seconds`` (:func:`purge_loop`).

A write claims the key with the claim of ``repo.idempotency`` (:meth:`IdempotentWrite.run`); a
new subscription's create statement makes the same claim for each of its rows
(:meth:`IdempotentWrite.create`). Either way one method decides the key's answer. A first
request that committed while a second one ran (unseen by the claim's snapshot) makes the
second one's writes fail on its stored response: the second runs again and replays it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Annotated, Any

from asyncpg import UniqueViolationError  # type: ignore[import-untyped]
from fastapi import Depends, Header, Request
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
from billing_core.repo.subscriptions import Claimed
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


Work = Callable[[Connection, datetime], Awaitable[Outcome]]
# The response to store for an outcome (a 2xx).
Record = Callable[[Outcome], idempotency_repo.NewRecord]
# (now, the record to store for an outcome) -> what the create statement found for the
# request, and the outcome it stored if it wrote the request's rows
Create = Callable[[datetime, Record], Awaitable[tuple[Claimed, Outcome]]]


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

    async def _fingerprint(self) -> bytes:
        return request_fingerprint(
            self._request.method, self._request.scope["path"], await self._request.body()
        )

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
        attempt = 1
        while True:
            try:
                return await self._run_once(work)
            except subscriptions_repo.VersionConflict:
                if expected_version is not None or attempt >= CONFLICT_ATTEMPTS:
                    raise
                log.info("write_retried_after_version_conflict", attempt=attempt + 1)
            except UniqueViolationError as exc:
                if not _stored_meanwhile(exc) or attempt >= CONFLICT_ATTEMPTS:
                    raise
                log.info("write_ran_again_after_a_first_request_committed", attempt=attempt + 1)
            attempt += 1

    async def _run_once(self, work: Work) -> Response:
        ctx = self._ctx
        fingerprint = await self._fingerprint() if self.key is not None else b""
        async with ctx.transaction() as conn:
            now = ctx.clock.now()
            if self.key is not None:
                replay = await self._claim(conn, fingerprint, now)
                if replay is not None:
                    return replay
            outcome = await work(conn, now)
            if self.key is not None and 200 <= outcome.status < 300:
                record = self._record_for(self.key, fingerprint, now)
                await idempotency_repo.save(conn, record(outcome))
        return _answer(outcome)

    async def _claim(self, conn: Connection, fingerprint: bytes, now: datetime) -> Response | None:
        """Claim the key in ``conn``'s transaction: the answer it already has, if any."""
        assert self.key is not None
        claim = await idempotency_repo.claim(conn, self.client.chain_id, self.key, now=now)
        return self._claimed(claim.locked, claim.stored, fingerprint)

    def _claimed(
        self, locked: bool, stored: StoredResponse | None, fingerprint: bytes
    ) -> Response | None:
        """The answer of a key claimed: 409 while another request holds it, the stored
        response replayed (422 for another request), None when the request is to run."""
        if not locked:
            raise _in_flight()
        return None if stored is None else self._replay(stored, fingerprint)

    async def create(self, write: Create) -> Response:
        """A keyed create written by the create statement (``subscription_groups``), which
        claims the key as :meth:`run` does — lock, look-up, an expired response replaced — and
        writes the request's rows with its stored response only if the key is free. A first
        request that committed while this one was written fails the statement (nothing
        written): the request runs again and finds it. A refused request (a domain error) is
        answered by the key first, so that a stored response is never hidden by it."""
        self.require_key()
        key = self.key
        assert key is not None
        fingerprint = await self._fingerprint()
        attempt = 1
        while True:
            now = self._ctx.clock.now()
            try:
                claimed, outcome = await write(now, self._record_for(key, fingerprint, now))
            except DomainError as refused:
                return await self._refused(refused, fingerprint)
            except UniqueViolationError as exc:
                if not _stored_meanwhile(exc) or attempt >= CONFLICT_ATTEMPTS:
                    raise
                attempt += 1
                log.info("create_ran_again_after_a_first_request_committed", attempt=attempt)
                continue
            replay = self._claimed(claimed.locked, claimed.stored, fingerprint)
            if replay is not None:
                return replay
            if not claimed.created:
                raise RuntimeError("the create statement neither wrote nor found the request")
            return _answer(outcome)

    async def _refused(self, refused: DomainError, fingerprint: bytes) -> Response:
        ctx = self._ctx
        async with ctx.transaction() as conn:
            replay = await self._claim(conn, fingerprint, ctx.clock.now())
        if replay is None:
            raise refused
        return replay

    def _record_for(self, key: str, fingerprint: bytes, now: datetime) -> Record:
        client_id = self.client.chain_id
        method, path = self._request.method, self._request.scope["path"]
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
                headers=_stored_headers(_headers(outcome)),
                body=outcome.body,
                now=now,
                expires_at=expires_at,
            )

        return record

    def _replay(self, stored: StoredResponse, fingerprint: bytes) -> Response:
        path = self._request.scope["path"]
        if (stored.request_method, stored.request_path, stored.request_hash) != (
            self._request.method,
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


def _stored_meanwhile(exc: Exception) -> bool:
    """Did a first request with the key commit its stored response while this one ran (the
    claim's snapshot predates the key's lock)?"""
    return isinstance(exc, UniqueViolationError) and exc.constraint_name == STORED_KEY_CONSTRAINT


def _headers(outcome: Outcome) -> dict[str, str]:
    return {"content-type": JSON, **outcome.headers}


def _answer(outcome: Outcome) -> Response:
    return Response(outcome.body, status_code=outcome.status, headers=_headers(outcome))


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
        async with ctx.transaction() as conn:
            n = await idempotency_repo.purge_expired(
                conn, now=ctx.clock.now(), batch_size=batch_size
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
    async with ctx.pg.acquire() as conn:
        transaction = conn.transaction()
        await transaction.start()
        try:
            result = await work(conn, ctx.clock.now())
        finally:
            await transaction.rollback()
    return Response(
        result.body,
        status_code=result.status,
        media_type=JSON,
        headers={k: v for k, v in result.headers.items() if k.lower() != "etag"},
    )
