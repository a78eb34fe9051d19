"""The headline run: a whole 1st of the month, every process running as ``make up`` runs them.

N subscriptions (100 000 by default) come due at the same instant. The API (receiving the
gateway's webhooks), the renewer, two collectors, the relay and the gateway simulator (200
calls/s, the development profile's latencies, declines and timeouts) run together under honcho,
with the Procfile and ``deploy/dev.env``; only the database, ports, topic and rate-limit key are
the benchmark's own. The floor is physical: the gateway calls made ÷ the limit, the fastest any
system could make them. Two drain times are reported: the first pass (every invoice due at the
start has had its first call: nothing due is left) and the full settlement (no OPEN invoice
left), which also waits out the profile's retry delays (20 s after a timeout, 10-30 s dunning).

Printed (and written as JSON with ``--json``): drain time ÷ floor, 429s, the busiest rolling
second at the gateway, webhooks sent / recorded / lost, each receipt's delay from payment to
sending (the run goes on until every payment's receipt is sent), CPU time per charge of each
process, and the run's steady state (:mod:`bench.run_figures`): each process's resident memory
after warm-up and at the end, the outbox lag's p99 per 10-s window, and each large table's dead
rows against autovacuum's trigger once the processes have stopped (with the longest transaction
seen holding vacuum back). A plot of calls/s, the backlogs, the outbox lag and the resident
memory goes to ``--plot``.

    make bench-first-of-month SUBSCRIPTIONS=20000   # or: python -m bench.first_of_month

``--total-subscriptions`` makes the table that large (the others come due over the following
four weeks), ``--mix`` seeds the mix of taxes, trials, pauses, scheduled plan changes and
coupons, and ``--seed-only`` seeds, prints the seconds and stops, leaving the database for
``billing check`` and ``bench.explain_at_scale``:

    python -m bench.first_of_month --subscriptions 1000000 --total-subscriptions 5000000 \
        --mix --seed-only
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import cast

import httpx

from bench import run_figures
from bench.procfs import cpu_seconds, process_pids, rss_bytes
from billing_core.db import migrate, pg
from billing_core.seeding import SeedMix
from billing_core.settings import CoreSettings
from services.ops.demo import EMAIL_DOMAIN
from services.ops.demo_plot import BACKLOGS, Panel, plot
from services.ops.seed import seed
from tests.support.db import recreate_database
from tests.support.infra import start_services
from tests.support.system import PROCESSES, System

_BACKLOG = pg.Statement(
    """
    SELECT
      (SELECT count(*) FROM subscription WHERE status = 'ACTIVE'
         AND current_period_end <= now()) AS due_subscriptions,
      (SELECT count(*) FROM invoice WHERE status = 'OPEN') AS open_invoices,
      (SELECT count(*) FROM invoice WHERE status = 'OPEN'
         AND next_attempt_at <= now()) AS due_invoices,
      (SELECT count(*) FROM outbox_event WHERE published_at IS NULL) AS unpublished
    """
)


def metric(body: str, name: str, **labels: str) -> float:
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = re.escape(name) + (r"\{" + re.escape(wanted) + r"\}" if labels else "") + r" (\S+)"
    found = re.search(r"^" + pattern + r"$", body, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


@dataclass
class Sample:
    t: float
    due_subscriptions: int
    open_invoices: int
    due_invoices: int
    unpublished: int
    webhook_backlog: float

    def values(self) -> dict[str, float]:
        return {k: v for k, v in asdict(self).items() if k != "t"}


def sample_rss(pids: dict[str, int], t: float, rss: dict[str, list[tuple[float, int]]]) -> None:
    for name, pid in pids.items():
        try:
            rss[name].append((t, rss_bytes(pid)))
        except OSError:  # the process is gone: its series ends (its CPU read will say so)
            continue


async def backlog(pool: pg.Pool) -> dict[str, int]:
    async with pool.acquire() as conn:
        row = await pg.fetchrow(conn, _BACKLOG)
    assert row is not None
    return {k: int(v) for k, v in row.items()}


async def run(
    args: argparse.Namespace,
) -> tuple[dict[str, object], run_figures.Health | None]:
    services = start_services()
    name = args.database
    await recreate_database(services.admin_database_url, name)
    url = services.database_url(name)
    await asyncio.to_thread(migrate.upgrade, url)
    due_at = datetime.now(UTC) + timedelta(seconds=args.lead_s)
    total = max(args.subscriptions, args.total_subscriptions or 0)
    print(
        f"seeding {total} subscriptions, {args.subscriptions} due at {due_at:%H:%M:%S} UTC"
        f"{' (the seeded mix)' if args.mix else ''} ..."
    )
    seeding_started = time.monotonic()
    await seed(
        url,
        count=args.subscriptions,
        due_from=due_at,
        due_window=timedelta(seconds=1),
        first_customer_id=1_000_000,
        random_seed=1,
        credit_share=0.0,
        cancel_share=0.0,
        show_progress=False,
        not_due=total - args.subscriptions,
        mix=SeedMix() if args.mix else None,
        email_domain=EMAIL_DOMAIN,
    )
    seed_s = time.monotonic() - seeding_started
    print(f"seeded in {seed_s:.1f} s", flush=True)
    if args.seed_only:
        seeded: dict[str, object] = {
            "database": name,
            "subscriptions": total,
            "due": args.subscriptions,
            "due_at": due_at.isoformat(),
            "seed_s": seed_s,
        }
        return seeded, None
    log_dir = Path(tempfile.mkdtemp(prefix="bench-first-of-month-"))
    system = System(
        database_url=url,
        redis_url=services.redis_url,
        kafka_bootstrap=services.kafka_bootstrap,
        log_dir=log_dir,
        extra_env={"BILLING_GATEWAY_SIM_DECLINE_RATE": str(args.decline_rate)},
    )
    system.start()
    pool = await pg.create_pool(
        CoreSettings(database_url=url, process_name="bench.first_of_month"), max_size=2
    )
    client = httpx.AsyncClient(timeout=30)
    samples: list[Sample] = []
    try:
        found = process_pids(system)
        missing = set(PROCESSES) - set(found)
        if missing:
            raise RuntimeError(f"could not find the processes {sorted(missing)}")
        pids = {n: found[n] for n in PROCESSES}
        rss: dict[str, list[tuple[float, int]]] = {n: [] for n in pids}
        wait = (due_at - datetime.now(UTC)).total_seconds()
        if wait < 0:
            raise RuntimeError(f"the system took too long to start ({-wait:.0f} s after due)")
        await asyncio.sleep(wait)
        cpu_before = {n: cpu_seconds(p) for n, p in pids.items()}
        started = time.monotonic()
        drained_at: float | None = None
        first_pass_at: float | None = None
        held: run_figures.HeldTransaction | None = None
        printed_at = -10.0
        while time.monotonic() - started < args.timeout_s:
            counts = await backlog(pool)
            body = (await client.get(f"{system.gateway_url}/metrics")).text
            sample = Sample(
                time.monotonic() - started,
                counts["due_subscriptions"],
                counts["open_invoices"],
                counts["due_invoices"],
                counts["unpublished"],
                metric(body, "billing_gateway_sim_webhook_backlog_deliveries"),
            )
            samples.append(sample)
            sample_rss(pids, sample.t, rss)
            async with pool.acquire() as conn:
                held = run_figures.longest(held, await run_figures.read_oldest_transaction(conn))
            if sample.t >= printed_at + 10:
                printed_at = sample.t
                print(
                    f"t={sample.t:5.0f}s due={sample.due_subscriptions} "
                    f"open={sample.open_invoices} unpublished={sample.unpublished} "
                    f"webhooks={sample.webhook_backlog:.0f}",
                    flush=True,
                )
            if (
                first_pass_at is None
                and sample.t > 5
                and sample.due_subscriptions == 0
                and sample.due_invoices == 0
            ):
                first_pass_at = sample.t
            settled = sample.due_subscriptions == 0 and sample.open_invoices == 0
            if settled and drained_at is None and sample.t > 5:
                drained_at = sample.t
            if drained_at is not None and sample.unpublished == 0 and sample.webhook_backlog == 0:
                async with pool.acquire() as conn:
                    receipts = await run_figures.read_receipts(conn, due_at)
                if receipts.all_sent:
                    break
            await asyncio.sleep(args.sample_s)
        finished = time.monotonic() - started
        cpu_after = {n: cpu_seconds(p) for n, p in pids.items()}
        summary = (await client.get(f"{system.gateway_url}/v1/ledger/summary", timeout=120)).json()
        per_second = (
            await client.get(f"{system.gateway_url}/v1/ledger/calls-per-second", timeout=120)
        ).json()
        body = (await client.get(f"{system.gateway_url}/metrics")).text
        async with pool.acquire() as conn:
            lag = await run_figures.read_outbox_lag(conn, due_at)
            webhooks = await run_figures.read_webhooks(conn, summary)
            receipts = await run_figures.read_receipts(conn, due_at)
    finally:
        await client.aclose()
        stopped_cleanly = system.stop()
        # Read once every process has stopped and so reported its table statistics.
        try:
            async with pool.acquire() as conn:
                tables = await run_figures.read_tables(conn)
        finally:
            await pool.close()
    health = run_figures.Health(
        rss={n: run_figures.rss_growth(series) for n, series in rss.items() if series},
        lag=lag,
        webhooks=webhooks,
        receipts=receipts,
        tables=tables,
        longest_transaction=held,
    )

    calls = int(summary["calls"])
    charges = int(summary["charges_succeeded"]) + int(summary["declines"])
    floor_s = calls / args.limit
    cpu = {n: cpu_after[n] - cpu_before[n] for n in pids}
    deliveries = "billing_gateway_sim_webhook_deliveries_total"
    result: dict[str, object] = {
        "subscriptions": args.subscriptions,
        "total_subscriptions": total,
        "seed_s": seed_s,
        "gateway_calls": calls,
        "charges": charges,
        "drained": drained_at is not None,
        "first_pass_s": first_pass_at,
        "first_pass_over_floor": None if first_pass_at is None else first_pass_at / floor_s,
        "drain_s": drained_at,
        "floor_s": floor_s,
        "drain_over_floor": None if drained_at is None else drained_at / floor_s,
        "settled_s": finished,
        "rate_limited_429": summary["rate_limited_429"],
        "busiest_rolling_second": summary["max_arrivals_in_any_rolling_second"],
        "duplicate_success_invoices": len(summary["duplicate_success_invoices"]),
        "webhook_deliveries": {
            r: metric(body, deliveries, result=r)
            for r in ("delivered", "retried", "failed", "dropped")
        },
        **health.as_json(),
        "cpu_s": cpu,
        "cpu_ms_per_charge": {n: 1000 * s / max(1, charges) for n, s in cpu.items()},
        "cpu_ms_per_charge_total": 1000 * sum(cpu.values()) / max(1, charges),
        # The target's sum: the processes that take a charge from due to recorded and published
        # (the notifier's receipts, rendered as PDFs, are e-mail work that trails the charges).
        "cpu_ms_per_charge_pipeline": 1000
        * sum(s for n, s in cpu.items() if n != "notifier")
        / max(1, charges),
        "stopped_cleanly": stopped_cleanly,
        "logs": str(system.log_path),
    }
    plot(
        [(s.t, s.values()) for s in samples],
        per_second,
        args.limit,
        Path(args.plot),
        backlogs=(*BACKLOGS, "webhook_backlog"),
        panels=panels(lag, rss),
        xlabel="seconds since the subscriptions came due",
    )
    return result, health


def panels(lag: run_figures.OutboxLag, rss: dict[str, list[tuple[float, int]]]) -> list[Panel]:
    return [
        Panel(
            f"Outbox lag: p99 per {run_figures.LAG_WINDOW_S}-s window of publication",
            "seconds",
            {"p99": [(float(t), p99) for t, p99 in lag.p99_by_window.items()]},
            target=run_figures.LAG_P99_TARGET_S,
            target_label=f"target ({run_figures.LAG_P99_TARGET_S:g} s)",
        ),
        Panel(
            "Resident memory per process",
            "MiB",
            {n: [(t, b / run_figures.MIB) for t, b in series] for n, series in rss.items()},
        ),
    ]


FIRST_PASS_TARGET = 1.05
CPU_MS_PER_CHARGE_TARGET = 4.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subscriptions", type=int, default=100_000, help="Due at once.")
    parser.add_argument(
        "--total-subscriptions",
        type=int,
        default=0,
        help="The table's size: the rest come due over the following four weeks.",
    )
    parser.add_argument(
        "--mix",
        action="store_true",
        help="Tax, trial, pause, scheduled plan change and coupon shares (seeding.SeedMix).",
    )
    parser.add_argument(
        "--seed-only",
        action="store_true",
        help="Seed (and analyze), report the seconds, stop; the database stays.",
    )
    parser.add_argument("--database", default="billing_bench_first_of_month", help="Recreated.")
    parser.add_argument("--limit", type=int, default=200, help="The gateway's calls/s.")
    parser.add_argument("--decline-rate", type=float, default=0.03)
    parser.add_argument(
        "--lead-s",
        type=float,
        default=60,
        help="Due this long after the seeding starts (more than the seeding and start-up take).",
    )
    parser.add_argument("--timeout-s", type=float, default=1800)
    parser.add_argument(
        "--sample-s", type=float, default=1, help="Seconds between samples of the backlogs."
    )
    parser.add_argument("--plot", default="bench/out/first_of_month.png", help="PNG or SVG.")
    parser.add_argument("--json", default="", help="Also write the figures here.")
    args = parser.parse_args()
    result, health = asyncio.run(run(args))
    print(json.dumps(result, indent=2, default=str))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2, default=str))
    if health is None:  # --seed-only
        return
    first_pass = cast("float | None", result["first_pass_over_floor"])
    cpu_ms = cast(float, result["cpu_ms_per_charge_pipeline"])
    verdicts = [
        verdict(
            f"first pass {first_pass or 0:.2f}x the floor (<= {FIRST_PASS_TARGET})",
            first_pass is not None and first_pass <= FIRST_PASS_TARGET,
        ),
        verdict(f"{result['rate_limited_429']} x 429 (0)", result["rate_limited_429"] == 0),
        verdict(
            f"busiest rolling second {result['busiest_rolling_second']} calls (<= {args.limit})",
            cast(int, result["busiest_rolling_second"]) <= args.limit,
        ),
        verdict(
            f"{result['duplicate_success_invoices']} invoices charged twice (0)",
            result["duplicate_success_invoices"] == 0,
        ),
        verdict(
            f"{cpu_ms:.2f} ms CPU per charge, every process but the notifier "
            f"(<= {CPU_MS_PER_CHARGE_TARGET})",
            cpu_ms <= CPU_MS_PER_CHARGE_TARGET,
        ),
        verdict("drained", bool(result["drained"])),
    ]
    for name, ms in cast("dict[str, float]", result["cpu_ms_per_charge"]).items():
        info(f"{ms:.2f} ms CPU per charge: {CPU_LABELS.get(name, name)}")
    for what, ok in health.lines():
        if ok is None:
            info(what)
        else:
            verdicts.append(verdict(what, ok))
    raise SystemExit(0 if all(verdicts) else 1)


CPU_LABELS = {"gateway": "gateway (the simulator, standing in for the payment gateway)"}


def verdict(what: str, ok: bool) -> bool:
    print(f"  {'PASS' if ok else 'FAIL'}  {what}")
    return ok


def info(what: str) -> None:
    print(f"        {what}")


if __name__ == "__main__":
    main()
