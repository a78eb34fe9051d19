"""A loopback HTTP/1.1 proxy in front of a real server (stripe-mock) that keeps every request
and answer it passes on: what a process sent, and what the server said to it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx

from tests.support.http_receiver import read_request

_HOP = {"host", "content-length", "connection", "keep-alive", "transfer-encoding"}


@dataclass(frozen=True)
class Exchange:
    method: str
    path: str
    request_headers: dict[str, str]  # lower-case names
    request_body: bytes
    status: int
    response_headers: dict[str, str]  # lower-case names
    response_body: bytes


class RecordingProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.exchanges: list[Exchange] = []
        self.url = ""
        self._client = httpx.AsyncClient(timeout=10)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                raw = await read_request(reader)
                head, _, body = raw.partition(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {
                    name.strip().lower(): value.strip()
                    for name, _, value in (line.partition(":") for line in lines[1:])
                }
                answer = await self._client.request(
                    method,
                    self.upstream + target,
                    headers={k: v for k, v in headers.items() if k not in _HOP},
                    content=body,
                )
                self.exchanges.append(
                    Exchange(
                        method,
                        target.partition("?")[0],
                        headers,
                        body,
                        answer.status_code,
                        {k.lower(): v for k, v in answer.headers.items()},
                        answer.content,
                    )
                )
                out = [f"HTTP/1.1 {answer.status_code} {answer.reason_phrase}"]
                out += [
                    f"{k}: {v}"
                    for k, v in answer.headers.items()
                    if k.lower() not in _HOP | {"content-encoding"}
                ]
                out.append(f"Content-Length: {len(answer.content)}")
                writer.write(("\r\n".join(out) + "\r\n\r\n").encode() + answer.content)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()


@asynccontextmanager
async def recording_proxy(upstream: str) -> AsyncIterator[RecordingProxy]:
    proxy = RecordingProxy(upstream)
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", 0)
    proxy.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield proxy
    finally:
        server.close()
        await proxy._client.aclose()
