"""The gateway's HTTP/1.1 client against a scripted server on loopback: every way an answer can
be framed, every way it can go wrong, and how connections are reused and bounded."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest

from billing_core.http1 import Http1Pool, HttpTimeout, HttpTransportError, SendMissed
from tests.support.http_receiver import read_request
from tests.support.processes import free_port

Answer = Callable[[bytes], bytes | None]  # request bytes -> raw answer (None: say nothing)


class Server:
    def __init__(self, answer: Answer, *, close_after: bool = False) -> None:
        self.answer = answer
        self.close_after = close_after
        self.connections = 0
        self.requests: list[bytes] = []
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                request = await read_request(reader)
                self.requests.append(request)
                raw = self.answer(request)
                if raw is None:
                    await asyncio.sleep(10)
                    return
                writer.write(raw)
                await writer.drain()
                if self.close_after:
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()


@asynccontextmanager
async def serving(answer: Answer, *, close_after: bool = False) -> AsyncIterator[Server]:
    server = Server(answer, close_after=close_after)
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    server.port = listener.sockets[0].getsockname()[1]
    try:
        yield server
    finally:
        listener.close()


def pool(server: Server, **kw: float) -> Http1Pool:
    return Http1Pool(
        f"http://127.0.0.1:{server.port}",
        max_connections=int(kw.get("max_connections", 4)),
        connect_timeout=1.0,
        read_timeout=kw.get("read_timeout", 2.0),
    )


def ok(body: bytes = b'{"id":"ch_1"}') -> Answer:
    return lambda _: b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


async def test_a_sequence_of_calls_reuses_one_connection_and_sends_the_request_whole() -> None:
    async with serving(ok()) as server:
        client = pool(server)
        for i in range(3):
            response = await client.post_json(
                "/v1/charges", b'{"a":1}', {"Idempotency-Key": f"k{i}"}
            )
            assert (response.status, response.body) == (200, b'{"id":"ch_1"}')
        await client.aclose()
    assert server.connections == 1
    first = server.requests[0]
    assert first.startswith(b"POST /v1/charges HTTP/1.1\r\n")
    assert b"\r\nIdempotency-Key: k0\r\n" in first and first.endswith(b'\r\n\r\n{"a":1}')
    assert b"\r\nContent-Length: 7\r\n" in first


async def test_a_chunked_answer_with_an_interim_100_and_trailers_is_read_whole() -> None:
    raw = (
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 402 Payment Required\r\nTransfer-Encoding: chunked\r\nRetry-After: 3\r\n\r\n"
        b'5;ext=1\r\n{"a":\r\n3\r\n12}\r\n0\r\nX-Trailer: t\r\n\r\n'
    )
    async with serving(lambda _: raw) as server:
        client = pool(server)
        response = await client.post_json("/", b"{}", {})
        again = await client.post_json("/", b"{}", {})
        await client.aclose()
    assert (response.status, response.body) == (402, b'{"a":12}')
    assert response.headers["retry-after"] == "3"
    assert again.body == b'{"a":12}' and server.connections == 1


async def test_an_answer_framed_by_closing_the_connection_is_read_and_not_reused() -> None:
    async with serving(lambda _: b"HTTP/1.1 500 Oops\r\n\r\nboom", close_after=True) as server:
        client = pool(server)
        first = await client.post_json("/", b"{}", {})
        second = await client.post_json("/", b"{}", {})
        await client.aclose()
    assert (first.status, first.body) == (500, b"boom") and second.body == b"boom"
    assert server.connections == 2


async def test_connection_close_is_honoured_and_a_server_closed_idle_connection_is_replaced() -> (
    None
):
    answer = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}"
    async with serving(lambda _: answer) as server:
        client = pool(server)
        await client.post_json("/", b"{}", {})
        await asyncio.sleep(0.05)
        await client.post_json("/", b"{}", {})
        await client.aclose()
    assert server.connections == 2

    async with serving(ok(), close_after=True) as server:  # keep-alive said, then closed
        client = pool(server)
        await client.post_json("/", b"{}", {})
        await asyncio.sleep(0.05)  # the close reaches the idle connection
        response = await client.post_json("/", b"{}", {})
        await client.aclose()
    assert response.status == 200 and server.connections == 2


@pytest.mark.parametrize(
    "raw",
    [
        b"SMTP ready\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}{}",
        b"HTTP/1.1 200 OK\r\nContent-Length: 99999999\r\n\r\n",
    ],
)
async def test_a_malformed_answer_is_a_transport_error_and_the_connection_is_dropped(
    raw: bytes,
) -> None:
    async with serving(lambda _: raw) as server:
        client = pool(server)
        with pytest.raises(HttpTransportError):
            await client.post_json("/", b"{}", {})
        await client.aclose()


async def test_a_connection_cut_mid_answer_is_a_transport_error() -> None:
    raw = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}"
    async with serving(lambda _: raw, close_after=True) as server:
        client = pool(server)
        with pytest.raises(HttpTransportError):
            await client.post_json("/", b"{}", {})
        await client.aclose()


async def test_no_answer_in_time_is_a_read_timeout_and_the_next_call_gets_a_new_connection() -> (
    None
):
    calls = 0

    def first_silent(_: bytes) -> bytes | None:
        nonlocal calls
        calls += 1
        return None if calls == 1 else ok()(b"")

    async with serving(first_silent) as server:
        client = pool(server, read_timeout=0.2)
        with pytest.raises(HttpTimeout) as timeout:
            await client.post_json("/", b"{}", {})
        assert timeout.value.phase == "ReadTimeout"
        response = await client.post_json("/", b"{}", {})
        await client.aclose()
    assert response.status == 200 and server.connections == 2


async def test_at_most_max_connections_are_open_and_the_others_wait_their_turn() -> None:
    async def slow_answers(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal open_now, most
        open_now += 1
        most = max(most, open_now)
        try:
            while True:
                await read_request(reader)
                await asyncio.sleep(0.05)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        except asyncio.IncompleteReadError:
            pass
        finally:
            open_now -= 1
            writer.close()

    open_now = most = 0
    listener = await asyncio.start_server(slow_answers, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    client = Http1Pool(
        f"http://127.0.0.1:{port}", max_connections=3, connect_timeout=1, read_timeout=5
    )
    answers = await asyncio.gather(*(client.post_json("/", b"{}", {}) for _ in range(12)))
    await client.aclose()
    listener.close()
    assert [a.status for a in answers] == [200] * 12
    assert most == 3


async def test_a_refused_connection_is_a_transport_error_and_unsafe_headers_are_refused() -> None:
    client = Http1Pool(
        f"http://127.0.0.1:{free_port()}", max_connections=1, connect_timeout=1, read_timeout=1
    )
    with pytest.raises(HttpTransportError):
        await client.post_json("/", b"{}", {})
    with pytest.raises(ValueError):
        await client.post_json("/", b"{}", {"X": "a\r\nInjected: yes"})
    await client.aclose()


async def test_a_held_line_is_connected_before_the_request_and_replaced_if_dropped() -> None:
    async with serving(ok(), close_after=True) as server:
        client = pool(server)
        async with client.hold() as held:
            await asyncio.sleep(0.05)
            assert server.connections == 1 and server.requests == []  # connected, nothing sent
            first = await held.post_json("/", b"{}", {})
            await asyncio.sleep(0.05)  # the server closes it after answering
            second = await held.post_json("/", b"{}", {})
        await client.aclose()
    assert (first.status, second.status) == (200, 200)
    assert server.connections == 2


async def test_a_line_that_could_not_connect_says_so_when_used() -> None:
    client = Http1Pool(
        f"http://127.0.0.1:{free_port()}", max_connections=1, connect_timeout=1, read_timeout=1
    )
    async with client.hold() as held:
        with pytest.raises(HttpTransportError):
            await held.post_json("/", b"{}", {})
    async with client.hold() as held:  # the failed connection gave its place back
        with pytest.raises(HttpTransportError):
            await held.post_json("/", b"{}", {})
    await client.aclose()


async def test_a_request_past_its_send_deadline_is_not_sent_and_the_line_stays_usable() -> None:
    async with serving(ok()) as server:
        client = pool(server)
        async with client.hold() as held:
            with pytest.raises(SendMissed):
                await held.post_json("/", b"{}", {}, send_by=time.monotonic() - 0.001)
            response = await held.post_json("/", b"{}", {}, send_by=time.monotonic() + 1)
        await client.aclose()
    assert response.status == 200
    assert len(server.requests) == 1 and server.connections == 1


async def test_a_connection_idle_longer_than_max_idle_is_replaced_not_reused() -> None:
    async with serving(ok()) as server:
        client = Http1Pool(
            f"http://127.0.0.1:{server.port}",
            max_connections=2,
            connect_timeout=1,
            read_timeout=1,
            max_idle=0.05,
        )
        await client.post_json("/", b"{}", {})
        await client.post_json("/", b"{}", {})  # at once: the same connection
        await asyncio.sleep(0.1)
        await client.post_json("/", b"{}", {})  # idle too long: a new one
        await client.aclose()
    assert server.connections == 2 and len(server.requests) == 3
