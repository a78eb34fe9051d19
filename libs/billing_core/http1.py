"""A small HTTP/1.1 client for the one hot call the collector makes: a JSON POST to the gateway.

Why not httpx here: measured against the gateway simulator, an httpx POST costs about 1 ms of
CPU in the caller (its client, httpcore's pool, anyio and h11 layers), fifteen times what the
same request costs written as bytes on an asyncio protocol — and the collector makes one per
charge. This client keeps only what that call needs: keep-alive connections up to a bound,
one write per request, a response parsed straight from the socket buffer (Content-Length,
chunked, or until close), a connect and a read timeout, TLS for ``https`` URLs.

Errors are :class:`HttpTimeout` (no answer in time: the request may have arrived) and
:class:`HttpTransportError` (refused, reset, malformed): a caller must treat both as "the
result is unknown". A connection is reused only after a complete, keep-alive response; any
doubt closes it.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 1024 * 1024


class HttpError(Exception):
    """The request got no usable answer."""


class HttpTimeout(HttpError):
    def __init__(self, phase: str) -> None:
        super().__init__(phase)
        self.phase = phase  # "ConnectTimeout" or "ReadTimeout"


class HttpTransportError(HttpError):
    pass


class SendMissed(Exception):
    """Nothing was sent: the request's send deadline had passed when it could go out."""


@dataclass(frozen=True)
class Response:
    status: int
    headers: Mapping[str, str]  # names lower-cased; a repeated header keeps its last value
    body: bytes


class _Connection(asyncio.Protocol):
    """One keep-alive connection; at most one request outstanding on it."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._buffer = bytearray()
        self._answer: asyncio.Future[Response] | None = None
        self._head: tuple[int, dict[str, str]] | None = None
        self._keep_alive = True
        self._body_mode = ""  # "length", "chunked" or "close"
        self._length = 0
        self._chunks = bytearray()
        self.idle_since = 0.0
        self.lost = False  # the transport is gone (not only asked to close)
        self.on_lost: Callable[[], None] | None = None

    # asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        if self._answer is None or self._answer.done():
            self._fail(HttpTransportError("data received with no request outstanding"))
            return
        self._buffer += data
        try:
            self._parse()
        except HttpTransportError as exc:
            self._fail(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.lost = True
        if self.on_lost is not None:
            self.on_lost()
        answer = self._answer
        if answer is None or answer.done():
            return
        if self._head is not None and self._body_mode == "close":
            self._keep_alive = False
            self._finish(bytes(self._buffer))
            return
        answer.set_exception(HttpTransportError(f"connection closed before the answer: {exc!r}"))

    # the caller's side
    @property
    def reusable(self) -> bool:
        return not self.closed and self._keep_alive and self._answer is None

    def send(self, request: bytes, send_by: float | None) -> asyncio.Future[Response]:
        assert self.transport is not None and self._answer is None
        if send_by is not None and time.monotonic() > send_by:
            raise SendMissed
        self._answer = asyncio.get_running_loop().create_future()
        self._head = None
        self.transport.write(request)
        return self._answer

    def done_with_answer(self) -> None:
        self._answer = None

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    # parsing
    def _parse(self) -> None:
        while self._head is None:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buffer) > MAX_HEAD_BYTES:
                    raise HttpTransportError("response head too large")
                return
            status, headers = _parse_head(bytes(self._buffer[:end]))
            del self._buffer[: end + 4]
            if 100 <= status < 200:
                continue  # an interim answer: the real one follows
            self._head = (status, headers)
            self._keep_alive = headers.get("connection", "").lower() != "close"
            self._start_body(status, headers)
        if self._body_mode == "length":
            if len(self._buffer) >= self._length:
                body = bytes(self._buffer[: self._length])
                del self._buffer[: self._length]
                if self._buffer:
                    raise HttpTransportError("bytes after the response body")
                self._finish(body)
        elif self._body_mode == "chunked":
            self._parse_chunks()
        elif len(self._buffer) > MAX_BODY_BYTES:
            raise HttpTransportError("response body too large")

    def _start_body(self, status: int, headers: Mapping[str, str]) -> None:
        if status in (204, 304):
            self._body_mode, self._length = "length", 0
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._body_mode = "chunked"
            self._chunks = bytearray()
        elif "content-length" in headers:
            try:
                self._length = int(headers["content-length"])
            except ValueError:
                raise HttpTransportError("bad content-length") from None
            if not 0 <= self._length <= MAX_BODY_BYTES:
                raise HttpTransportError("response body too large")
            self._body_mode = "length"
        else:
            self._body_mode = "close"
            self._keep_alive = False

    def _parse_chunks(self) -> None:
        while True:
            line_end = self._buffer.find(b"\r\n")
            if line_end < 0:
                return
            size_text = bytes(self._buffer[:line_end]).split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise HttpTransportError("bad chunk size") from None
            if size < 0:
                raise HttpTransportError("bad chunk size")
            if size == 0:  # the last chunk, then trailers (ignored) up to an empty line
                end = self._buffer.find(b"\r\n\r\n", line_end)
                if end < 0:
                    return
                del self._buffer[: end + 4]
                if self._buffer:
                    raise HttpTransportError("bytes after the response body")
                self._finish(bytes(self._chunks))
                return
            if len(self._chunks) + size > MAX_BODY_BYTES:
                raise HttpTransportError("response body too large")
            start = line_end + 2
            if len(self._buffer) < start + size + 2:
                return
            if self._buffer[start + size : start + size + 2] != b"\r\n":
                raise HttpTransportError("chunk not followed by CRLF")
            self._chunks += self._buffer[start : start + size]
            del self._buffer[: start + size + 2]

    def _finish(self, body: bytes) -> None:
        assert self._head is not None and self._answer is not None
        status, headers = self._head
        if not self._answer.done():
            self._answer.set_result(Response(status, headers, body))

    def _fail(self, exc: HttpError) -> None:
        if self._answer is not None and not self._answer.done():
            self._answer.set_exception(exc)
        self._keep_alive = False
        self.close()


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise HttpTransportError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon:
            raise HttpTransportError("malformed header line")
        headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers


class HeldConnection:
    """A connection held by one caller; requests on it go one after the other. Opening it may
    have failed (or the server may close it while it is held): the next request opens another,
    and raises if that fails too."""

    def __init__(self, pool: Http1Pool, conn: _Connection | None) -> None:
        self._pool = pool
        self.conn = conn
        self.reusable = True

    async def post_json(
        self,
        path: str,
        body: bytes,
        headers: Mapping[str, str],
        *,
        send_by: float | None = None,
    ) -> Response:
        """``send_by``: a ``time.monotonic()`` after which the request must not be sent at all
        (it raises :class:`SendMissed`; the connection stays usable)."""
        request = self._pool.request_bytes(path, body, headers)
        if self.conn is not None and not self.conn.reusable:
            self._pool.discard(self.conn)
            self.conn = None
        if self.conn is None:
            self.conn = await self._pool.checkout()
        answer = self.conn.send(request, send_by)
        self.reusable = False  # until the answer is complete: a failure drops the connection
        response = await self._pool.answer(self.conn, answer)
        self.reusable = True
        return response


class Http1Pool:
    """Keep-alive connections to one origin, at most ``max_connections`` open at once."""

    def __init__(
        self,
        base_url: str,
        *,
        max_connections: int,
        connect_timeout: float,
        read_timeout: float,
        max_idle: float = 2.0,
    ) -> None:
        """``max_idle``: a connection unused for longer is closed rather than reused. Servers
        close idle keep-alive connections after a few seconds (uvicorn 5 s); a request written
        as the server's close crosses it is lost, so its result is unknown. Reconnecting
        costs less than that."""
        url = urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self._host = url.hostname
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._ssl = ssl.create_default_context() if url.scheme == "https" else None
        self._host_header = url.netloc.rsplit("@", 1)[-1]
        self._prefix = url.path.rstrip("/")
        self._max = max(1, max_connections)
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._max_idle = max_idle
        self._idle: list[_Connection] = []
        self._open = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._closed = False

    @asynccontextmanager
    async def hold(self) -> AsyncIterator[HeldConnection]:
        """A connection held for the caller: opened (or taken idle) now, so that a request sent
        on it later goes out at once, without a connect in between."""
        try:
            conn: _Connection | None = await self.checkout()
        except HttpError:
            conn = None  # the request will try again, and say why it cannot be sent
        held = HeldConnection(self, conn)
        try:
            yield held
        finally:
            self._give_back(held)

    async def post_json(self, path: str, body: bytes, headers: Mapping[str, str]) -> Response:
        held = HeldConnection(self, None)
        try:
            return await held.post_json(path, body, headers)
        finally:
            self._give_back(held)

    async def answer(self, conn: _Connection, answer: asyncio.Future[Response]) -> Response:
        try:
            async with asyncio.timeout(self._read_timeout):
                response = await answer
        except TimeoutError:
            raise HttpTimeout("ReadTimeout") from None
        conn.done_with_answer()
        return response

    async def aclose(self) -> None:
        self._closed = True
        for conn in self._idle:
            conn.close()
        self._idle.clear()
        for waiter in self._waiters:
            if not waiter.done():
                waiter.cancel()

    def request_bytes(self, path: str, body: bytes, headers: Mapping[str, str]) -> bytes:
        lines = [
            f"POST {self._prefix}{path} HTTP/1.1",
            f"Host: {self._host_header}",
            "Content-Type: application/json",
            "Accept: application/json",
            f"Content-Length: {len(body)}",
        ]
        for name, value in headers.items():
            if any(c in name or c in value for c in "\r\n") or not name.strip():
                raise ValueError(f"unsafe header {name!r}")
            lines.append(f"{name}: {value}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body

    async def checkout(self) -> _Connection:
        while True:
            if self._closed:
                raise HttpTransportError("client closed")
            now = time.monotonic()
            while self._idle:
                conn = self._idle.pop()
                if conn.reusable and now - conn.idle_since <= self._max_idle:
                    return conn
                self.discard(conn)  # closed by the server while idle, or idle too long
            if self._open < self._max:
                self._open += 1
                try:
                    return await self.connect()
                except BaseException:
                    self._open -= 1
                    self._wake_one()
                    raise
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()  # pass the turn it was given on
                raise

    async def connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_timeout):
                _, conn = await loop.create_connection(
                    _Connection,
                    self._host,
                    self._port,
                    ssl=self._ssl,
                    server_hostname=self._host if self._ssl else None,
                )
        except TimeoutError:
            raise HttpTimeout("ConnectTimeout") from None
        except OSError as exc:
            raise HttpTransportError(f"connect failed: {exc!r}") from exc
        return conn

    def _give_back(self, held: HeldConnection) -> None:
        if held.conn is not None:
            self._checkin(held.conn, reuse=held.reusable)

    def _checkin(self, conn: _Connection, *, reuse: bool) -> None:
        if reuse and conn.reusable and not self._closed:
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
            self._wake_one()
        else:
            self.discard(conn)

    def discard(self, conn: _Connection) -> None:
        """Close ``conn``; its place is free once it is really closed (a receiver that counts
        connections never sees more than the bound)."""
        if conn.lost:
            self._connection_gone()
        else:
            conn.on_lost = self._connection_gone
            conn.close()

    def _connection_gone(self) -> None:
        self._open -= 1
        self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
