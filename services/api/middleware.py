"""The ASGI layer around every request: request id, body limit, metrics, last-resort errors.

* ``X-Request-ID``: taken from the request when sane, generated otherwise, echoed on the response
  and bound to every log line of the request.
* Bodies over ``max_body_bytes`` are refused with 413, by Content-Length before reading and by
  counting while reading (chunked uploads).
* Prometheus: requests by method, route template and status; latency histogram likewise.
* Any exception no handler took is logged with the request id and answered with a generic
  500 problem: no stack trace ever reaches a client. One whose cause is that the database (or
  another server) cannot be reached — a refused or dropped connection, a server starting up or
  shutting down — is a 503 problem with ``Retry-After``: the request can be retried as it is
  (writes with their ``Idempotency-Key``).
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import structlog
from prometheus_client import Counter, Histogram
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from billing_core.logging import get_logger
from services.api.problems import (
    INTERNAL,
    PAYLOAD_TOO_LARGE,
    PROBLEM_JSON,
    REQUEST_ID_SCOPE_KEY,
    UNAVAILABLE,
    problem_body,
)

log = get_logger(__name__)

RETRY_AFTER_UNAVAILABLE_SECONDS = 1
# Causes that say a server could not be reached or went away, not that the request was wrong.
_UNREACHABLE = (
    OSError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.exceptions.AdminShutdownError,
)


def _unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` or anything in its cause chain is a connection that failed."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, _UNREACHABLE):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


REQUESTS = Counter(
    "billing_api_requests_total", "HTTP requests answered.", ["method", "route", "status"]
)
LATENCY = Histogram(
    "billing_api_request_duration_seconds",
    "HTTP request latency.",
    ["method", "route", "status"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)

# Where the rate-limit headers of an answer wait to be sent with it (services.api.auth).
RATE_HEADERS_SCOPE_KEY = "billing.rate_limit_headers"
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"The request body exceeds {limit} bytes.")


def _id_and_length(scope: Scope) -> tuple[bytes | None, bytes | None, bytes | None]:
    """The request's X-Request-ID, Content-Length and traceparent headers (the last of each,
    if repeated)."""
    request_id = length = traceparent = None
    for name, value in scope.get("headers") or ():
        if name == b"x-request-id":
            request_id = value
        elif name == b"content-length":
            length = value
        elif name == b"traceparent":
            traceparent = value
    return request_id, length, traceparent


# W3C Trace Context: version-traceid-parentid-flags; an all-zero trace id is invalid.
_TRACEPARENT = re.compile(rb"^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$")


def trace_id(traceparent: bytes | None) -> str | None:
    """The trace id of a W3C ``traceparent`` header, or None when absent or malformed."""
    if traceparent is None:
        return None
    found = _TRACEPARENT.match(traceparent.strip())
    if found is None or found.group(1) == b"0" * 32:
        return None
    return found.group(1).decode("ascii")


_SERIES: dict[tuple[str, str, int], tuple[Any, Any]] = {}


def _series(method: str, route: str, status: int) -> tuple[Any, Any]:
    """The request counter and latency histogram of (method, route, status), looked up once
    per series rather than through ``labels()`` (a lock and a label check) on every request."""
    key = (method, route, status)
    series = _SERIES.get(key)
    if series is None:
        series = (
            REQUESTS.labels(method, route, str(status)),
            LATENCY.labels(method, route, str(status)),
        )
        if len(_SERIES) < 10_000:
            _SERIES[key] = series
    return series


def _route_label(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "unmatched"


class RequestContextMiddleware:
    def __init__(self, app: ASGIApp, *, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        supplied_raw, declared, traceparent = _id_and_length(scope)
        supplied = supplied_raw.decode("latin-1") if supplied_raw is not None else ""
        request_id = supplied if _REQUEST_ID.match(supplied) else uuid.uuid4().hex
        scope[REQUEST_ID_SCOPE_KEY] = request_id
        method = scope.get("method", "?")
        state: dict[str, Any] = {"status": 500, "started": False}
        started_at = time.perf_counter()
        limit = self.max_body_bytes

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["status"] = message["status"]
                state["started"] = True
                message["headers"] = [
                    *message.get("headers", []),
                    (b"x-request-id", request_id.encode()),
                    *(
                        (name.lower().encode(), value.encode())
                        for name, value in scope.get(RATE_HEADERS_SCOPE_KEY, {}).items()
                    ),
                ]
            await send(message)

        received = 0

        async def receive_wrapper() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        trace = trace_id(traceparent)
        tokens = (
            structlog.contextvars.bind_contextvars(request_id=request_id)
            if trace is None
            else structlog.contextvars.bind_contextvars(request_id=request_id, trace_id=trace)
        )
        try:
            try:
                if declared is not None and declared.isdigit() and int(declared) > limit:
                    await self._send_problem(send_wrapper, scope, request_id, 413, limit)
                else:
                    await self.app(scope, receive_wrapper, send_wrapper)
            except Exception as exc:
                status = 503 if _unreachable(exc) else 500
                log.exception(
                    "unhandled_error" if status == 500 else "server_unreachable",
                    method=method,
                    path=scope.get("path"),
                )
                if not state["started"]:
                    await self._send_problem(send_wrapper, scope, request_id, status, limit)
            finally:
                count, latency = _series(method, _route_label(scope), state["status"])
                count.inc()
                latency.observe(time.perf_counter() - started_at)
        finally:
            structlog.contextvars.reset_contextvars(**tokens)

    @staticmethod
    async def _send_problem(
        send: Send, scope: Scope, request_id: str, status: int, limit: int
    ) -> None:
        if status == 413:
            body = problem_body(
                PAYLOAD_TOO_LARGE,
                f"The request body exceeds {limit} bytes.",
                instance=scope.get("path"),
                request_id=request_id,
            )
        elif status == 503:
            body = problem_body(
                UNAVAILABLE,
                "A server this request needs cannot be reached right now; retry it shortly "
                "(a write with the same Idempotency-Key).",
                instance=scope.get("path"),
                request_id=request_id,
            )
        else:
            body = problem_body(
                INTERNAL,
                "An unexpected error occurred; it has been logged with this requestId.",
                instance=scope.get("path"),
                request_id=request_id,
            )
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", PROBLEM_JSON.encode()),
                    (b"content-length", str(len(body)).encode()),
                    *([(b"connection", b"close")] if status == 413 else []),
                    *(
                        [(b"retry-after", str(RETRY_AFTER_UNAVAILABLE_SECONDS).encode())]
                        if status == 503
                        else []
                    ),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
