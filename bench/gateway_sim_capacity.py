"""How many calls per second the gateway simulator serves on one core, against its floor.

Floor: a bare Starlette endpoint under the same uvicorn (uvloop + httptools, no access log) that
reads the body and answers a fixed JSON document -- the least any HTTP charge endpoint in this
stack costs. Simulator: ``python -m services.gateway_sim`` with latency 0, no rate limit, no
webhooks, every call a NEW charge (unique key), then every call a replay of stored keys.

The load comes from this process: a plain HTTP/1.1 keep-alive client on N connections (cheaper
per request than the servers, so it does not cap the figures on a two-core machine). The report
gives calls/s and the ratio to the floor, plus the simulator's resident memory per stored charge.

    PYTHONPATH=libs:. python bench/gateway_sim_capacity.py [--seconds 5] [--connections 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.processes import free_port

ROOT = Path(__file__).resolve().parents[1]
CAPACITY_TARGET = 1_000  # calls/s: the collector bench drives the simulator at 1 000/s


def floor_server(port: int) -> None:
    import uvicorn  # noqa: PLC0415
    from starlette.applications import Starlette  # noqa: PLC0415
    from starlette.requests import Request  # noqa: PLC0415
    from starlette.responses import Response  # noqa: PLC0415
    from starlette.routing import Route  # noqa: PLC0415

    answer = json.dumps({"id": "ch_0", "status": "succeeded", "amount": 1990}).encode()

    async def charge(request: Request) -> Response:
        await request.body()
        return Response(answer, media_type="application/json")

    async def healthz(_: Request) -> Response:
        return Response(b"ok\n")

    app = Starlette(
        routes=[
            Route("/v1/charges", charge, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
        ]
    )
    uvicorn.run(  # the simulator's own uvicorn options (services/gateway_sim/main.py)
        app,
        host="127.0.0.1",
        port=port,
        access_log=False,
        log_level="warning",
        server_header=False,
        proxy_headers=False,
    )


def start(args: list[str], port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [sys.executable, *args], cwd=ROOT, env={**os.environ, **env}, stdout=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return process
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"{args} did not listen on {port}")


def ledger_bytes_per_charge(charges: int) -> float:
    """Bytes the ledger holds per stored charge and its call (tracemalloc, in this process)."""
    import tracemalloc  # noqa: PLC0415

    from services.gateway_sim.ledger import ChargeInput, Ledger  # noqa: PLC0415

    ledger = Ledger()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for n in range(charges):
        ledger.record_call(ledger.clock.now_ns())
        ledger.store(
            ChargeInput(f"inv-{1_000_000 + n}-try-0", 10_000 + n, 1990, "EUR", 1_000_000 + n, 0, n),
            decline_code=None if n % 5 else "card_declined",
            late=False,
            created=1_800_000_000,
        )
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return used / charges


def request_bytes(key: str, invoice: int) -> bytes:
    body = json.dumps(
        {
            "customerId": invoice % 10_000,
            "amount": 1990,
            "currency": "EUR",
            "metadata": {"invoiceId": invoice, "attempt": 0},
        }
    ).encode()
    return (
        f"POST /v1/charges HTTP/1.1\r\nHost: gateway\r\nIdempotency-Key: {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def load(
    port: int, connections: int, seconds: float, make: Callable[[int], bytes]
) -> tuple[float, dict[int, int]]:
    """Closed-loop load for ``seconds``; returns (calls/s, count by status)."""
    counter = iter(range(10**12))
    statuses: dict[int, int] = {}
    stop_at = time.monotonic() + seconds

    async def one_connection() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while time.monotonic() < stop_at:
                writer.write(make(next(counter)))
                head = await reader.readuntil(b"\r\n\r\n")
                status = int(head[9:12])
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                await reader.readexactly(length)
                statuses[status] = statuses.get(status, 0) + 1
        finally:
            writer.close()

    started = time.monotonic()
    await asyncio.gather(*(one_connection() for _ in range(connections)))
    return sum(statuses.values()) / (time.monotonic() - started), statuses


async def measure(args: argparse.Namespace) -> str:
    rows: list[tuple[str, float, dict[int, int]]] = []
    floor_port = free_port()
    floor = start([__file__, "--floor-server", str(floor_port)], floor_port, {})
    try:
        await load(floor_port, args.connections, 1.0, lambda n: request_bytes(f"w-{n}", n))
        rate, statuses = await load(
            floor_port, args.connections, args.seconds, lambda n: request_bytes(f"k-{n}", n)
        )
        rows.append(("bare Starlette endpoint (floor)", rate, statuses))
    finally:
        floor.terminate()
        floor.wait()

    sim_port = free_port()
    sim = start(
        ["-m", "services.gateway_sim"],
        sim_port,
        {
            "BILLING_GATEWAY_SIM_PORT": str(sim_port),
            "BILLING_GATEWAY_SIM_LATENCY_MIN_MS": "0",
            "BILLING_GATEWAY_SIM_LATENCY_MAX_MS": "0",
            "BILLING_GATEWAY_SIM_RATE_LIMIT_PER_SECOND": "0",
            "BILLING_GATEWAY_SIM_WEBHOOK_URL": "",
            "BILLING_LOG_LEVEL": "WARNING",
        },
    )
    try:
        await load(sim_port, args.connections, 1.0, lambda n: request_bytes(f"w-{n}", n))
        rate, statuses = await load(
            sim_port,
            args.connections,
            args.seconds,
            lambda n: request_bytes(f"inv-{n}-try-0", n),
        )
        new_charges = statuses.get(200, 0)
        rows.append(("simulator, new charges (latency 0)", rate, statuses))
        stored = max(1, new_charges)
        rate, statuses = await load(
            sim_port,
            args.connections,
            args.seconds,
            lambda n: request_bytes(f"inv-{n % stored}-try-0", n % stored),
        )
        rows.append(("simulator, replays of stored keys", rate, statuses))
    finally:
        sim.terminate()
        sim.wait()

    floor_rate = rows[0][1]
    lines = [
        f"{args.seconds:g} s per run, {args.connections} keep-alive connections, "
        f"client and server on one machine ({os.cpu_count()} cores)",
        "",
        "| server | calls/s | ratio to floor | answers |",
        "|---|---:|---:|---|",
    ]
    for name, rate, statuses in rows:
        answers = ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items()))
        lines.append(f"| {name} | {rate:,.0f} | {rate / floor_rate:.2f} | {answers} |")
    slowest = min(rate for _, rate, _ in rows[1:])
    verdict = "PASS" if slowest >= CAPACITY_TARGET else "FAIL"
    lines += [
        "",
        f"  {verdict}  slowest simulator path {slowest:,.0f} calls/s "
        f"(>= {CAPACITY_TARGET:,}/s, five times the gateway's limit)",
    ]
    per_charge = ledger_bytes_per_charge(args.ledger_charges)
    lines += [
        "",
        f"Ledger memory: {per_charge:.0f} bytes per stored charge and its call "
        f"(tracemalloc over {args.ledger_charges:,} charges), i.e. about "
        f"{per_charge * 3_000_000 / 2**20:,.0f} MiB for 3 million.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--ledger-charges", type=int, default=200_000)
    parser.add_argument("--floor-server", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor_server:
        floor_server(args.floor_server)
        return
    try:
        import uvloop  # noqa: PLC0415

        uvloop.install()
    except ImportError:
        pass
    print(asyncio.run(measure(args)))


if __name__ == "__main__":
    main()
