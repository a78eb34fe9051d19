"""``billing demo``: a small "1st of the month" on the running system, end to end.

It seeds subscriptions that all come due within a minute or two, each of its own customer with
an e-mail address (so the notifier sends their receipts and payment failures to the development
SMTP server), makes a few customers' cards decline (so dunning runs), then watches the system
invoice them, charge at the gateway's limit, retry, cancel and publish events — and ends with a
summary table and a PNG plot.

On a terminal the counts are a live table; otherwise (a pipe, CI, a log file) one plain line of
the key counts every few seconds. The summary and the plot are written however the run ends —
drained, timed out, the database or the simulator no longer answering (a figure it cannot read
says "unavailable") — and :class:`Outcome` lists what went wrong, for one closing line.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import httpx
from rich.console import Console
from rich.live import Live
from rich.table import Table

from billing_core.clock import Clock
from billing_core.db.pg import Pool
from billing_core.repo import backlogs
from services.ops.demo_gateway import WEBHOOK_RESULTS, Gateway, GatewayFigures, since
from services.ops.demo_plot import plot
from services.ops.seed import seed

PROGRESS_EVERY_S = 5.0  # plain progress lines (no terminal): one every this many seconds
SAMPLE_TIMEOUT_S = 30.0
# The demo's customers have addresses here (customer-<id>@example.test): the notifier e-mails
# them receipts and payment failures, which `make up`'s development SMTP server keeps.
EMAIL_DOMAIN = "example.test"
DATABASE_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError)
UNAVAILABLE = "unavailable"


@dataclass
class Sample:
    t: float
    values: dict[str, int]


@dataclass
class Outcome:
    """What went wrong, one short phrase each (empty: the demo drained, nothing charged twice)."""

    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


class DemoFailed(Exception):
    """The demo could not start (nothing to summarise); the message is the one line to print."""


def progress_line(sample: Sample) -> str:
    """One line of the key counts, for output that is not a terminal."""
    v = sample.values
    return (
        f"[{sample.t:4.0f} s] due subscriptions {v['due_subscriptions']}, "
        f"renewal invoices {v['invoices']}, open {v['open_invoices']} "
        f"(due {v['due_invoices']}), paid {v['paid']}, dunned {v['dunned']}, "
        f"failed {v['failed']}, canceled {v['canceled']}, "
        f"events unpublished {v['unpublished']} / published {v['published']}"
    )


def _table(sample: Sample) -> Table:
    table = Table(title=f"1st of the month, t = {sample.t:.0f} s")
    table.add_column("what")
    table.add_column("count", justify="right")
    for name, value in sample.values.items():
        table.add_row(name.replace("_", " "), str(value))
    return table


def _why(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return f"no answer in {SAMPLE_TIMEOUT_S:g} s"
    detail = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {detail[0]}" if detail else type(exc).__name__


async def run_demo(
    pool: Pool,
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
    gateway_timeout: timedelta = timedelta(seconds=120),
    progress_every: float = PROGRESS_EVERY_S,
) -> Outcome:
    """Seed, watch until drained or ``timeout``, then summarise and plot whatever happened.

    Raises :class:`DemoFailed` only when seeding fails; every later failure is in the outcome.
    """
    outcome = Outcome()
    now = clock.now()
    first = 1_000_000_000 + int(time.time()) % 1_000_000 * 1000
    console.print(f"[bold]Seeding {subscriptions} subscriptions due within {due_within}...")
    try:
        await seed(
            database_url,
            count=subscriptions,
            due_from=now + timedelta(seconds=5),
            due_window=due_within,
            first_customer_id=first,
            random_seed=first,
            email_domain=EMAIL_DOMAIN,
            show_progress=console.is_terminal,
        )
    except DATABASE_ERRORS as exc:
        raise DemoFailed(f"seeding failed, the database did not answer ({_why(exc)})") from exc
    gateway = Gateway(gateway_url, gateway_timeout.total_seconds())
    rng = random.Random(first)
    decliners = rng.sample(range(first, first + subscriptions), int(subscriptions * decline_share))
    declining = await gateway.decline(decliners, now + timedelta(days=2), "insufficient_funds")
    console.print(f"{declining} customers' cards will decline (dunning, then cancellation).")
    before = await gateway.figures()

    started = time.monotonic()
    samples, stopped = await _watch(
        pool, clock, first, due_within, timeout, console, progress_every
    )
    duration = time.monotonic() - started
    last = samples[-1].values if samples else None
    if stopped is not None:
        outcome.problems.append(stopped)
    elif last is not None and not _drained(last):
        outcome.problems.append(
            f"did not drain within {timeout.total_seconds():.0f} s: "
            f"{last['due_subscriptions']} subscriptions due, {last['open_invoices']} invoices "
            f"open, {last['unpublished']} events unpublished"
        )

    after = await gateway.figures(per_second=True)
    if gateway.errors:
        more = f" (+{len(gateway.errors) - 1} more)" if len(gateway.errors) > 1 else ""
        lost = "" if after.calls is not None else f": its figures are {UNAVAILABLE}"
        outcome.problems.append(
            f"the gateway simulator at {gateway_url} did not answer ({gateway.errors[0]}{more})"
            + lost
        )
    if after.duplicate_invoices:
        shown = ", ".join(str(i) for i in after.duplicate_invoices[:5])
        outcome.problems.append(
            f"{len(after.duplicate_invoices)} invoices charged twice at the gateway: {shown}"
        )
    try:
        plot([(s.t, s.values) for s in samples], after.per_second, after.limit, plot_path)
    except (OSError, ValueError) as exc:
        outcome.problems.append(f"the plot {plot_path} was not written ({exc})")
    console.print(
        _summary(subscriptions, last, before, after, duration, outcome, stopped, plot_path)
    )
    return outcome


async def _watch(
    pool: Pool,
    clock: Clock,
    first: int,
    due_within: timedelta,
    timeout: timedelta,
    console: Console,
    progress_every: float,
) -> tuple[list[Sample], str | None]:
    """Sample the counts every second until drained or ``timeout``; the samples, and why the
    watch stopped early (None: drained or timed out)."""
    samples: list[Sample] = []
    started = time.monotonic()
    live = Live(console=console, refresh_per_second=2) if console.is_terminal else None
    next_line = 0.0
    printed = -1
    with live or contextlib.nullcontext():
        while time.monotonic() - started < timeout.total_seconds():
            try:
                async with asyncio.timeout(SAMPLE_TIMEOUT_S), pool.acquire() as conn:
                    values = await backlogs.demo_progress(
                        conn, first_customer_id=first, now=clock.now()
                    )
            except (*DATABASE_ERRORS, TimeoutError) as exc:
                return samples, f"the database stopped answering ({_why(exc)})"
            sample = Sample(time.monotonic() - started, values)
            samples.append(sample)
            if live is not None:
                live.update(_table(sample))
            elif sample.t >= next_line:
                console.print(progress_line(sample), markup=False, highlight=False, soft_wrap=True)
                printed = len(samples) - 1
                next_line = sample.t + progress_every
            if sample.t > due_within.total_seconds() + 5 and _drained(sample.values):
                break
            await asyncio.sleep(1)
    if live is None and samples and printed != len(samples) - 1:
        console.print(progress_line(samples[-1]), markup=False, highlight=False, soft_wrap=True)
    return samples, None


def _drained(values: dict[str, int]) -> bool:
    return (
        values["due_subscriptions"] == 0
        and values["open_invoices"] == 0
        and values["unpublished"] == 0
    )


def _summary(
    subscriptions: int,
    last: dict[str, int] | None,
    before: GatewayFigures,
    after: GatewayFigures,
    duration: float,
    outcome: Outcome,
    stopped: str | None,
    plot_path: Path,
) -> Table:
    def count(key: str) -> object:
        return UNAVAILABLE if last is None else last[key]

    def known(value: object) -> object:
        return UNAVAILABLE if value is None else value

    busiest: object = UNAVAILABLE
    if after.busiest_second is not None:
        limit = {None: "limit unknown", 0: "no limit"}.get(after.limit, f"limit {after.limit}")
        busiest = f"{after.busiest_second} calls ({limit})"
    webhooks: object = UNAVAILABLE
    if after.webhooks is not None:
        if not after.webhooks:
            webhooks = "not exposed by the simulator"
        else:
            base = before.webhooks or {}
            webhooks = " / ".join(
                str(after.webhooks.get(r, 0) - base.get(r, 0)) for r in WEBHOOK_RESULTS
            )
            if before.webhooks is None:
                webhooks = f"{webhooks} (since the simulator started)"
    duplicates = after.duplicate_invoices
    if last is None:
        drained = "no (no sample)"
    elif stopped is not None:
        drained = "no (database stopped answering)"
    else:
        drained = "yes" if _drained(last) else "no (timeout)"
    rows: list[tuple[str, object]] = [
        ("subscriptions seeded", subscriptions),
        ("renewal invoices created", count("invoices")),
        ("paid", count("paid")),
        ("went through dunning", count("dunned")),
        ("failed after the last retry", count("failed")),
        ("subscriptions canceled", count("canceled")),
        ("events published to Kafka (this demo's subscriptions)", count("published")),
        ("gateway calls (this demo)", known(since(after.calls, before.calls))),
        ("busiest rolling second (simulator lifetime)", busiest),
        ("gateway 429 answers (this demo)", known(since(after.rate_limited, before.rate_limited))),
        (f"webhooks {' / '.join(WEBHOOK_RESULTS)} (this demo)", webhooks),
        ("invoices charged twice", known(None if duplicates is None else len(duplicates))),
        ("duration", f"{duration:.0f} s"),
        ("drained", drained),
        ("plot", str(plot_path)),
    ]
    table = Table(title="Demo summary" + ("" if outcome.ok else " (with problems)"))
    table.add_column("what")
    table.add_column("value", justify="right")
    for name, value in rows:
        table.add_row(name, str(value))
    return table


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
