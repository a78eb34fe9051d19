"""The plans of the hot statements at scale: ``EXPLAIN (ANALYZE, BUFFERS)`` of the renewer's
claim, the collector's due backlog, claim and pre-call check, and the relay's claim, on a
database seeded by ``python -m bench.first_of_month ... --seed-only``, written as one page.

The seeded database holds every subscription's paid history and nothing in flight. So the
1st of the month is set up in one transaction that is rolled back at the end: the renewer's
claim runs on the seeded subscriptions at the due instant; then every due subscription gets its
next invoice OPEN and due and one unpublished event (what renewing them writes), the tables
are analyzed, and the collector's and the relay's statements run on that. Each statement is
the project's own function, its plan captured by ``auto_explain`` (sent to this client), with
each process's default batch size.

    python -m bench.explain_at_scale --database billing_bench_first_of_month

Exits 1 when a plan scans a large table sequentially.
"""

from __future__ import annotations

import argparse
import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import asyncpg  # type: ignore[import-untyped]

from bench.relay_bench import _INSERT_TEMPLATE as OUTBOX_BACKLOG_TEMPLATE
from billing_core.db import pg
from billing_core.repo import collection, outbox_publishing, renewal
from services.collector.settings import CollectorSettings
from services.relay.settings import RelaySettings
from services.renewer.settings import RenewerSettings
from tests.support.infra import start_services

LARGE_TABLES = frozenset(
    {"subscription", "invoice", "invoice_line", "payment_attempt", "outbox_event", "customer"}
)

_LOAD = pg.Statement("LOAD 'auto_explain'")
_FLUSH = pg.Statement("SELECT 1")
_EXPLAINING = pg.Statement(
    """
    SELECT set_config('auto_explain.log_analyze', 'on', true),
           set_config('auto_explain.log_buffers', 'on', true),
           set_config('auto_explain.log_level', 'notice', true),
           set_config('auto_explain.log_min_duration', CAST(:min_ms AS text), true)
    """
)
_DUE_AT = pg.Statement(
    "SELECT min(current_period_end) FROM subscription WHERE status IN ('ACTIVE', 'TRIALING')"
)
_SIZES = pg.Statement(
    """
    SELECT (SELECT count(*) FROM subscription) AS subscriptions,
           (SELECT count(*) FROM subscription
            WHERE status IN ('ACTIVE', 'TRIALING') AND current_period_end <= :now) AS due,
           (SELECT count(*) FROM invoice) AS invoices,
           (SELECT count(*) FROM invoice WHERE status = 'OPEN') AS open_invoices,
           (SELECT count(*) FROM payment_attempt) AS payment_attempts,
           (SELECT count(*) FROM outbox_event WHERE published_at IS NULL) AS unpublished
    """
)
# The next invoice of every due ACTIVE subscription, OPEN and due at once.
_OPEN_BACKLOG = pg.Statement(
    """
    INSERT INTO invoice (subscription_id, customer_id, kind, period_index, period_start,
                         period_end, subtotal, amount, currency, status, next_attempt_at)
    SELECT s.id, s.customer_id, 'RENEWAL', s.period_index + 1, s.current_period_end,
           s.current_period_end + interval '1 month', p.price_amount, p.price_amount,
           p.currency, 'OPEN', s.current_period_end
    FROM subscription s JOIN plan p ON p.id = s.plan_id
    WHERE s.status = 'ACTIVE' AND s.current_period_end <= :now
    """
)
_OUTBOX_BACKLOG = pg.Statement(
    OUTBOX_BACKLOG_TEMPLATE.format(where="status = 'ACTIVE' AND current_period_end <= :now")
)
_ANALYZE = pg.Statement("ANALYZE subscription, invoice, outbox_event")
_COST = re.compile(r"\(cost=")
T = TypeVar("T")
_DURATION = re.compile(r"duration: ([0-9.]+) ms")
_NODE = re.compile(
    r"(Seq Scan|Index Scan|Index Only Scan|Bitmap Heap Scan|Bitmap Index Scan)"
    r"(?: Backward)?(?: using (\S+))? on (\S+)"
)


@dataclass
class Explained:
    name: str
    what: str
    plan: str
    ms: float

    def scans(self) -> list[tuple[str, str | None, str]]:
        """(node, index, table) of every scan; a bitmap index scan names only its index."""
        return [
            (m[1], m[3], "") if m[1] == "Bitmap Index Scan" else (m[1], m[2], m[3])
            for m in _NODE.finditer(self.plan)
        ]

    def large_seq_scans(self) -> list[str]:
        return [t for kind, _, t in self.scans() if kind == "Seq Scan" and t in LARGE_TABLES]

    def summary(self) -> str:
        used = [
            f"`{index}`" + (f" on {table}" if table else "")
            for _, index, table in self.scans()
            if index
        ]
        seq = [f"{table} (sequential)" for kind, _, table in self.scans() if kind == "Seq Scan"]
        reads = ", ".join(dict.fromkeys(used + seq)) or "no table"
        flag = "; **sequential scan of a large table**" if self.large_seq_scans() else ""
        return f"{self.ms:.1f} ms: {reads}{flag}."


class Explainer:
    """Runs a project function with ``auto_explain`` on and keeps the plan it logs."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn
        self.notices: list[str] = []
        conn.add_log_listener(lambda _conn, message: self.notices.append(message.message))
        self.results: list[Explained] = []

    async def explain(self, name: str, what: str, call: Callable[[], Awaitable[T]]) -> T:
        await pg.execute(self.conn, _EXPLAINING, {"min_ms": "0"})
        self.notices.clear()
        try:
            result = await call()
        finally:
            await pg.execute(self.conn, _EXPLAINING, {"min_ms": "-1"})
        await pg.execute(self.conn, _FLUSH)  # the driver hands a notice over at the next reply
        await asyncio.sleep(0.05)
        logged = list(self.notices)
        plans = [n for n in logged if "plan:" in n and _COST.search(n)]
        if not plans:
            raise RuntimeError(f"no plan logged for {name}")
        text = plans[0]
        start = text.index("(cost=")
        root = text[:start].rsplit("\n", 1)[-1]  # the plan's first node
        duration = _DURATION.search(text)
        ms = float(duration[1]) if duration else 0.0
        self.results.append(Explained(name, what, root + text[start:], ms))
        return result


async def capture(url: str) -> tuple[dict[str, Any], dict[str, Any], list[Explained]]:
    conn = await asyncpg.connect(pg.asyncpg_dsn(url))
    try:
        due_at = await pg.fetchval(conn, _DUE_AT)
        if due_at is None:
            raise RuntimeError("no subscription to renew: seed the database first")
        now: datetime = due_at + timedelta(seconds=1)
        explainer = Explainer(conn)
        tx = conn.transaction()
        await tx.start()
        try:
            await pg.execute(conn, _LOAD)
            seeded = dict(await pg.fetchrow(conn, _SIZES, {"now": now}) or {})
            renewer_batch = RenewerSettings.model_fields["renewer_batch_size"].default
            await explainer.explain(
                "renewer claim",
                f"`repo.renewal.claim_due`, {renewer_batch} subscriptions at the due instant",
                lambda: renewal.claim_due(conn, now=now, limit=renewer_batch),
            )
            await pg.execute(conn, _OPEN_BACKLOG, {"now": now})
            await pg.execute(conn, _OUTBOX_BACKLOG, {"now": now, "per_subscription": 1})
            await pg.execute(conn, _ANALYZE)
            backlog = dict(await pg.fetchrow(conn, _SIZES, {"now": now}) or {})
            await explainer.explain(
                "collector due backlog",
                "`repo.collection.due_backlog`: the OPEN invoices due",
                lambda: collection.due_backlog(conn, now=now),
            )
            collector_batch = CollectorSettings.model_fields["collector_batch_size"].default
            lease = timedelta(
                seconds=CollectorSettings.model_fields["collector_lease_seconds"].default
            )
            leased = await explainer.explain(
                "collector claim",
                f"`repo.collection.claim_due_invoices`, {collector_batch} invoices leased",
                lambda: collection.claim_due_invoices(
                    conn, limit=collector_batch, lease=lease, now=now
                ),
            )
            await explainer.explain(
                "collector pre-call check",
                f"`repo.collection.still_ours_to_charge` of the {len(leased)} leased invoices",
                lambda: collection.still_ours_to_charge(conn, leased),
            )
            shards = RelaySettings.model_fields["relay_shards"].default
            relay_batch = RelaySettings.model_fields["relay_batch_size"].default
            await explainer.explain(
                "relay claim",
                f"`repo.outbox_publishing.claim`, {relay_batch} events, all {shards} shards owned",
                lambda: outbox_publishing.claim(
                    conn, shards=shards, owned=range(shards), limit=relay_batch
                ),
            )
        finally:
            await tx.rollback()
        await pg.execute(conn, _ANALYZE)
        return seeded, backlog, explainer.results
    finally:
        await conn.close()


def page(seeded: dict[str, Any], backlog: dict[str, Any], results: list[Explained]) -> str:
    def sizes(row: dict[str, Any]) -> str:
        return ", ".join(f"{k.replace('_', ' ')} {int(v):,}" for k, v in row.items())

    lines = [
        "# Query plans at 5 M subscriptions",
        "",
        "`EXPLAIN (ANALYZE, BUFFERS)` of the statements each process repeats on the 1st of the "
        "month, on the database `python -m bench.first_of_month --subscriptions 1000000 "
        "--total-subscriptions 5000000 --mix --seed-only` seeds, written by "
        "`python -m bench.explain_at_scale` (method in its docstring).",
        "",
        f"* Seeded: {sizes(seeded)}.",
        f"* The collector and the relay run after the renewal's writes: {sizes(backlog)}.",
        "",
        "| statement | time and what it reads |",
        "| --- | --- |",
        *(f"| {r.name} | {r.summary()} |" for r in results),
        "",
    ]
    for r in results:
        lines += [f"## {r.name}", "", f"{r.what}. {r.summary()}", "", "```", r.plan, "```", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", default="billing_bench_first_of_month")
    parser.add_argument("--out", default="docs/benchmarks/plans-5m.md")
    args = parser.parse_args()
    url = start_services().database_url(args.database)
    seeded, backlog, results = asyncio.run(capture(url))
    Path(args.out).write_text(page(seeded, backlog, results))
    for r in results:
        print(f"{r.name}: {r.summary()}")
    raise SystemExit(1 if any(r.large_seq_scans() for r in results) else 0)


if __name__ == "__main__":
    main()
