"""A tiny HTTP endpoint for the workers: /healthz, /readyz and /metrics (Prometheus).

Workers have no web framework; this serves the three paths Kubernetes and Prometheus need, and
any fixed ``pages`` given (the API serves its docs this way on its internal port).
``/healthz``: the process loop is alive. ``/readyz``: the ``ready`` check passes (e.g. the
database answers).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from billing_core.logging import get_logger

log = get_logger(__name__)

Check = Callable[[], Awaitable[bool]]


async def _always() -> bool:
    return True


class HealthServer:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        alive: Callable[[], bool] = lambda: True,
        ready: Check = _always,
        pages: Mapping[str, tuple[str, bytes]] | None = None,
    ) -> None:
        self._pages = dict(pages or {})
        self._host = host
        self._port = port
        self._alive = alive
        self._ready = ready
        self._server: asyncio.base_events.Server | None = None

    @property
    def port(self) -> int:
        if self._server is None or not self._server.sockets:
            return self._port
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self._host, self._port)
        log.info("health_server_listening", host=self._host, port=self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = await asyncio.wait_for(reader.readline(), timeout=5)
            while (await asyncio.wait_for(reader.readline(), timeout=5)) not in (b"\r\n", b""):
                pass
            parts = request_line.decode("latin-1").split()
            path = parts[1].split("?")[0] if len(parts) >= 2 else ""
            status, ctype, body = await self._route(path)
            head = (
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode("latin-1") + body)
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _route(self, path: str) -> tuple[str, str, bytes]:
        text = "text/plain; charset=utf-8"
        if path == "/healthz":
            if self._alive():
                return "200 OK", text, b"ok\n"
            return "503 Service Unavailable", text, b"stopping\n"
        if path == "/readyz":
            try:
                ok = await asyncio.wait_for(self._ready(), timeout=3)
            except Exception:
                ok = False
            if ok:
                return "200 OK", text, b"ready\n"
            return "503 Service Unavailable", text, b"not ready\n"
        if path == "/metrics":
            return "200 OK", CONTENT_TYPE_LATEST, generate_latest(REGISTRY)
        page = self._pages.get(path)
        if page is not None:
            return "200 OK", page[0], page[1]
        return "404 Not Found", text, b"not found\n"
