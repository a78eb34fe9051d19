"""``billing demo``: a small "1st of the month" on the running system, end to end.

It seeds subscriptions that all come due within a minute or two, makes a few customers' cards
decline (so dunning runs), then watches the system invoice them, charge at the gateway's limit,
retry, cancel and publish events — and ends with a summary table and a PNG plot.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import httpx
from rich.console import Console
from rich.live import Live
from rich.table import Table
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import Clock
from services.ops.seed import seed

_PROGRESS = text(
    """
    SELECT
      (SELECT count(*) FROM subscription s WHERE s.customer_id >= :first
         AND s.status = 'ACTIVE' AND s.current_period_end <= :now) AS due_subscriptions,
      (SELECT count(*) FROM invoice i WHERE i.customer_id >= :first
         AND (i.period_index > 0 OR i.kind = 'PRORATION')) AS invoices,
      (SELECT count(*) FROM invoice i WHERE i.customer_id >= :first AND i.status = 'OPEN'
         AND i.next_attempt_at <= :now) AS due_invoices,
      (SELECT count(*) FROM invoice i WHERE i.customer_id >= :first AND i.status = 'OPEN')
         AS open_invoices,
      (SELECT count(*) FROM invoice i WHERE i.customer_id >= :first AND i.status = 'PAID'
         AND i.period_index > 0) AS paid,
      (SELECT count(*) FROM invoice i WHERE i.customer_id >= :first AND i.status = 'FAILED')
         AS failed,
      (SELECT count(*) FROM invoice i WHERE i.customer_id >= :first AND i.attempt_count > 0)
         AS dunned,
      (SELECT count(*) FROM subscription s WHERE s.customer_id >= :first
         AND s.status = 'CANCELED') AS canceled,
      (SELECT count(*) FROM outbox_event WHERE published_at IS NULL) AS unpublished,
      (SELECT count(*) FROM outbox_event WHERE published_at IS NOT NULL) AS published
    """
)


@dataclass
class Sample:
    t: float
    values: dict[str, int]


def _table(sample: Sample) -> Table:
    table = Table(title=f"1st of the month, t = {sample.t:.0f} s")
    table.add_column("what")
    table.add_column("count", justify="right")
    for name, value in sample.values.items():
        table.add_row(name.replace("_", " "), str(value))
    return table


async def run_demo(
    engine: AsyncEngine,
    *,
    database_url: str,
    clock: Clock,
    gateway_url: str,
    subscriptions: int,
    due_within: timedelta,
    decline_share: float,
    timeout: timedelta,
    plot_path: Path,
    console: Console,
) -> bool:
    now = clock.now()
    first = 1_000_000_000 + int(time.time()) % 1_000_000 * 1000
    console.print(f"[bold]Seeding {subscriptions} subscriptions due within {due_within}...")
    await seed(
        database_url,
        count=subscriptions,
        due_from=now + timedelta(seconds=5),
        due_window=due_within,
        first_customer_id=first,
        random_seed=first,
    )
    rng = random.Random(first)
    decliners = rng.sample(range(first, first + subscriptions), int(subscriptions * decline_share))
    async with httpx.AsyncClient(base_url=gateway_url, timeout=10) as client:
        until = (now + timedelta(days=2)).isoformat()
        for customer in decliners:
            await client.post(
                f"/v1/admin/customers/{customer}/decline-until",
                json={"until": until, "code": "insufficient_funds"},
            )
        calls_before = int((await client.get("/v1/ledger/summary")).json()["calls"])
    console.print(f"{len(decliners)} customers' cards will decline (dunning, then cancellation).")

    samples: list[Sample] = []
    started = time.monotonic()
    drained = False
    with Live(console=console, refresh_per_second=2) as live:
        while time.monotonic() - started < timeout.total_seconds():
            async with engine.connect() as conn:
                row = (
                    (await conn.execute(_PROGRESS, {"first": first, "now": clock.now()}))
                    .mappings()
                    .one()
                )
            sample = Sample(time.monotonic() - started, {k: int(v) for k, v in row.items()})
            samples.append(sample)
            live.update(_table(sample))
            v = sample.values
            if (
                sample.t > due_within.total_seconds() + 5
                and v["due_subscriptions"] == 0
                and v["open_invoices"] == 0
                and v["unpublished"] == 0
            ):
                drained = True
                break
            await asyncio.sleep(1)
    duration = time.monotonic() - started
    async with httpx.AsyncClient(base_url=gateway_url, timeout=60) as client:
        summary = (await client.get("/v1/ledger/summary")).json()
        per_second = (await client.get("/v1/ledger/calls-per-second")).json()
    _plot(samples, per_second, plot_path)
    last = samples[-1].values
    table = Table(title="Demo summary")
    table.add_column("what")
    table.add_column("value", justify="right")
    rows = [
        ("subscriptions seeded", subscriptions),
        ("renewal invoices created", last["invoices"]),
        ("paid", last["paid"]),
        ("went through dunning", last["dunned"]),
        ("failed after the last retry", last["failed"]),
        ("subscriptions canceled", last["canceled"]),
        ("events published to Kafka", last["published"]),
        ("gateway calls (this demo)", int(summary["calls"]) - calls_before),
        ("max gateway calls in any rolling second", summary["max_calls_in_any_rolling_second"]),
        ("gateway 429 answers", summary["rate_limited_429"]),
        ("invoices charged twice", len(summary["duplicate_success_invoices"])),
        ("duration", f"{duration:.0f} s"),
        ("drained", "yes" if drained else "no (timeout)"),
        ("plot", str(plot_path)),
    ]
    for name, value in rows:
        table.add_row(name, str(value))
    console.print(table)
    return drained and not summary["duplicate_success_invoices"]


def _plot(samples: list[Sample], per_second: list[dict[str, int]], path: Path) -> None:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=False)
    if per_second:
        first = per_second[0]["second"]
        top.plot(
            [r["second"] - first for r in per_second],
            [r["calls"] for r in per_second],
            label="gateway calls/s",
        )
        top.axhline(200, color="red", linestyle="--", label="limit")
    top.set_ylabel("calls per second")
    top.legend()
    top.set_title("Gateway calls per second (simulator ledger)")
    t = [s.t for s in samples]
    for key in ("due_subscriptions", "due_invoices", "open_invoices", "unpublished"):
        bottom.plot(t, [s.values[key] for s in samples], label=key.replace("_", " "))
    bottom.set_xlabel("seconds since the demo started")
    bottom.set_ylabel("backlog")
    bottom.legend()
    bottom.set_title("Backlogs over time")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


async def wait_for_processes(urls: list[str], timeout: float = 60) -> list[str]:
    """The URLs that still do not answer after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    missing = list(urls)
    async with httpx.AsyncClient(timeout=2) as client:
        while missing and time.monotonic() < deadline:
            still = []
            for url in missing:
                try:
                    if (await client.get(url)).status_code != 200:
                        still.append(url)
                except httpx.HTTPError:
                    still.append(url)
            missing = still
            if missing:
                await asyncio.sleep(1)
    return missing
