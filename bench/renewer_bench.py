"""Renewer benchmark (``make bench-renewer``): throughput against the database's own floor.

1. Seeds N due subscriptions (default 1 000 000, due times spread over 24 h, realistic plans and
   time zones, each of its own customer; half of them with a tax location: VAT inside the
   price, sales tax on top, or 0 %; and a lifecycle mix: 5 % in a trial that ends when due,
   3 % paused (void or keep_as_draft), 3 % with a plan change scheduled for the period end)
   into a template database, with a progress bar.
2. Throughput, on a copy of that database, in interleaved repetitions (the machine is shared
   and noisy; medians are reported), each variant taking the next slice of the same backlog:
   * the renewer's batch function with 1, 2 (one renewer process's default concurrency) and 4
     (two renewers) batches in flight, each on its own connection;
   * the floor: the same writes (lock + taxed invoice and its lines + advance + outbox, the
     trials' ends, the paused periods' VOID or DRAFT invoices and the scheduled changes by the
     renewer's rules) as ONE hand-written SQL statement per batch of the same size, from
     asyncpg;
   * a row-by-row approach (batches of 500, one statement per row and write;
     plain renewals: untaxed, the mix renewed as if it were plain).
3. The whole backlog of a fresh copy drained by renewer processes (``python -m
   services.renewer``): total time for N.
4. The cost of one batch claim (lock 1 000 due rows, roll back) with 50 k, 500 k and 5 M
   subscriptions in the table (a constant number due, the rest not due).

Databases used: billing_bench_renewer* (dropped at the end unless --keep).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from bench.renewer_sql import floor_batch, row_by_row_batch
from billing_core.db import migrate, pg
from billing_core.repo import renewal as renewal_repo
from billing_core.runtime.garbage_collection import quiet_garbage_collector
from billing_core.seeding import (
    SeedSpec,
    seed_filler_sql,
    seed_lifecycle_mix,
    seed_subscriptions,
    seed_tax_mix,
)
from billing_core.settings import CoreSettings
from billing_core.usecases.renew import renew_due_batch

ROOT = Path(__file__).resolve().parents[1]
PREFIX = "billing_bench_renewer"
TEMPLATE = f"{PREFIX}_tpl"
WORK = PREFIX
SCALE = f"{PREFIX}_scale"

console = Console()


def progress_bar() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
    )


@dataclass
class Urls:
    base: str  # SQLAlchemy URL of any database on the server

    def sa(self, name: str) -> str:
        return f"{self.base.rpartition('/')[0]}/{name}"

    def pg(self, name: str) -> str:
        return pg.asyncpg_dsn(self.sa(name))


# The other connections to a database (pg_backend_pid() is the asking connection's own).
_TERMINATE = pg.Statement(
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
    "WHERE datname = :name AND pid <> pg_backend_pid()"
)
_VACUUM_SUBSCRIPTIONS = pg.Statement("VACUUM ANALYZE subscription")
_SUBSCRIPTIONS = pg.Statement("SELECT count(*) FROM subscription")
_LAST_INVOICE = pg.Statement("SELECT coalesce(max(id), 0) FROM invoice")
_STILL_DUE = pg.Statement(
    "SELECT count(*) FROM subscription WHERE status = 'ACTIVE' "
    "AND current_period_end <= now() - interval '1 hour'"
)
_INVOICES = pg.Statement("SELECT count(*) FROM invoice")


async def recreate(urls: Urls, name: str, template: str | None = None) -> float:
    admin = await asyncpg.connect(urls.pg("postgres"))
    try:
        for db in (name, template):
            if db:
                await pg.execute(admin, _TERMINATE, {"name": db})
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        started = time.perf_counter()
        if template:
            await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        else:
            await admin.execute(f'CREATE DATABASE "{name}"')
        return time.perf_counter() - started
    finally:
        await admin.close()


async def drop(urls: Urls, *names: str) -> None:
    admin = await asyncpg.connect(urls.pg("postgres"))
    try:
        for name in names:
            await pg.execute(admin, _TERMINATE, {"name": name})
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
    finally:
        await admin.close()


async def seed_template(urls: Urls, args: argparse.Namespace) -> tuple[float, datetime]:
    count = args.subscriptions
    await recreate(urls, TEMPLATE)
    await asyncio.to_thread(migrate.upgrade, urls.sa(TEMPLATE))
    conn = await asyncpg.connect(urls.pg(TEMPLATE))
    now = datetime.now(UTC)
    started = time.perf_counter()
    try:
        with progress_bar() as bar:
            task = bar.add_task(f"seeding {count:,} due subscriptions", total=count, rate="")

            def report(done: int, total: int) -> None:
                elapsed = time.perf_counter() - started
                rate = f"{done / elapsed:,.0f}/s" if elapsed > 0 and done else ""
                bar.update(task, completed=done, rate=rate)

            # Due over the 24 h that end one hour ago: the whole backlog is due when we run.
            await seed_subscriptions(
                conn,
                SeedSpec(
                    count=count,
                    due_from=now - timedelta(hours=25),
                    due_window=timedelta(hours=24),
                    chunk_size=10_000,
                ),
                progress=report,
            )
            # Half the backlog is taxed: VAT inside the price, sales tax on top, or 0 %.
            await seed_tax_mix(conn, share=0.5)
            # Trials ending when due, paused periods, plan changes scheduled for the period end.
            mix = await seed_lifecycle_mix(
                conn,
                trial_share=args.trial_share,
                pause_share=args.pause_share,
                scheduled_change_share=args.change_share,
            )
        console.print(
            f"lifecycle mix: {mix.trials:,} trials, {mix.pauses:,} paused, "
            f"{mix.scheduled_changes:,} scheduled plan changes"
        )
        seconds = time.perf_counter() - started
        await pg.execute(conn, _VACUUM_SUBSCRIPTIONS)
    finally:
        await conn.close()
    return seconds, now


# ---------------------------------------------------------------- throughput variants


@dataclass
class Variant:
    name: str
    slice_size: int
    run: Callable[[int], Awaitable[tuple[int, float]]]  # slice -> (invoices, seconds)
    rates: list[float] = field(default_factory=list)


async def renewer_tasks(pool: pg.Pool, slice_size: int, tasks: int, batch: int) -> int:
    """Renew ``slice_size`` due subscriptions with ``tasks`` concurrent batches; each task
    reserves its rows before claiming them, so the tasks together never ask for more than the
    slice (a catch-up row creates several invoices: invoices are counted, rows reserved)."""
    reserved = 0
    done = 0

    async def worker() -> None:
        nonlocal reserved, done
        while (take := min(batch, slice_size - reserved)) > 0:
            reserved += take
            async with pg.transaction(pool) as conn:
                result = await renew_due_batch(conn, now=datetime.now(UTC), batch_size=take)
            if result.claimed == 0:
                return
            done += result.invoices_created

    await asyncio.gather(*(worker() for _ in range(tasks)))
    return done


async def pg_loop(
    conn: asyncpg.Connection,
    slice_size: int,
    batch: int,
    fn: Callable[..., Awaitable[int]],
) -> int:
    reserved = done = 0
    while (take := min(batch, slice_size - reserved)) > 0:
        reserved += take
        n = await fn(conn, now=datetime.now(UTC), batch_size=take)
        if n == 0:
            break
        done += n
    return done


async def throughput(urls: Urls, args: argparse.Namespace) -> list[Variant]:
    copy_seconds = await recreate(urls, WORK, TEMPLATE)
    console.print(f"fresh copy of the seeded database in {copy_seconds:.1f} s")
    settings = CoreSettings(database_url=urls.sa(WORK), process_name="bench.renewer")
    pool = await pg.create_pool(settings, max_size=5)
    conn = await asyncpg.connect(urls.pg(WORK))
    batch = args.batch_size

    async def timed(coro: Awaitable[int]) -> tuple[int, float]:
        started = time.perf_counter()
        n = await coro
        return n, time.perf_counter() - started

    variants = [
        Variant(
            "renewer: 1 batch in flight",
            args.slice,
            lambda s: timed(renewer_tasks(pool, s, 1, batch)),
        ),
        Variant(
            "one renewer: 2 batches in flight (default)",
            args.slice,
            lambda s: timed(renewer_tasks(pool, s, 2, batch)),
        ),
        Variant(
            "two renewers: 4 batches in flight",
            args.slice,
            lambda s: timed(renewer_tasks(pool, s, 4, batch)),
        ),
        Variant(
            f"floor: 1 SQL statement / batch of {batch}",
            args.slice,
            lambda s: timed(pg_loop(conn, s, batch, floor_batch)),
        ),
        Variant(
            "row by row (batch 500)",
            args.row_slice,
            lambda s: timed(pg_loop(conn, s, 500, row_by_row_batch)),
        ),
    ]
    # Warm-up (untimed): the copied database starts with a cold cache.
    await pg_loop(conn, args.slice, batch, floor_batch)
    await renewer_tasks(pool, args.slice, 2, batch)
    # The garbage collector as a renewer process runs it (runtime.process.serve): what exists
    # after start-up frozen, full collections rare. Without this the in-process variants pay
    # for full collections re-scanning every module and the seeding's objects, which the
    # renewer process does not.
    quiet_garbage_collector()
    total = args.reps * sum(v.slice_size for v in variants)
    try:
        with progress_bar() as bar:
            task = bar.add_task("throughput runs", total=total, rate="")
            for rep in range(args.reps):
                order = variants[rep % len(variants) :] + variants[: rep % len(variants)]
                for v in order:
                    bar.update(task, description=f"rep {rep + 1}/{args.reps}: {v.name}")
                    n, seconds = await v.run(v.slice_size)
                    if n < v.slice_size:
                        raise SystemExit(f"backlog exhausted during {v.name}; seed more")
                    v.rates.append(n / seconds)
                    bar.update(task, advance=n, rate=f"{n / seconds:,.0f} inv/s")
    finally:
        await conn.close()
        await pool.close()
    return variants


# ---------------------------------------------------------------- full backlog


async def drain_with_processes(urls: Urls, args: argparse.Namespace) -> tuple[float, int]:
    await recreate(urls, WORK, TEMPLATE)
    conn = await asyncpg.connect(urls.pg(WORK))
    total = await pg.fetchval(conn, _SUBSCRIPTIONS)
    env = os.environ.copy()
    env.update(
        {
            "BILLING_DATABASE_URL": urls.sa(WORK),
            "BILLING_RENEWER_HEALTH_PORT": "0",
            "BILLING_HEALTH_HOST": "127.0.0.1",
            "BILLING_RENEWER_BATCH_SIZE": str(args.batch_size),
            "BILLING_RENEWER_POLL_INTERVAL_SECONDS": "1",
            "BILLING_LOG_LEVEL": "WARNING",
            "PYTHONPATH": os.pathsep.join([str(ROOT / "libs"), str(ROOT)]),
        }
    )
    started = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "services.renewer"], cwd=ROOT, env=env, stderr=sys.stderr
        )
        for _ in range(args.processes)
    ]
    try:
        with progress_bar() as bar:
            task = bar.add_task(
                f"{total:,} due, {args.processes} renewer processes", total=total, rate=""
            )
            done = 0
            while done < total:
                await asyncio.sleep(0.5)
                done = await pg.fetchval(conn, _LAST_INVOICE)
                elapsed = time.perf_counter() - started
                bar.update(task, completed=done, rate=f"{done / elapsed:,.0f} inv/s")
                if any(p.poll() is not None for p in procs):
                    raise SystemExit("a renewer process died")
        seconds = time.perf_counter() - started
        due = await pg.fetchval(conn, _STILL_DUE)
        invoices = await pg.fetchval(conn, _INVOICES)
        if due or invoices != total:
            raise SystemExit(f"drain incomplete: due={due} invoices={invoices}")
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(timeout=30)
        await conn.close()
    return seconds, int(total)


# ---------------------------------------------------------------- claim cost vs table size


async def claim_scaling(urls: Urls, args: argparse.Namespace) -> list[tuple[int, float, bool]]:
    await recreate(urls, SCALE)
    await asyncio.to_thread(migrate.upgrade, urls.sa(SCALE))
    conn = await asyncpg.connect(urls.pg(SCALE))
    now = datetime.now(UTC)
    due = args.scale_due
    results: list[tuple[int, float, bool]] = []
    try:
        await seed_subscriptions(
            conn,
            SeedSpec(count=due, due_from=now - timedelta(hours=25), due_window=timedelta(hours=24)),
        )
        size = due
        with progress_bar() as bar:
            task = bar.add_task("claim cost vs table size", total=max(args.scale), rate="")
            for target in sorted(args.scale):
                while size < target:
                    chunk = min(500_000, target - size)
                    await seed_filler_sql(
                        conn,
                        count=chunk,
                        due_from=now + timedelta(days=1),
                        due_window=timedelta(days=27),
                        first_customer_id=size + 1,
                    )
                    size += chunk
                    bar.update(task, completed=size, rate=f"{size:,} rows")
                await pg.execute(conn, _VACUUM_SUBSCRIPTIONS)
                plan = await renewal_repo.explain_claim(conn, now=now, limit=1000)
                timings = []
                for _ in range(args.claim_reps):
                    trans = conn.transaction()
                    await trans.start()
                    started = time.perf_counter()
                    rows = await renewal_repo.claim_due(conn, now=now, limit=1000)
                    timings.append(time.perf_counter() - started)
                    await trans.rollback()
                    assert len(rows) == 1000
                results.append((size, statistics.median(timings), "idx_sub_due" in plan))
    finally:
        await conn.close()
    return results


# ---------------------------------------------------------------- report


def report(
    seed: tuple[int, float],
    variants: list[Variant],
    drain: tuple[float, int, int],
    scaling: list[tuple[int, float, bool]],
) -> dict[str, object]:
    med = {v.name: statistics.median(v.rates) for v in variants}
    table = Table(title="Renewer throughput (invoices/s, median of repetitions)")
    for col in ("variant", "slice", "runs (inv/s)", "median"):
        table.add_column(col)
    for v in variants:
        table.add_row(
            v.name,
            f"{v.slice_size:,}",
            ", ".join(f"{r:,.0f}" for r in v.rates),
            f"{med[v.name]:,.0f}",
        )
    console.print(table)
    one, two, four, floor, rbr = variants

    def paired(a: Variant, b: Variant) -> float:
        """Median over repetitions of a/b within the same repetition (adjacent in time, so
        both saw about the same load on the shared machine)."""
        return statistics.median(x / y for x, y in zip(a.rates, b.rates, strict=True))

    pairs = {
        "one_renewer_floor": paired(two, floor),
        "one_renewer_row_by_row": paired(two, rbr),
        "single_batch_loop_floor": paired(one, floor),
        "single_batch_loop_row_by_row": paired(one, rbr),
        "two_renewers_one_renewer": paired(four, two),
    }
    seconds, total, procs = drain
    ratios = Table(title="Ratios (median of per-repetition ratios) and targets")
    for col in ("measure", "value", "target"):
        ratios.add_column(col)
    ratios.add_row(
        "one renewer (2 in flight) / floor", f"{pairs['one_renewer_floor']:.2f}", ">= 0.8"
    )
    ratios.add_row(
        "one renewer (2 in flight) / row-by-row", f"{pairs['one_renewer_row_by_row']:.1f}", ">= 5"
    )
    ratios.add_row("1 batch in flight / floor", f"{pairs['single_batch_loop_floor']:.2f}", "")
    ratios.add_row(
        "1 batch in flight / row-by-row", f"{pairs['single_batch_loop_row_by_row']:.1f}", ""
    )
    ratios.add_row("two renewers / one renewer", f"{pairs['two_renewers_one_renewer']:.2f}", "")
    ratios.add_row(
        f"{total:,} backlog, {procs} processes",
        f"{seconds:.0f} s ({total / seconds:,.0f} inv/s)",
        "< 180 s",
    )
    ratios.add_row("seeding", f"{seed[1]:.0f} s ({seed[0] / seed[1]:,.0f} rows/s)", "")
    console.print(ratios)
    scale = Table(title="Cost of one claim (1 000 due rows, FOR UPDATE SKIP LOCKED)")
    for col in ("subscriptions in table", "median claim (ms)", "vs smallest", "uses idx_sub_due"):
        scale.add_column(col)
    base = scaling[0][1]
    for size, t, uses_index in scaling:
        scale.add_row(f"{size:,}", f"{t * 1000:.1f}", f"{t / base:.2f}x", str(uses_index))
    console.print(scale)
    return {
        "medians_invoices_per_s": med,
        "runs": {v.name: v.rates for v in variants},
        "paired_ratios": pairs,
        "drain": {"subscriptions": total, "processes": procs, "seconds": seconds},
        "seed": {"rows": seed[0], "seconds": seed[1]},
        "claim_scaling": [
            {"subscriptions": s, "median_ms": t * 1000, "uses_idx_sub_due": u}
            for s, t, u in scaling
        ],
    }


async def main(args: argparse.Namespace) -> None:
    urls = Urls(CoreSettings().database_url)
    started = time.perf_counter()
    try:
        seed_seconds, _ = await seed_template(urls, args)
        variants = await throughput(urls, args)
        drain_seconds, drained = await drain_with_processes(urls, args)
        scaling = await claim_scaling(urls, args)
        summary = report(
            (args.subscriptions, seed_seconds),
            variants,
            (drain_seconds, drained, args.processes),
            scaling,
        )
        summary["bench_seconds"] = time.perf_counter() - started
        console.print(f"benchmark took {summary['bench_seconds']:.0f} s")
        if args.json:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(summary, indent=2))
    finally:
        if not args.keep:
            await drop(urls, WORK, TEMPLATE, SCALE)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--subscriptions", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--slice", type=int, default=12_000, help="invoices per timed run")
    parser.add_argument("--row-slice", type=int, default=3_000, help="same, row by row")
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--processes", type=int, default=2, help="renewers for the drain")
    parser.add_argument(
        "--scale",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[50_000, 500_000, 5_000_000],
    )
    parser.add_argument("--scale-due", type=int, default=10_000)
    parser.add_argument("--claim-reps", type=int, default=15)
    parser.add_argument("--trial-share", type=float, default=0.05, help="in a trial ending due")
    parser.add_argument("--pause-share", type=float, default=0.03, help="paused")
    parser.add_argument(
        "--change-share", type=float, default=0.03, help="a plan change scheduled for period end"
    )
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--keep", action="store_true", help="keep the benchmark databases")
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
