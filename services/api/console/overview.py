"""The console's overview numbers: the same queries as ``billing status`` (``repo.backlogs``),
the gateway answers per second over the last minutes, and which processes answer."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from billing_core.db.pg import Pool
from billing_core.repo import backlogs, subscription_story
from services.api.console.probes import ProcessState, probe_all

WINDOW_SECONDS = 180


@dataclass
class Overview:
    now: datetime
    subscriptions: list[dict[str, Any]]
    invoices: list[dict[str, Any]]
    outbox: dict[str, Any]
    money_back: dict[str, int]
    per_second: list[tuple[int, int]]  # (seconds before now, answers) oldest first, gaps as 0
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
    def last_second_rate(self) -> int:
        """Answers in the last complete second with any (the chart's right end)."""
        return self.per_second[-2][1] if len(self.per_second) >= 2 else 0

    @property
    def busiest_second(self) -> int:
        return max((n for _, n in self.per_second), default=0)

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
        answers = await subscription_story.gateway_answers_per_second(
            conn, now=now, seconds=WINDOW_SECONDS, cap=max(10_000, limit * WINDOW_SECONDS * 2)
        )
    states = await probe_all(processes) if processes else []
    last = int(now.timestamp())
    series = [(last - s, answers.get(s, 0)) for s in range(last - WINDOW_SECONDS + 1, last + 1)]
    return Overview(now, subs, invs, outbox, money, series, limit, states)


def chart_points(overview: Overview, width: int = 600, height: int = 160) -> dict[str, Any]:
    """The SVG chart's geometry: a polyline of answers per second and the limit line."""
    top = max(overview.limit, overview.busiest_second, 1) * 1.1
    n = max(1, len(overview.per_second) - 1)
    points = " ".join(
        f"{i * width / n:.1f},{height - calls * height / top:.1f}"
        for i, (_, calls) in enumerate(overview.per_second)
    )
    return {
        "width": width,
        "height": height,
        "points": points,
        "limit_y": round(height - overview.limit * height / top, 1),
    }
