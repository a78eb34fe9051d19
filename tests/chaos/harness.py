"""Fault-injection harness: the real processes, real servers, faults, then the invariant checker.

It starts its own PostgreSQL, Redis and Kafka (scripts/infra.sh in a temporary folder, on free
ports), the gateway simulator (timeouts, 5xx, declines, duplicated, reordered and lost
webhooks), the API (webhooks), and two replicas of each worker. Subscriptions come due during
the run; dunning delays are seconds instead of days so dunning runs too. Meanwhile it kill -9s a
random worker replica every few seconds (and restarts it), stops Redis, stops Kafka and restarts
PostgreSQL, while customers cancel (now or at the period's end), change plans (up and down, now
or at the period's end, monthly to yearly too) and pause collection (resuming by itself seconds
later, or on request) through the API process, at most a few dozen requests at once. When the
system has drained, the invariant checker must find no violation. A deadline bounds the whole
run: reached, the run stops where it is, checks the state there is and reports what it did and
what was left, as a failure.

Full run:   python -m tests.chaos.harness  (≥ 20 000 subscriptions, ≥ 20 kills, 20 s outages)
CI version: tests/chaos/test_chaos.py      (2 000 subscriptions, 5 kills, shorter outages)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from rich.console import Console
from rich.table import Table
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from billing_core.db import migrate, pg
from billing_core.domain.period import Interval, boundary
from billing_core.invariants.checker import check_all
from billing_core.invariants.ledger import fetch_ledger
from billing_core.invariants.report import Report
from billing_core.invariants.topic import read_topic
from billing_core.repo import api_clients
from tests.support.factories import ensure_customers
from tests.support.processes import ROOT, Proc, free_port, start

WORKERS = ("renewer", "collector", "relay")
WEBHOOK_SECRET = "chaos-webhook-secret"


@dataclass
class ChaosConfig:
    subscriptions: int = 20_000
    kills: int = 20
    kill_interval_s: float = 3.0
    outage_s: float = 20.0
    due_window_s: float = 30.0
    hard_decliner_share: float = 0.01
    # Share of the subscriptions whose customer acts through the API during the run (a cancel,
    # now or at period end, an upgrade or a downgrade, a change to yearly billing now or at
    # period end, a pause or a resume; some do two).
    customer_action_share: float = 0.08
    # Share of the subscriptions seeded in a free trial ending in the due window: the renewer
    # writes its SubscriptionTrialWillEnd, then invoices period 0 when it ends.
    trial_share: float = 0.1
    # Customer actions in flight at once; the API client opens as many connections, no more.
    api_concurrency: int = 32
    # The whole run, from starting the servers until drained. When it passes, the run stops where
    # it is and reports what it did, what was left and the checker's verdict on the state there is.
    deadline_s: float = 1800.0
    # Stopping the processes, reading the evidence and checking it, after the run or its deadline.
    report_timeout_s: float = 600.0
    seed: int = 2026


FAULTS = ("kill -9", "redis outage", "kafka outage", "postgres restart")


@dataclass
class Progress:
    """What the run has done so far: its report's, whether it finishes or its deadline stops it."""

    stage: str = "starting the servers"
    faults: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FAULTS, 0))
    problems: list[str] = field(default_factory=list)
    planned_actions: int = 0
    # Customer actions through the API: action -> final HTTP status (or "error") -> count.
    answers: dict[str, dict[str, int]] = field(default_factory=dict)
    # Servers a fault has stopped and not started again yet.
    down: set[str] = field(default_factory=set)

    def answered(self) -> int:
        return sum(n for by_status in self.answers.values() for n in by_status.values())


@dataclass
class Outcome:
    report: Report
    faults: dict[str, int]
    figures: dict[str, int]
    problems: list[str] = field(default_factory=list)
    # Customer actions through the API: action -> final HTTP status (or "error") -> count.
    customer_answers: dict[str, dict[str, int]] = field(default_factory=dict)
    # What the deadline left undone (:func:`left_undone`); empty when the run finished.
    left: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.report.ok and not self.problems


async def within_deadline(work: Awaitable[None], seconds: float, progress: Progress) -> bool:
    """Run ``work`` for at most ``seconds``: True when it finished; else it is cancelled where it
    is, or has failed, and the problem says so and names the stage it had reached."""
    try:
        async with asyncio.timeout(seconds) as limit:
            await work
    except Exception as exc:  # a failed stage ends in the report too
        if limit.expired():
            progress.problems.append(f"deadline of {seconds:g} s reached while {progress.stage}")
        else:
            first_line = next(iter(str(exc).splitlines()), "")
            progress.problems.append(f"{type(exc).__name__} while {progress.stage}: {first_line}")
        return False
    return True


def left_undone(progress: Progress, config: ChaosConfig, state: dict[str, int]) -> dict[str, int]:
    """What a run stopped by its deadline did not get to: faults not injected, customer actions
    not answered, and what had not drained (``state``, from :func:`counts`)."""
    planned = {**dict.fromkeys(FAULTS, 1), "kill -9": config.kills}
    left = {f"{fault} not made": n - progress.faults[fault] for fault, n in planned.items()}
    left["customer actions not answered"] = progress.planned_actions - progress.answered()
    left["due subscriptions"] = state.get("due_subscriptions", 0)
    left["open invoices"] = state.get("open_invoices", 0)
    left["unpublished events"] = state.get("unpublished", 0)
    return {what: n for what, n in left.items() if n}


class Infra:
    """A private PostgreSQL + Redis + Kafka under a temporary folder."""

    def __init__(self, folder: Path) -> None:
        self.env = {
            "BILLING_VAR": str(folder / "var"),
            "BILLING_PG_PORT": str(free_port()),
            "BILLING_REDIS_PORT": str(free_port()),
            "BILLING_KAFKA_PORT": str(free_port()),
            "BILLING_KAFKA_CONTROLLER_PORT": str(free_port()),
        }

    def run(self, *args: str) -> None:
        subprocess.run(
            [str(ROOT / "scripts" / "infra.sh"), *args],
            env={**os.environ, **self.env},
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def urls(self) -> dict[str, str]:
        return {
            "BILLING_DATABASE_URL": (
                f"postgresql+asyncpg://billing@127.0.0.1:{self.env['BILLING_PG_PORT']}/billing"
            ),
            "BILLING_REDIS_URL": f"redis://127.0.0.1:{self.env['BILLING_REDIS_PORT']}/0",
            "BILLING_KAFKA_BOOTSTRAP": f"127.0.0.1:{self.env['BILLING_KAFKA_PORT']}",
        }


class System:
    """The processes of one run; workers can be killed and restarted by name."""

    def __init__(self, base_env: dict[str, str], logs: Path) -> None:
        self.base_env = base_env
        self.logs = logs
        self.procs: dict[str, Proc] = {}
        self.envs: dict[str, tuple[str, dict[str, str], str | None]] = {}
        self.restarts = 0

    def start(self, name: str, module: str, env: dict[str, str], ready: str | None) -> Proc:
        self.envs[name] = (module, env, ready)
        proc = start(name, module, {**self.base_env, **env}, self.logs, ready_url=ready, timeout=60)
        self.procs[name] = proc
        return proc

    def restart(self, name: str) -> None:
        module, env, ready = self.envs[name]
        self.procs[name] = start(
            name, module, {**self.base_env, **env}, self.logs, ready_url=ready, timeout=60
        )
        self.restarts += 1

    def workers(self) -> list[str]:
        return [n for n in self.procs if n.split("-")[0] in WORKERS]

    def dead(self) -> list[str]:
        return [n for n, p in self.procs.items() if not p.alive()]

    def stop_all(self, keep: tuple[str, ...] = ()) -> dict[str, int]:
        codes = {}
        for name, proc in self.procs.items():
            if name in keep:
                continue
            try:
                codes[name] = proc.terminate(timeout=60)
            except AssertionError:
                codes[name] = -9
        return codes


async def seed(engine: AsyncEngine, config: ChaosConfig, now: datetime) -> list[int]:
    """Subscriptions whose period 0 was invoiced and paid, coming due over the due window.

    Anchors are chosen so that the drift-free boundary of period 1 falls in the window, so the
    renewer's own period arithmetic continues the history exactly.
    """
    rng = random.Random(config.seed)
    zones = ["UTC", "Europe/Paris", "America/New_York", "Asia/Tokyo"]
    rows: list[dict[str, Any]] = []
    trials: list[dict[str, Any]] = []
    trial_every = round(1 / config.trial_share) if config.trial_share > 0 else 0
    for i in range(config.subscriptions):
        tz = zones[i % len(zones)]
        due = now + timedelta(seconds=rng.uniform(0, config.due_window_s))
        if trial_every and i % trial_every == 0:
            # In a trial ending at ``due`` (its anchor): nothing invoiced yet.
            trials.append({"customer": 100_000 + i, "tz": tz, "end": due})
            continue
        anchor = due - timedelta(days=31)
        end = boundary(anchor, Interval.MONTH, 1, tz)
        for _ in range(3):  # months differ in length: move the anchor so period 1 starts at due
            anchor += due - end
            end = boundary(anchor, Interval.MONTH, 1, tz)
        rows.append({"customer": 100_000 + i, "tz": tz, "anchor": anchor, "end": end})
    driver = await asyncpg.connect(pg.asyncpg_dsn(engine.url.render_as_string(False)))
    try:
        async with driver.transaction():
            await ensure_customers(driver, [r["customer"] for r in (*rows, *trials)])
    finally:
        await driver.close()
    async with engine.begin() as conn:
        plan = (
            await conn.execute(text("SELECT id, price_amount FROM plan WHERE code = 'PRO_MONTHLY'"))
        ).one()
        result = await conn.execute(
            text(
                """
                WITH s AS (
                    INSERT INTO subscription (customer_id, plan_id, status, time_zone,
                        billing_anchor, period_index, current_period_start, current_period_end)
                    SELECT c, :plan, 'ACTIVE', z, a, 0, a, e
                    FROM unnest(CAST(:customers AS bigint[]), CAST(:zones AS text[]),
                                CAST(:anchors AS timestamptz[]), CAST(:ends AS timestamptz[]))
                         AS t(c, z, a, e)
                    RETURNING id, customer_id, current_period_start, current_period_end
                )
                , inv AS (
                    INSERT INTO invoice (subscription_id, customer_id, kind, period_index,
                        period_start, period_end, subtotal, amount, currency, status, paid_at,
                        closed_at)
                    SELECT id, customer_id, 'RENEWAL', 0, current_period_start,
                           current_period_end, :price, :price, 'EUR', 'PAID',
                           current_period_start, current_period_start
                    FROM s RETURNING id, customer_id, amount, period_start, period_end
                ), line AS (
                    INSERT INTO invoice_line (invoice_id, line_no, kind, description, quantity,
                        unit_amount, amount, period_start, period_end)
                    SELECT id, 1, 'PLAN_PERIOD', 'Plan PRO_MONTHLY', 1, amount, amount,
                           period_start, period_end
                    FROM inv
                )
                SELECT customer_id FROM inv
                """
            ),
            {
                "plan": plan.id,
                "price": plan.price_amount,
                "customers": [r["customer"] for r in rows],
                "zones": [r["tz"] for r in rows],
                "anchors": [r["anchor"] for r in rows],
                "ends": [r["end"] for r in rows],
            },
        )
        customers = [int(c) for (c,) in result]
        await conn.execute(
            text(
                """
                INSERT INTO subscription (customer_id, plan_id, status, time_zone,
                    billing_anchor, period_index, current_period_start, current_period_end,
                    trial_end)
                SELECT c, :plan, 'TRIALING', z, e, 0, e - interval '14 days', e, e
                FROM unnest(CAST(:customers AS bigint[]), CAST(:zones AS text[]),
                            CAST(:ends AS timestamptz[])) AS t(c, z, e)
                """
            ),
            {
                "plan": plan.id,
                "customers": [r["customer"] for r in trials],
                "zones": [r["tz"] for r in trials],
                "ends": [r["end"] for r in trials],
            },
        )
    rng.shuffle(customers)
    return customers[: int(len(customers) * config.hard_decliner_share)]


ACTIONS = (
    "cancel now",
    "cancel at period end",
    "upgrade",
    "downgrade",
    "downgrade at period end",
    "to yearly",
    "to yearly at period end",
    "pause",
    "pause as draft",
    "resume",
)
# A pause resumes by itself this long after it is asked for (the renewer does it), so the run
# still drains: the OPEN invoices it holds are collected once it resumes.
PAUSE_SECONDS = (1.0, 6.0)


async def subscription_due_times(engine: AsyncEngine) -> dict[int, float]:
    """When each seeded subscription comes due in the run (the end of its seeded period 0 or of
    its trial), as a unix time. Read from what renewals leave unchanged: the renewers already
    run, and a subscription they renewed before this read has its current period end a month
    later, so an action planned from it would wait a month."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                """
                SELECT s.id, coalesce(s.trial_end, i.period_end) FROM subscription s
                LEFT JOIN invoice i ON i.subscription_id = s.id AND i.kind = 'RENEWAL'
                                   AND i.period_index = 0 AND s.trial_end IS NULL
                """
            )
        )
        return {int(i): end.timestamp() for i, end in rows}


async def api_key(engine: AsyncEngine) -> str:
    driver = await asyncpg.connect(pg.asyncpg_dsn(engine.url.render_as_string(False)))
    try:
        async with driver.transaction():
            _client, key = await api_clients.create(
                driver, name="chaos", now=datetime.now(UTC), rate_limit_per_minute=10_000_000
            )
    finally:
        await driver.close()
    return key


def plan_customer_actions(
    due_times: dict[int, float], start: float, config: ChaosConfig, rng: random.Random
) -> list[tuple[float, int, str]]:
    """(unix time, subscription, action), sorted. Half of them land right around the
    subscription's renewal (its invoice is created and charged then: a cancel may meet the
    call in flight, a plan change the renewal); the others anywhere over twice the due window
    after ``start``, during the faults too."""
    chosen = rng.sample(sorted(due_times), int(len(due_times) * config.customer_action_share))
    actions: list[tuple[float, int, str]] = []
    for subscription in chosen:
        if rng.random() < 0.5:
            at = due_times[subscription] + rng.uniform(-0.5, 2.0)
        else:
            at = start + rng.uniform(0, 2 * config.due_window_s)
        actions.append((at, subscription, rng.choice(ACTIONS)))
        if rng.random() < 0.3:  # a second one later: a plan change then a cancel, and so on
            actions.append((at + rng.uniform(0.5, 5), subscription, rng.choice(ACTIONS)))
    return sorted(actions)


async def act(client: httpx.AsyncClient, subscription: int, action: str) -> str:
    """One customer action through the API; retried with the same Idempotency-Key while the
    API cannot answer (a PostgreSQL restart). "200", a refusal's status and title, or
    ``error`` when the API never answered."""
    body: dict[str, object]
    if action.startswith("cancel"):
        path = f"/subscriptions/{subscription}/cancel"
        body = {"atPeriodEnd": action == "cancel at period end"}
    elif action.startswith("pause"):
        path = f"/subscriptions/{subscription}/pause"
        resumes_at = datetime.now(UTC) + timedelta(seconds=random.uniform(*PAUSE_SECONDS))
        behavior = "keep_as_draft" if action == "pause as draft" else "void"
        body = {"behavior": behavior, "resumesAt": resumes_at.isoformat()}
    elif action == "resume":
        path = f"/subscriptions/{subscription}/resume"
        body = {}
    else:
        path = f"/subscriptions/{subscription}/change-plan"
        plans = {"upgrade": "BUSINESS_MONTHLY", "to yearly": "PRO_YEARLY"}
        plan = plans.get(action.removesuffix(" at period end"), "BASIC_MONTHLY")
        body = {"planCode": plan}
        if action.endswith("at period end"):
            body["effective"] = "period_end"
    headers = {"Idempotency-Key": str(uuid.uuid4())}
    for _ in range(30):
        try:
            response = await client.post(path, json=body, headers=headers)
        except httpx.HTTPError:
            await asyncio.sleep(1)
            continue
        if response.status_code == 200:
            return "200"
        if response.status_code < 500:  # a refusal: which one (e.g. 409 already canceled)
            return f"{response.status_code} {_title(response)}"
        await asyncio.sleep(1)
    return "error"


def _title(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return ""
    return str(body.get("title", "")) if isinstance(body, dict) else ""


async def customers(
    api_url: str,
    key: str,
    actions: list[tuple[float, int, str]],
    progress: Progress,
    concurrency: int,
) -> None:
    """Issue the planned actions at their times, at most ``concurrency`` at once over as many
    connections (a slow answer delays only the actions waiting for a free one)."""
    slots = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    headers = {"Authorization": f"Bearer {key}"}

    async def one(client: httpx.AsyncClient, subscription: int, action: str) -> None:
        async with slots:
            status = await act(client, subscription, action)
        by_status = progress.answers.setdefault(action, {})
        by_status[status] = by_status.get(status, 0) + 1

    async with (
        httpx.AsyncClient(base_url=api_url, timeout=10, limits=limits, headers=headers) as client,
        asyncio.TaskGroup() as tasks,
    ):
        for at, subscription, action in actions:
            await asyncio.sleep(max(0.0, at - time.time()))
            tasks.create_task(one(client, subscription, action))


def customer_figures(answers: dict[str, dict[str, int]], problems: list[str]) -> dict[str, int]:
    """Per action: answered 200, and anything else; an action never answered is a problem."""
    figures: dict[str, int] = {}
    for action, by_status in sorted(answers.items()):
        figures[f"API {action}: 200"] = by_status.get("200", 0)
        figures[f"API {action}: other answers"] = sum(
            n for status, n in by_status.items() if status != "200"
        )
    if any("error" in by_status for by_status in answers.values()):
        problems.append(f"customer actions the API never answered: {answers}")
    return figures


async def counts(engine: AsyncEngine) -> dict[str, int]:
    async with engine.connect() as conn:
        row = (
            (
                await conn.execute(
                    text(
                        """
                    SELECT
                      (SELECT count(*) FROM subscription
                         WHERE status IN ('ACTIVE', 'TRIALING')
                         AND current_period_end <= now()) AS due_subscriptions,
                      (SELECT count(*) FROM subscription WHERE trial_end IS NOT NULL)
                         AS trials,
                      (SELECT count(*) FROM outbox_event
                         WHERE event_type = 'SubscriptionTrialEnded') AS trial_ends,
                      (SELECT count(*) FROM invoice WHERE status = 'OPEN') AS open_invoices,
                      (SELECT count(*) FROM invoice) AS invoices,
                      (SELECT count(*) FROM invoice WHERE status = 'PAID') AS paid,
                      (SELECT count(*) FROM invoice WHERE status = 'FAILED') AS failed,
                      (SELECT count(*) FROM subscription WHERE status = 'CANCELED') AS canceled,
                      (SELECT count(*) FROM outbox_event) AS events,
                      (SELECT count(*) FROM outbox_event WHERE published_at IS NULL)
                         AS unpublished,
                      (SELECT count(*) FROM payment_attempt) AS attempts,
                      (SELECT count(*) FROM payment_attempt WHERE source = 'LOOKUP')
                         AS learned_by_lookup
                    """
                    )
                )
            )
            .mappings()
            .one()
        )
    return {k: int(v) for k, v in row.items()}


async def _sim_calls_between(sim_url: str, start_s: float, end_s: float) -> int:
    async with httpx.AsyncClient(base_url=sim_url, timeout=30) as client:
        rows = (await client.get("/v1/ledger/calls-per-second")).json()
    return sum(int(r["calls"]) for r in rows if start_s <= int(r["second"]) < end_s)


class ChaosRun:
    """One run's servers and processes, its stages (:meth:`drive`) and its report."""

    def __init__(self, config: ChaosConfig, console: Console) -> None:
        self.config = config
        self.console = console
        self.rng = random.Random(config.seed)
        self.progress = Progress()
        self.started = time.monotonic()
        self.folder = Path(tempfile.mkdtemp(prefix="billing-chaos-"))
        self.infra = Infra(self.folder)
        self.urls = self.infra.urls()
        self.topic = f"chaos-{config.seed}-{int(time.time())}"
        self.api_port, sim_port = free_port(), free_port()
        self.sim_url = f"http://127.0.0.1:{sim_port}"
        self.sim_env = {
            "BILLING_GATEWAY_SIM_PORT": str(sim_port),
            "BILLING_GATEWAY_SIM_SEED": str(config.seed),
            "BILLING_GATEWAY_SIM_LATENCY_MIN_MS": "20",
            "BILLING_GATEWAY_SIM_LATENCY_MAX_MS": "120",
            "BILLING_GATEWAY_SIM_DECLINE_RATE": "0.10",
            "BILLING_GATEWAY_SIM_TIMEOUT_RATE": "0.05",
            "BILLING_GATEWAY_SIM_TIMEOUT_DELAY_SECONDS": "7",
            "BILLING_GATEWAY_SIM_ERROR_RATE": "0.02",
            "BILLING_GATEWAY_SIM_WEBHOOK_URL": (
                f"http://127.0.0.1:{self.api_port}/webhooks/payments"
            ),
            "BILLING_GATEWAY_SIM_WEBHOOK_SECRET": WEBHOOK_SECRET,
            "BILLING_GATEWAY_SIM_WEBHOOK_DUPLICATE_RATE": "0.2",
            "BILLING_GATEWAY_SIM_WEBHOOK_REORDER_RATE": "0.2",
            # a lost webhook after a timeout: only the look-up of the key settles the charge
            "BILLING_GATEWAY_SIM_WEBHOOK_LOSS_RATE": "0.3",
        }
        logs = self.folder / "logs"
        logs.mkdir()
        self.system = System(
            {
                **self.urls,
                "BILLING_KAFKA_TOPIC": self.topic,
                "BILLING_LOG_JSON": "true",
                "BILLING_LOG_LEVEL": "WARNING",
                "BILLING_DUNNING_DELAYS_SECONDS": "[2, 3, 5]",
                "BILLING_DUNNING_JITTER_SECONDS": "2",
                "BILLING_UNKNOWN_RETRY_SECONDS": "3",
                "BILLING_WEBHOOK_SECRETS": WEBHOOK_SECRET,
            },
            logs,
        )
        self.engine = create_async_engine(self.urls["BILLING_DATABASE_URL"], pool_pre_ping=True)
        self.seeded_at: datetime | None = None
        self.stop_kills = asyncio.Event()
        self.kills: asyncio.Task[None] | None = None
        self.acting: asyncio.Task[None] | None = None
        self.drained_at: float | None = None
        self.faults_done_at: float | None = None

    async def drive(self) -> None:
        """Start, seed, inject the faults while customers act, then wait for the drain."""
        self.console.log(f"chaos run in {self.folder}")
        await self.start_servers()
        self.progress.stage = "seeding"
        planned = await self.seed_and_plan()
        self.acting = asyncio.create_task(
            customers(
                f"http://127.0.0.1:{self.api_port}",
                await api_key(self.engine),
                planned,
                self.progress,
                self.config.api_concurrency,
            )
        )
        self.console.log(f"{len(planned)} customer actions planned through the API")
        self.kills = asyncio.create_task(self.killer())
        await self.outages()
        self.progress.stage = "making the kills"
        await asyncio.shield(self.kills)
        self.progress.stage = "answering the customer actions"
        await self.acting
        self.console.log(f"customer actions answered: {self.progress.answers}")
        dead = self.system.dead()
        if dead:
            self.progress.problems.append(f"processes died instead of recovering: {dead}")
        self.faults_done_at = time.monotonic()
        self.progress.stage = "waiting for the drain"
        while True:
            c = await counts(self.engine)
            if c["due_subscriptions"] == c["open_invoices"] == c["unpublished"] == 0:
                break
            await asyncio.sleep(2)
        self.drained_at = time.monotonic()
        self.console.log("drained")

    async def start_servers(self) -> None:
        await asyncio.to_thread(self.infra.run, "up")
        await asyncio.to_thread(migrate.upgrade, self.urls["BILLING_DATABASE_URL"])
        system = self.system
        system.start("gateway-sim", "services.gateway_sim", self.sim_env, f"{self.sim_url}/healthz")
        system.start(
            "api",
            "services.api",
            {"BILLING_API_PORT": str(self.api_port), "BILLING_API_INTERNAL_PORT": "0"},
            f"http://127.0.0.1:{self.api_port}/healthz",
        )
        for i in range(2):
            port = free_port()
            system.start(
                f"renewer-{i}",
                "services.renewer",
                {
                    "BILLING_RENEWER_HEALTH_PORT": str(port),
                    "BILLING_RENEWER_POLL_INTERVAL_SECONDS": "0.5",
                    "BILLING_RENEWER_BATCH_SIZE": "500",
                },
                f"http://127.0.0.1:{port}/healthz",
            )
            port = free_port()
            system.start(
                f"collector-{i}",
                "services.collector",
                {
                    "BILLING_COLLECTOR_HEALTH_PORT": str(port),
                    "BILLING_COLLECTOR_GATEWAY_URL": self.sim_url,
                    "BILLING_COLLECTOR_CONNECT_TIMEOUT_SECONDS": "2",
                    "BILLING_COLLECTOR_READ_TIMEOUT_SECONDS": "5",
                    "BILLING_COLLECTOR_LEASE_SECONDS": "16",
                    "BILLING_COLLECTOR_POLL_INTERVAL_SECONDS": "0.5",
                },
                f"http://127.0.0.1:{port}/healthz",
            )
            port = free_port()
            system.start(
                f"relay-{i}",
                "services.relay",
                {"BILLING_RELAY_HEALTH_PORT": str(port)},
                f"http://127.0.0.1:{port}/healthz",
            )

    async def seed_and_plan(self) -> list[tuple[float, int, str]]:
        now = datetime.now(UTC)
        hard = await seed(self.engine, self.config, now)
        self.seeded_at = now
        async with httpx.AsyncClient(base_url=self.sim_url, timeout=10) as client:
            until = (now + timedelta(days=30)).isoformat()
            for customer in hard:
                await client.post(
                    f"/v1/admin/customers/{customer}/decline-until",
                    json={"until": until, "code": "insufficient_funds"},
                )
        self.console.log(
            f"seeded {self.config.subscriptions} subscriptions ({len(hard)} hard decliners)"
        )
        planned = plan_customer_actions(
            await subscription_due_times(self.engine), time.time(), self.config, self.rng
        )
        self.progress.planned_actions = len(planned)
        return planned

    async def killer(self) -> None:
        """kill -9 a random worker replica every interval and restart it, until the kills are
        made or :attr:`stop_kills` is set (a restart under way is finished first)."""
        faults = self.progress.faults
        while faults["kill -9"] < self.config.kills:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop_kills.wait(), self.config.kill_interval_s)
            if self.stop_kills.is_set():
                return
            victim = self.rng.choice(self.system.workers())
            self.system.procs[victim].kill9()
            faults["kill -9"] += 1
            await asyncio.to_thread(self.system.restart, victim)

    def stop_server(self, server: str) -> None:
        self.infra.run("stop", server)
        self.progress.down.add(server)

    def start_server(self, server: str) -> None:
        self.infra.run("start", server)
        self.progress.down.discard(server)

    async def outages(self) -> None:
        config, faults, progress = self.config, self.progress.faults, self.progress
        progress.stage = "injecting the faults"
        await asyncio.sleep(config.kill_interval_s)
        # Redis outage: the collectors must not call the gateway at all while it is down.
        progress.stage = "the Redis outage"
        self.stop_server("redis")
        down_at = time.time()
        faults["redis outage"] += 1
        await asyncio.sleep(config.outage_s)
        up_at = time.time()
        self.start_server("redis")
        calls = await _sim_calls_between(self.sim_url, int(down_at) + 2, int(up_at))
        if calls:
            progress.problems.append(f"{calls} gateway calls while Redis was down")
        self.console.log(f"redis outage done ({calls} calls while down)")

        progress.stage = "the Kafka outage"
        self.stop_server("kafka")
        faults["kafka outage"] += 1
        before = await counts(self.engine)
        await asyncio.sleep(config.outage_s)
        during = await counts(self.engine)
        self.start_server("kafka")
        self.console.log(
            f"kafka outage done (unpublished {before['unpublished']} -> {during['unpublished']})"
        )

        progress.stage = "the PostgreSQL restart"
        self.stop_server("postgres")
        faults["postgres restart"] += 1
        await asyncio.sleep(3)
        self.start_server("postgres")
        await asyncio.sleep(5)
        self.console.log("postgres restarted")

    async def report(self, finished: bool) -> Outcome:
        """Stop the processes and check the invariants on the state there is, within
        :attr:`ChaosConfig.report_timeout_s`."""
        progress = self.progress
        outcome = Outcome(Report([]), progress.faults, {}, progress.problems, progress.answers)
        await within_deadline(
            self.conclude(outcome, finished), self.config.report_timeout_s, progress
        )
        return outcome

    async def conclude(self, outcome: Outcome, finished: bool) -> None:
        progress = self.progress
        progress.stage = "stopping the kills and the customer actions"
        self.stop_kills.set()
        if self.kills is not None:
            await asyncio.wait([self.kills])  # a failed kill is the drive's problem, not this
        if self.acting is not None:
            self.acting.cancel()
            await asyncio.wait([self.acting])
        for server in sorted(progress.down):  # an outage the deadline cut short
            self.start_server(server)
        if self.seeded_at is None:
            progress.problems.append("nothing seeded: no invariant to check")
            return
        if not finished:
            outcome.left = left_undone(progress, self.config, await counts(self.engine))
        await asyncio.sleep(3)  # late webhooks land
        progress.stage = "stopping the processes"
        codes = await asyncio.to_thread(self.system.stop_all, ("gateway-sim",))
        # uvicorn re-raises SIGTERM after its graceful shutdown, so the API ends with -15
        bad_exits = {
            n: code for n, code in codes.items() if code != 0 and not (n == "api" and code == -15)
        }
        if bad_exits:
            progress.problems.append(f"non-zero exit on SIGTERM: {bad_exits}")
        progress.stage = "reading the evidence and checking it"
        ledger = await fetch_ledger(self.sim_url)
        async with httpx.AsyncClient(base_url=self.sim_url, timeout=30) as client:
            summary = (await client.get("/v1/ledger/summary")).json()
        evidence = await read_topic(self.urls["BILLING_KAFKA_BOOTSTRAP"], self.topic)
        # the seeded period-0 invoices were paid before the run: history, not evidence
        checker = await asyncpg.create_pool(
            pg.asyncpg_dsn(self.urls["BILLING_DATABASE_URL"]), min_size=0, max_size=1
        )
        try:
            outcome.report = await check_all(
                checker,
                now=datetime.now(UTC),
                ledger=ledger,
                topic=evidence,
                since=self.seeded_at,
            )
        finally:
            await checker.close()
        final = await counts(self.engine)
        outcome.figures = {
            "subscriptions": self.config.subscriptions,
            "customer actions planned": progress.planned_actions,
            "seconds from the start to drained": self._seconds(self.started, self.drained_at),
            "seconds draining after the faults and actions": self._seconds(
                self.faults_done_at, self.drained_at
            ),
            "invoices": final["invoices"],
            "paid": final["paid"],
            "failed": final["failed"],
            "canceled subscriptions": final["canceled"],
            "trials": final["trials"],
            "trials ended into a paid period": final["trial_ends"],
            "gateway calls": int(summary.get("calls", 0)),
            "successful charges": int(summary.get("charges_succeeded", 0)),
            "payment attempts recorded": final["attempts"],
            "gateway look-ups (after an uncertain answer)": int(summary.get("lookups", 0)),
            "results learned by look-up": final["learned_by_lookup"],
            "events": final["events"],
            "kafka records": evidence.records,
            "duplicate deliveries": evidence.duplicates,
            "violations": outcome.report.violation_count,
        }
        outcome.figures.update(customer_figures(progress.answers, progress.problems))

    @staticmethod
    def _seconds(start: float | None, end: float | None) -> int:
        """Whole seconds between two monotonic instants; -1 when the run never reached one."""
        return round(end - start) if start is not None and end is not None else -1

    async def close(self) -> None:
        for proc in self.system.procs.values():
            with contextlib.suppress(Exception):
                proc.kill9()
        await self.engine.dispose()
        with contextlib.suppress(Exception):
            self.infra.run("down")


async def run(config: ChaosConfig, console: Console | None = None) -> Outcome:
    """One chaos run, ended by its report: when it drains, or at :attr:`ChaosConfig.deadline_s`
    wherever it is (what was left in :attr:`Outcome.left`)."""
    chaos = ChaosRun(config, console or Console(stderr=True))
    try:
        finished = await within_deadline(chaos.drive(), config.deadline_s, chaos.progress)
        return await chaos.report(finished)
    finally:
        await chaos.close()


def render(outcome: Outcome, console: Console) -> None:
    table = Table(title="Chaos run")
    table.add_column("what")
    table.add_column("count", justify="right")
    for name, n in outcome.faults.items():
        table.add_row(f"fault: {name}", str(n))
    for name, n in outcome.figures.items():
        table.add_row(name, str(n))
    console.print(table)
    if outcome.left:
        left = Table(title="Left at the deadline")
        left.add_column("what")
        left.add_column("count", justify="right")
        for name, n in outcome.left.items():
            left.add_row(name, str(n))
        console.print(left)
    outcome.report.render(console)
    for problem in outcome.problems:
        console.print(f"[red]problem:[/] {problem}")
    console.print("[green]PASS[/]" if outcome.ok else "[red]FAIL[/]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subscriptions", type=int, default=20_000)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--outage-seconds", type=float, default=20.0)
    parser.add_argument(
        "--deadline-seconds",
        type=float,
        default=ChaosConfig.deadline_s,
        help="the whole run's; reached, it stops where it is, checks and reports (exit 1)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    config = ChaosConfig(
        subscriptions=args.subscriptions,
        kills=args.kills,
        outage_s=args.outage_seconds,
        deadline_s=args.deadline_seconds,
    )
    console = Console()
    outcome = asyncio.run(run(config, console))
    render(outcome, console)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "faults": outcome.faults,
                    "figures": outcome.figures,
                    "ok": outcome.ok,
                    "problems": outcome.problems,
                    "left": outcome.left,
                }
            )
        )
    sys.exit(0 if outcome.ok else 1)


if __name__ == "__main__":
    main()
