"""Collector benchmark: two collector processes drain a backlog through the gateway simulator.

Phase 1 — the peak-day floor: a backlog of due invoices, the simulator at its 200 calls/s limit
with 100-300 ms latency. The physical floor is backlog / 200 s; we report sustained charges/s ÷ 200,
drain time ÷ floor, 429s and the busiest rolling second, all from the simulator's own ledger.
Phase 2 — the ceiling: the same with a 1 000 calls/s limit.

    python -m bench.collector_bench [--invoices 20000] [--fast-invoices 20000]

``--fast-invoices 0`` runs phase 1 only (a shorter run at 200/s, e.g. to compare CPU per call);
the plot is then not redrawn.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench.procfs import cpu_seconds
from billing_core.db import migrate, pg
from billing_core.settings import CoreSettings
from tests.support.db import recreate_database, truncate_all
from tests.support.factories import due_subscriptions_with_invoices
from tests.support.infra import checkout_database_name, start_services
from tests.support.processes import SIMULATOR_NICE, Proc, free_port, start

OUT = Path(__file__).resolve().parent / "out"


def group_totals(health_port: int, histogram: str) -> tuple[float, float]:
    """(items, groups) a collector's histogram has counted so far; (0, 0) when it has none."""
    metrics = httpx.get(f"http://127.0.0.1:{health_port}/metrics", timeout=10).text
    found = {"sum": 0.0, "count": 0.0}
    for line in metrics.splitlines():
        for part in found:
            if line.startswith(f"{histogram}_{part} "):
                found[part] = float(line.split()[1])
    return found["sum"], found["count"]


def per_group(health_ports: list[int], histogram: str) -> float | None:
    totals = [group_totals(port, histogram) for port in health_ports]
    groups = sum(count for _, count in totals)
    return round(sum(items for items, _ in totals) / groups, 1) if groups else None


def counter(health_port: int, name: str) -> float:
    metrics = httpx.get(f"http://127.0.0.1:{health_port}/metrics", timeout=10).text
    for line in metrics.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    return 0.0


def lateness_over(health_ports: list[int]) -> dict[str, float]:
    """Share of the calls sent later than each bound (ms) after their slot, all collectors."""
    below: dict[str, float] = {}
    for port in health_ports:
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        for line in metrics.splitlines():
            if line.startswith("billing_collector_send_lateness_seconds_bucket{"):
                bound = line.split('le="', 1)[1].split('"', 1)[0]
                below[bound] = below.get(bound, 0.0) + float(line.split()[-1])
    total = below.pop("+Inf", 0.0)
    if not total:
        return {}
    return {
        f"{float(bound) * 1000:g}": round(1 - count / total, 4)
        for bound, count in sorted(below.items(), key=lambda kv: float(kv[0]))
    }


def collector_readings(health_ports: list[int]) -> dict[str, Any]:
    """What the collectors' own metrics say about the run."""
    return {
        "slots_granted": int(
            sum(
                counter(port, "billing_collector_limiter_slots_granted_total")
                for port in health_ports
            )
        ),
        "late_permits_dropped": int(
            sum(
                counter(port, "billing_collector_limiter_late_permits_total")
                for port in health_ports
            )
        ),
        "send_late_over_ms": lateness_over(health_ports),
        "checks_after_slot": int(
            sum(counter(port, "billing_collector_check_after_slot_total") for port in health_ports)
        ),
        "checks_per_read": per_group(health_ports, "billing_collector_check_group_invoices"),
        "results_per_group": per_group(health_ports, "billing_collector_record_group_results"),
    }


_PAID = pg.Statement("SELECT count(*) FROM invoice WHERE status = 'PAID'")


async def paid(pool: pg.Pool) -> int:
    async with pool.acquire() as conn:
        return int(await pg.fetchval(conn, _PAID))


async def phase(
    pool: pg.Pool,
    database_url: str,
    logs: Path,
    *,
    invoices: int,
    limit: int,
    in_flight: int,
) -> dict[str, Any]:
    await truncate_all(database_url)
    async with pg.transaction(pool) as conn:
        await due_subscriptions_with_invoices(conn, invoices, now=datetime.now(UTC))
    sim_port = free_port()
    sim = start(
        f"sim-{limit}",
        "services.gateway_sim",
        {
            "BILLING_GATEWAY_SIM_PORT": str(sim_port),
            "BILLING_GATEWAY_SIM_RATE_LIMIT_PER_SECOND": str(limit),
            "BILLING_GATEWAY_SIM_LATENCY_MIN_MS": "100",
            "BILLING_GATEWAY_SIM_LATENCY_MAX_MS": "300",
            "BILLING_LOG_LEVEL": "WARNING",
        },
        logs,
        ready_url=f"http://127.0.0.1:{sim_port}/healthz",
        timeout=120,
        nice=SIMULATOR_NICE,
    )
    sim_url = f"http://127.0.0.1:{sim_port}"
    key = f"bench:{time.time_ns()}:permits"
    collectors: list[Proc] = []
    health_ports: list[int] = []
    started = time.monotonic()
    cpu: dict[str, float] = {}
    used: list[float] = []
    readings: dict[str, Any] = {}
    calls_before = 0
    try:
        for i in range(2):
            port = free_port()
            health_ports.append(port)
            collectors.append(
                start(
                    f"collector-{limit}-{i}",
                    "services.collector",
                    {
                        "BILLING_DATABASE_URL": database_url,
                        "BILLING_COLLECTOR_GATEWAY_URL": sim_url,
                        "BILLING_COLLECTOR_HEALTH_PORT": str(port),
                        "BILLING_COLLECTOR_RATE_LIMIT_PER_SECOND": str(limit),
                        "BILLING_COLLECTOR_RATE_LIMIT_KEY": key,
                        "BILLING_COLLECTOR_MAX_IN_FLIGHT": str(in_flight),
                        "BILLING_COLLECTOR_BATCH_SIZE": str(min(in_flight, 200)),
                        "BILLING_COLLECTOR_POLL_INTERVAL_SECONDS": "0.2",
                        "BILLING_LOG_LEVEL": "WARNING",
                    },
                    logs,
                    ready_url=f"http://127.0.0.1:{port}/readyz",
                    timeout=120,
                )
            )
        # CPU from here on (after the imports and start-up), per process
        procs = [sim, *collectors]
        cpu_start = [cpu_seconds(p.process.pid) for p in procs]
        measured_from = time.monotonic()
        calls_before = httpx.get(f"{sim_url}/v1/ledger/summary", timeout=30).json()["calls"]
        deadline = time.monotonic() + invoices / limit * 3 + 60
        while await paid(pool) < invoices and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
        wall = time.monotonic() - started
        used = [cpu_seconds(p.process.pid) - c for p, c in zip(procs, cpu_start, strict=True)]
        span = time.monotonic() - measured_from
        cpu = {p.name: round(u / span, 2) for p, u in zip(procs, used, strict=True)}
        await asyncio.sleep(5.5)  # the collectors refresh the late-permit gauge every 5 s
        readings = collector_readings(health_ports)
        async with httpx.AsyncClient(base_url=sim_url, timeout=120) as client:
            summary = (await client.get("/v1/ledger/summary")).json()
            per_second = (await client.get("/v1/ledger/calls-per-second")).json()
    finally:
        for proc in collectors:
            proc.terminate(timeout=60)
        sim.terminate()
    busy = [r for r in per_second if r["calls"] > 0]
    first, last = busy[0]["second"], busy[-1]["second"]
    # drain time: from the first call's second to the last call's second, inclusive (±1 s)
    drain = last - first + 1
    steady = busy[1:-1] or busy  # whole seconds only: the first and last are partial
    sustained = sum(r["calls"] for r in steady) / len(steady)
    floor = invoices / limit
    return {
        "limit": limit,
        "invoices": invoices,
        "paid": await paid(pool),
        "wall_s": round(wall, 1),
        "drain_s": drain,
        "floor_s": round(floor, 1),
        "drain_over_floor": round(drain / floor, 3),
        "sustained_per_s": round(sustained, 1),
        "sustained_over_limit": round(sustained / limit, 3),
        "rate_limited_429": summary["rate_limited_429"],
        "max_in_any_rolling_second": summary["max_calls_in_any_rolling_second"],
        "max_arrivals_in_any_rolling_second": summary["max_arrivals_in_any_rolling_second"],
        "charges_succeeded": summary["charges_succeeded"],
        "calls": summary["calls"],
        "duplicate_success_invoices": len(summary["duplicate_success_invoices"]),
        **readings,
        "cpu_cores_used": cpu,
        "collector_cpu_ms_per_call": round(
            sum(used[1:]) / max(1, summary["calls"] - calls_before) * 1000, 2
        ),
        "per_second": [(r["second"] - first, r["calls"]) for r in per_second],
    }


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, axes = plt.subplots(len(results), 1, figsize=(10, 3.5 * len(results)))
    for ax, r in zip(axes if len(results) > 1 else [axes], results, strict=True):
        xs = [t for t, _ in r["per_second"]]
        ax.plot(xs, [c for _, c in r["per_second"]], label="gateway calls/s")
        ax.axhline(r["limit"], color="red", linestyle="--", label=f"limit {r['limit']}/s")
        ax.set_title(f"{r['invoices']} invoices, two collectors, limit {r['limit']}/s")
        ax.set_xlabel("seconds")
        ax.set_ylabel("calls/s")
        ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    services = start_services()
    name = f"{checkout_database_name()}_bench_collector"
    await recreate_database(services.admin_database_url, name)
    database_url = services.database_url(name)
    await asyncio.to_thread(migrate.upgrade, database_url)
    os.environ["BILLING_DATABASE_URL"] = database_url
    os.environ["BILLING_REDIS_URL"] = services.redis_url
    pool = await pg.create_pool(
        CoreSettings(database_url=database_url, process_name="bench.collector"), max_size=2
    )
    logs = Path(tempfile.mkdtemp(prefix="collector-bench-"))
    try:
        results = [
            await phase(pool, database_url, logs, invoices=args.invoices, limit=200, in_flight=128)
        ]
        if args.fast_invoices > 0:
            results.append(
                await phase(
                    pool,
                    database_url,
                    logs,
                    invoices=args.fast_invoices,
                    limit=1000,
                    in_flight=400,
                )
            )
    finally:
        await pool.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--invoices", type=int, default=20_000)
    parser.add_argument(
        "--fast-invoices", type=int, default=20_000, help="0: skip the 1 000/s phase"
    )
    args = parser.parse_args()
    results = asyncio.run(main_async(args))
    OUT.mkdir(exist_ok=True)
    if len(results) == 2:
        plot(results, Path("docs/benchmarks/collector_calls_per_second.png"))
    for r in results:
        shown = {k: v for k, v in r.items() if k != "per_second"}
        print(json.dumps(shown))
    (OUT / "collector.json").write_text(json.dumps(results))
    peak = results[0]
    checks = [
        (
            f"{peak['rate_limited_429']} x 429 at {peak['limit']}/s (0)",
            peak["rate_limited_429"] == 0,
        ),
        (
            f"busiest rolling second {peak['max_arrivals_in_any_rolling_second']} "
            f"(<= {peak['limit']})",
            peak["max_arrivals_in_any_rolling_second"] <= peak["limit"],
        ),
        (
            f"sustained {peak['sustained_over_limit']:.3f}x the limit (>= 0.97)",
            peak["sustained_over_limit"] >= 0.97,
        ),
        (
            f"drain {peak['drain_over_floor']:.2f}x the floor, start-up included (<= 1.05)",
            peak["drain_over_floor"] <= 1.05,
        ),
        *(
            (
                f"{r['collector_cpu_ms_per_call']:.2f} ms CPU per call at {r['limit']}/s (<= 1.0)",
                r["collector_cpu_ms_per_call"] <= 1.0,
            )
            for r in results
        ),
        (
            "no invoice charged twice, every invoice paid once",
            all(r["duplicate_success_invoices"] == 0 for r in results)
            and all(r["charges_succeeded"] == r["invoices"] == r["paid"] for r in results),
        ),
    ]
    for what, passed in checks:
        print(f"  {'PASS' if passed else 'FAIL'}  {what}")
    ok = all(passed for _, passed in checks)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
