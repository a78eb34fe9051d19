"""API throughput and latency next to the same server's /healthz floor.

Starts the API under uvicorn (``python -m services.api``, one worker) on a fresh, migrated
database, then drives it from a separate load-generator process (a small asyncio HTTP/1.1
keep-alive client, lighter than a full client library so the server stays the bottleneck):

1. closed loop at a fixed concurrency: GET /healthz, POST /subscriptions (a new
   Idempotency-Key each), GET /subscriptions/{id}: throughput, p50, p99;
2. right after each closed-loop run of a write/read, an open loop at half the throughput that
   run measured: p99 latency.

Each figure is the median of ``--runs`` runs. Ratios are printed against /healthz, with the
server's CPU time per request (from /proc, over each closed-loop run). Targets: POST
>= 0.2x the /healthz throughput and <= 1.5 ms CPU per request, GET >= 0.4x and <= 0.5 ms CPU,
p99 < 50 ms in the open loop at half the measured rate; each row prints PASS or FAIL.

    make bench-api            # or: python -m bench.api_bench --runs 3 --seconds 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import asyncpg  # type: ignore[import-untyped]

from bench.procfs import cpu_seconds
from tests.support.processes import free_port

ROOT = Path(__file__).resolve().parents[1]

# (ratio to /healthz, CPU ms per request) a path must reach; p99 bound at half rate.
TARGETS = {"post": (0.20, 1.5), "get": (0.40, 0.5)}
HALF_RATE_P99_MS = 50.0


@dataclass(frozen=True)
class Result:
    requests: int
    errors: int
    seconds: float
    latencies_ms: list[float]
    error_statuses: dict[int, int] = field(default_factory=dict)

    @property
    def rps(self) -> float:
        return self.requests / self.seconds

    def pct(self, q: float) -> float:
        xs = sorted(self.latencies_ms)
        return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


# --- the load generator (runs in its own process) -------------------------------------------


class Conn:
    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, raw: bytes) -> int:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(raw)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if length:
            await self.reader.readexactly(length)
        return status


def build(method: str, path: str, host: str, token: str, body: bytes = b"", **extra: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", f"Authorization: Bearer {token}"]
    lines += [f"{k}: {v}" for k, v in extra.items()]
    if body:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


# The customers the POSTs subscribe (created before the runs; a subscription names a customer).
CUSTOMERS = 100_000


def make_request(scenario: str, host: str, token: str, ids: list[int], rng: random.Random) -> bytes:
    if scenario == "healthz":
        return build("GET", "/healthz", host, token)
    if scenario == "get":
        return build("GET", f"/subscriptions/{rng.choice(ids)}", host, token)
    body = json.dumps({"customerId": rng.randint(1, CUSTOMERS), "planCode": "PRO_MONTHLY"}).encode()
    return build(
        "POST", "/subscriptions", host, token, body, **{"Idempotency-Key": str(uuid.uuid4())}
    )


async def closed_loop(
    *,
    host: str,
    port: int,
    token: str,
    scenario: str,
    concurrency: int,
    seconds: float,
    ids: list[int],
) -> Result:
    rng = random.Random(7)
    return await closed_loop_over(
        host, port, lambda: make_request(scenario, host, token, ids, rng), concurrency, seconds
    )


async def closed_loop_over(
    host: str,
    port: int,
    next_request: Callable[[], bytes | None],
    concurrency: int,
    seconds: float,
) -> Result:
    """``concurrency`` keep-alive connections, each sending the next request as soon as the last
    is answered, for ``seconds`` or until ``next_request`` returns None."""
    latencies: list[float] = []
    errors = 0
    statuses: dict[int, int] = {}
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal errors
        conn = Conn(host, port)
        while time.perf_counter() < deadline:
            raw = next_request()
            if raw is None:
                return
            t0 = time.perf_counter()
            status = await conn.request(raw)
            latencies.append((time.perf_counter() - t0) * 1000)
            if status >= 400:
                errors += 1
                statuses[status] = statuses.get(status, 0) + 1

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return Result(len(latencies), errors, time.perf_counter() - start, latencies, statuses)


async def open_loop(
    *,
    host: str,
    port: int,
    token: str,
    scenario: str,
    rate: float,
    seconds: float,
    ids: list[int],
    max_connections: int = 64,
) -> Result:
    """Requests sent on a fixed schedule (``rate`` per second), whatever the answers' pace."""
    rng = random.Random(11)
    return await open_loop_over(
        host,
        port,
        lambda: make_request(scenario, host, token, ids, rng),
        int(rate * seconds),
        rate,
        max_connections,
    )


async def open_loop_over(
    host: str,
    port: int,
    next_request: Callable[[], bytes],
    n: int,
    rate: float,
    max_connections: int = 64,
) -> Result:
    """``n`` requests sent on a fixed schedule (``rate`` per second) over at most
    ``max_connections`` keep-alive connections; latency includes the wait for a connection."""
    latencies: list[float] = []
    errors = 0
    statuses: dict[int, int] = {}
    idle: asyncio.Queue[Conn] = asyncio.Queue()
    for _ in range(max_connections):
        idle.put_nowait(Conn(host, port))

    async def one(raw: bytes, scheduled: float) -> None:
        nonlocal errors
        conn = await idle.get()
        try:
            status = await conn.request(raw)
        finally:
            idle.put_nowait(conn)
        latencies.append((time.perf_counter() - scheduled) * 1000)  # includes queueing
        if status >= 400:
            errors += 1
            statuses[status] = statuses.get(status, 0) + 1

    start = time.perf_counter()
    tasks = []
    for i in range(n):
        scheduled = start + i / rate
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(next_request(), scheduled)))
    await asyncio.gather(*tasks)
    return Result(n, errors, time.perf_counter() - start, latencies, statuses)


def _load_main(args: dict[str, Any], out: Any) -> None:
    kind = args.pop("kind")
    result = asyncio.run(closed_loop(**args) if kind == "closed" else open_loop(**args))
    out.send(result)


def in_load_process(target: Callable[[dict[str, Any], Any], None], args: dict[str, Any]) -> Result:
    """Run a load generator ``target(args, pipe)`` in a process of its own; return its Result."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=target, args=(args, child))
    proc.start()
    result: Result = parent.recv()
    proc.join()
    return result


def run_load(kind: str, **kwargs: Any) -> Result:
    return in_load_process(_load_main, {"kind": kind, **kwargs})


def bench_arguments(description: str, database: str) -> argparse.ArgumentParser:
    """The options every HTTP benchmark of one API process shares."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=16)
    default_server = os.environ.get(
        "BILLING_DATABASE_URL", "postgresql+asyncpg://billing@127.0.0.1:55432/billing"
    ).rpartition("/")[0]
    parser.add_argument("--database-url", default=f"{default_server}/{database}")
    return parser


# --- orchestration ---------------------------------------------------------------------------


async def fresh_database(url: str) -> None:
    base, _, name = url.rpartition("/")
    admin = await asyncpg.connect(base.replace("postgresql+asyncpg", "postgresql") + "/postgres")
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()


async def subscription_ids(url: str) -> list[int]:
    """The ids the warm-up created (ids come in blocks per process: not 1..n)."""
    conn = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))
    try:
        return [int(r[0]) for r in await conn.fetch("SELECT id FROM subscription ORDER BY id")]
    finally:
        await conn.close()


def migrated_database(url: str) -> None:
    """A new, empty database at ``url`` with every migration applied, and :data:`CUSTOMERS`
    customers (ids 1..CUSTOMERS)."""
    from billing_core.db import migrate  # noqa: PLC0415

    asyncio.run(fresh_database(url))
    migrate.upgrade(url)
    asyncio.run(_customers(url))


async def _customers(url: str) -> None:
    from billing_core.seeding import seed_customers  # noqa: PLC0415

    conn = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))
    try:
        await seed_customers(conn, first_id=1, count=CUSTOMERS)
    finally:
        await conn.close()


class ApiServer(NamedTuple):
    port: int
    pid: int


@contextlib.contextmanager
def api_server(database_url: str, **settings: str) -> Iterator[ApiServer]:
    """``python -m services.api`` (one uvicorn worker) on a free port, until the block ends."""
    port = free_port()
    env = {
        **os.environ,
        "BILLING_DATABASE_URL": database_url,
        "BILLING_API_PORT": str(port),
        "BILLING_API_INTERNAL_PORT": "0",
        "BILLING_LOG_LEVEL": "WARNING",
        "BILLING_WEBHOOK_SECRETS": "bench-webhook-secret",  # the API starts with one only
        **settings,
    }
    log = tempfile.TemporaryFile()
    server = subprocess.Popen(
        [sys.executable, "-m", "services.api"], cwd=ROOT, env=env, stdout=log, stderr=log
    )
    try:
        _wait_up(port)
        yield ApiServer(port, server.pid)
    finally:
        server.terminate()
        server.wait(timeout=15)
        log.close()


def main() -> None:
    parser = bench_arguments(__doc__.split("\n\n")[0], "billing_bench_api")
    parser.add_argument("--seed-subscriptions", type=int, default=2000)
    parser.add_argument(
        "--only", choices=("post", "get"), help="measure this path (and /healthz) only"
    )
    args = parser.parse_args()

    from billing_core.settings import CoreSettings  # noqa: PLC0415
    from services.api.admin import create_api_key  # noqa: PLC0415

    migrated_database(args.database_url)
    # A limit the bench never reaches: it measures what counting costs, not refusals.
    token = create_api_key(
        CoreSettings(database_url=args.database_url), "bench", rate_limit_per_minute=100_000_000
    )
    with api_server(args.database_url, BILLING_AUTH_CACHE_SECONDS="30") as server:
        host = "127.0.0.1"
        common = {"host": host, "port": server.port, "token": token}
        seed = run_load("closed", scenario="post", concurrency=8, seconds=2.0, ids=[], **common)
        print(f"warm-up: {seed.requests} POSTs")
        ids = asyncio.run(subscription_ids(args.database_url))
        paths = [args.only] if args.only else ["post", "get"]
        table: dict[str, list[Result]] = {"healthz": [], **{p: [] for p in paths}}
        cpu: dict[str, list[float]] = {s: [] for s in table}
        half: dict[str, list[Result]] = {p: [] for p in paths}
        for run in range(args.runs):
            for scenario, results in table.items():
                cpu_before = cpu_seconds(server.pid)
                r = run_load(
                    "closed",
                    scenario=scenario,
                    concurrency=args.concurrency,
                    seconds=args.seconds,
                    ids=ids,
                    **common,
                )
                cpu_ms = (cpu_seconds(server.pid) - cpu_before) * 1000 / max(1, r.requests)
                results.append(r)
                cpu[scenario].append(cpu_ms)
                print(
                    f"run {run + 1} {scenario:8s} {r.rps:8.0f} req/s  p50 {r.pct(0.5):6.1f} ms  "
                    f"p99 {r.pct(0.99):6.1f} ms  cpu {cpu_ms:5.2f} ms/req  errors {r.errors}",
                    flush=True,
                )
                if scenario not in half:
                    continue
                # Right after the closed loop it halves: the machine's other load drifts over
                # a whole benchmark, so "half the max rate" is the max measured just before.
                rate = r.rps / 2
                o = run_load(
                    "open", scenario=scenario, rate=rate, seconds=args.seconds, ids=ids, **common
                )
                half[scenario].append(o)
                print(
                    f"      open loop at {rate:6.0f}/s  p50 {o.pct(0.5):6.1f} ms  "
                    f"p99 {o.pct(0.99):6.1f} ms  errors {o.errors}",
                    flush=True,
                )
        _report(args, table, cpu, half)


def _report(
    args: argparse.Namespace,
    table: dict[str, list[Result]],
    cpu: dict[str, list[float]],
    half: dict[str, list[Result]],
) -> None:
    med = {s: _medians(rs) for s, rs in table.items()}
    print()
    print(
        f"concurrency {args.concurrency}, {args.seconds:.0f} s per run, medians of "
        f"{args.runs} runs, load average {_load_average()}"
    )
    print(
        f"{'':10s}{'req/s':>9s}{'p50 ms':>9s}{'p99 ms':>9s}{'x healthz':>11s}"
        f"{'cpu ms':>9s}{'p99 @ half rate':>17s}"
    )
    floor = med["healthz"]["rps"]
    cpu_med = {scenario: statistics.median(values) for scenario, values in cpu.items()}
    for scenario in table:
        m = med[scenario]
        half_text = f"{_p99(half[scenario]):.1f} ms" if scenario in half else "-"
        print(
            f"{scenario:10s}{m['rps']:9.0f}{m['p50']:9.1f}{m['p99']:9.1f}"
            f"{m['rps'] / floor:11.2f}{cpu_med[scenario]:9.2f}{half_text:>17s}"
        )
    errors = sum(r.errors for rs in (*table.values(), *half.values()) for r in rs)
    by_status: dict[int, int] = {}
    for rs in (*table.values(), *half.values()):
        for r in rs:
            for status, count in r.error_statuses.items():
                by_status[status] = by_status.get(status, 0) + count
    print(
        f"errors: {errors}" + (f" (by status: {dict(sorted(by_status.items()))})" if errors else "")
    )
    print("targets:")
    verdicts = []
    for scenario, (min_ratio, max_cpu) in TARGETS.items():
        if scenario not in table:
            continue
        ratio, cpu_ms = med[scenario]["rps"] / floor, cpu_med[scenario]
        ok = ratio >= min_ratio and cpu_ms <= max_cpu
        verdicts.append(ok)
        name = "POST /subscriptions" if scenario == "post" else "GET /subscriptions/{id}"
        print(
            f"  {'PASS' if ok else 'FAIL'}  {name}: {ratio:.2f}x healthz (>= {min_ratio:.2f}), "
            f"{cpu_ms:.2f} ms CPU (<= {max_cpu})"
        )
    p99s = {scenario: _p99(results) for scenario, results in half.items()}
    ok = all(v < HALF_RATE_P99_MS for v in p99s.values())
    verdicts.append(ok)
    print(
        f"  {'PASS' if ok else 'FAIL'}  p99 at half the measured rate (open loop): "
        + ", ".join(f"{s} {v:.1f} ms" for s, v in p99s.items())
        + f" (< {HALF_RATE_P99_MS:.0f})"
    )
    print(f"  {'all met' if all(verdicts) and not errors else 'NOT all met'}")


def _medians(results: list[Result]) -> dict[str, float]:
    return {
        "rps": statistics.median(r.rps for r in results),
        "p50": statistics.median(r.pct(0.5) for r in results),
        "p99": statistics.median(r.pct(0.99) for r in results),
    }


def _p99(results: list[Result]) -> float:
    return statistics.median(r.pct(0.99) for r in results)


def _load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _wait_up(port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                if s.recv(12).endswith(b"200"):
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("the API did not start")


if __name__ == "__main__":
    main()
