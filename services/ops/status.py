"""``billing status``: the backlogs an operator looks at first, as readable tables (or one
JSON document with ``--json``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import redis.asyncio as aioredis
from redis.exceptions import RedisError
from rich.console import Console
from rich.table import Table

from billing_core.db.pg import Pool
from billing_core.domain.instant import iso_utc
from billing_core.ratelimit import GlobalRateLimiter
from billing_core.repo import backlogs


@dataclass
class Status:
    subscriptions: list[dict[str, object]]
    invoices: list[dict[str, object]]
    outbox: dict[str, object]
    slots_booked: int | None  # None: Redis unreachable
    rate_limit: int
    calls: backlogs.GatewayCalls
    money_back: dict[str, int] | None = None


async def gather(
    pool: Pool,
    now: datetime,
    redis_url: str,
    limiter_key: str,
    rate_limit: int,
    guard_ms: int,
) -> Status:
    async with pool.acquire() as conn:
        subs = await backlogs.subscriptions_by_status(conn, now)
        invs = await backlogs.invoices_by_status(conn, now)
        outbox = await backlogs.outbox_backlog(conn)
        money_back = await backlogs.money_back(conn, now)
        calls = await backlogs.gateway_calls(conn, now, rate_limit=rate_limit)
    booked: int | None
    client = aioredis.from_url(redis_url, socket_timeout=2, socket_connect_timeout=2)
    limiter = GlobalRateLimiter(client, key=limiter_key, limit=rate_limit, guard_ms=guard_ms)
    try:
        booked = await limiter.slots_booked()
    except (RedisError, OSError):
        booked = None
    finally:
        await limiter.close()
        await client.aclose()
    return Status(subs, invs, outbox, booked, rate_limit, calls, money_back)


def _plain(value: object) -> object:
    """A JSON value: instants as ISO-8601 UTC, anything else as it is."""
    return iso_utc(value) if isinstance(value, datetime) else value


def _rows(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    return [{k: _plain(v) for k, v in r.items()} for r in rows]


def as_dict(status: Status, now: datetime) -> dict[str, object]:
    """``billing status --json``: the same figures as the tables, for scripts and CI."""
    oldest = status.outbox.get("oldest")
    lag = (now - oldest).total_seconds() if isinstance(oldest, datetime) else 0.0
    return {
        "at": iso_utc(now),
        "subscriptions": _rows(status.subscriptions),
        "invoices": _rows(status.invoices),
        "outbox": {**{k: _plain(v) for k, v in status.outbox.items()}, "lag_seconds": lag},
        "gateway": {
            "redis_reachable": status.slots_booked is not None,
            "slots_booked": status.slots_booked,
            "rate_limit": status.rate_limit,
            "calls_last_second": status.calls.last_second,
            "busiest_second": status.calls.busiest_second,
            "window_seconds": len(status.calls.per_second),
        },
        "money_back": status.money_back,
    }


def render(status: Status, now: datetime, console: Console | None = None) -> None:
    console = console or Console()
    subs = Table(title="Subscriptions")
    for column in ("status", "count", "due now", "next period end"):
        subs.add_column(column)
    for r in status.subscriptions:
        subs.add_row(str(r["status"]), str(r["n"]), str(r["due"]), str(r["next_end"] or "-"))
    console.print(subs)

    invs = Table(title="Invoices (dunning pipeline: attempts = declines so far)")
    for column in ("status", "attempts", "count", "due now", "leased", "next attempt"):
        invs.add_column(column)
    for r in status.invoices:
        invs.add_row(
            str(r["status"]),
            str(r["attempt_count"]),
            str(r["n"]),
            str(r["due"]),
            str(r["leased"]),
            str(r["next_attempt"] or "-"),
        )
    console.print(invs)

    o = status.outbox
    oldest = o["oldest"]
    lag = f"{(now - oldest).total_seconds():.1f} s" if isinstance(oldest, datetime) else "0 s"
    out = Table(title="Outbox -> Kafka")
    for column in ("unpublished", "lag (oldest unpublished)", "parked", "total"):
        out.add_column(column)
    out.add_row(str(o["unpublished"]), lag, str(o["parked"]), str(o["total"]))
    console.print(out)

    window = len(status.calls.per_second)
    gate = Table(
        title=f"Gateway budget (calls counted in the second they were sent, last {window} s)"
    )
    gate.add_column("send slots booked ahead (all collectors)")
    gate.add_column("calls, last second")
    gate.add_column("busiest second")
    gate.add_column("limit")
    used = (
        "Redis unreachable (collection paused)"
        if status.slots_booked is None
        else (str(status.slots_booked))
    )
    calls = status.calls
    gate.add_row(used, str(calls.last_second), str(calls.busiest_second), str(status.rate_limit))
    console.print(gate)

    if status.money_back is not None:
        m = status.money_back
        back = Table(title="Refunds and reconciliation (billing reconcile lists the open items)")
        for column in (
            "refunds requested (due now)",
            "refunded",
            "refunds failed",
            "voids waiting for their call",
            "open reconciliation items",
        ):
            back.add_column(column)
        back.add_row(
            f"{m['refunds_requested']} ({m['refunds_due']})",
            str(m["refunds_succeeded"]),
            str(m["refunds_failed"]),
            str(m["voids_requested"]),
            str(m["open_items"]),
        )
        console.print(back)
