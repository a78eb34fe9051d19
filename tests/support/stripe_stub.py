"""A stand-in for api.stripe.com on loopback that answers with Stripe's documented bodies.

stripe-mock never declines, never rate-limits and never fails; this server answers whatever a
test scripts (status, JSON body, extra headers, or a delay longer than the client waits), so the
adapter's mapping of each documented answer is tested over real HTTP, through the SDK.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from urllib.parse import parse_qsl

from tests.support.http_receiver import read_request

_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 402: "Request Failed"}


@dataclass(frozen=True)
class Answer:
    status: int
    body: Mapping[str, object]
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_seconds: float = 0.0


@dataclass(frozen=True)
class SeenRequest:
    method: str
    path: str
    headers: Mapping[str, str]  # lower-case names
    form: dict[str, str]  # the form-encoded body, keys as sent (metadata[invoice_id], ...)


class StripeStub:
    def __init__(self) -> None:
        self.answers: list[Answer] = []
        self.requests: list[SeenRequest] = []
        self.url = ""

    def answer(self, status: int, body: Mapping[str, object], **kwargs: object) -> None:
        """Queue the next answer (the last one is repeated once the queue is down to it)."""
        self.answers.append(Answer(status, body, **kwargs))  # type: ignore[arg-type]

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                raw = await read_request(reader)
                self.requests.append(_parse(raw))
                answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
                if answer.delay_seconds:
                    await asyncio.sleep(answer.delay_seconds)
                body = json.dumps(answer.body).encode()
                head = [
                    f"HTTP/1.1 {answer.status} {_REASONS.get(answer.status, 'Status')}",
                    "Content-Type: application/json",
                    f"Content-Length: {len(body)}",
                    "Request-Id: req_stub",
                    *(f"{k}: {v}" for k, v in answer.headers.items()),
                ]
                writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()


def _parse(raw: bytes) -> SeenRequest:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = {
        name.strip().lower(): value.strip()
        for name, _, value in (line.partition(":") for line in lines[1:])
    }
    path, _, query = target.partition("?")
    form = dict(parse_qsl(body.decode() or query, keep_blank_values=True))
    return SeenRequest(method, path, headers, form)


@asynccontextmanager
async def stripe_stub() -> AsyncIterator[StripeStub]:
    stub = StripeStub()
    server = await asyncio.start_server(stub.handle, "127.0.0.1", 0)
    stub.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield stub
    finally:
        server.close()
        await server.wait_closed()
