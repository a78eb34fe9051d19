"""The console's overview numbers: the same queries as ``billing status`` (``repo.backlogs``,
the gateway calls per second of sending over the last minutes among them), and which processes
answer."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from billing_core.db.pg import Pool
from billing_core.repo import backlogs
from services.api.console.probes import ProcessState, probe_all


@dataclass
class Overview:
    now: datetime
    subscriptions: list[dict[str, Any]]
    invoices: list[dict[str, Any]]
    outbox: dict[str, Any]
    money_back: dict[str, int]
    calls: backlogs.GatewayCalls
    limit: int
    processes: list[ProcessState]

    @property
    def due_subscriptions(self) -> int:
        return sum(int(r["due"]) for r in self.subscriptions)

    @property
    def due_invoices(self) -> int:
        return sum(int(r["due"]) for r in self.invoices)

    @property
    def open_invoices(self) -> int:
        return sum(int(r["n"]) for r in self.invoices if r["status"] == "OPEN")

    @property
    def outbox_lag_seconds(self) -> float:
        oldest = self.outbox.get("oldest")
        return (self.now - oldest).total_seconds() if isinstance(oldest, datetime) else 0.0

    @property
    def rate_limited(self) -> int | None:
        counts = [p.rate_limited for p in self.processes if p.rate_limited is not None]
        return sum(counts) if counts else None


async def gather(
    pool: Pool, now: datetime, *, limit: int, processes: list[tuple[str, str]]
) -> Overview:
    async with pool.acquire() as conn:
        subs = await backlogs.subscriptions_by_status(conn, now)
        invs = await backlogs.invoices_by_status(conn, now)
        outbox = await backlogs.outbox_backlog(conn)
        money = await backlogs.money_back(conn, now)
        calls = await backlogs.gateway_calls(conn, now, rate_limit=limit)
    states = await probe_all(processes) if processes else []
    return Overview(now, subs, invs, outbox, money, calls, limit, states)


def chart_points(overview: Overview, width: int = 600, height: int = 160) -> dict[str, Any]:
    """The SVG chart's geometry: a polyline of calls per second of sending and the limit
    line."""
    per_second = overview.calls.per_second
    top = max(overview.limit, overview.calls.busiest_second, 1) * 1.1
    n = max(1, len(per_second) - 1)
    points = " ".join(
        f"{i * width / n:.1f},{height - calls * height / top:.1f}"
        for i, calls in enumerate(per_second)
    )
    return {
        "width": width,
        "height": height,
        "points": points,
        "limit_y": round(height - overview.limit * height / top, 1),
    }
