"""Seeded history is imported payments: it checks clean without ``--since``, and a PAID invoice
without a charge that is not imported, or an imported one the gateway charged too, is caught."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.db import pg
from billing_core.invariants.checker import check_all
from billing_core.invariants.ledger import LedgerEvidence
from billing_core.invariants.report import Report
from billing_core.invariants.topic import read_topic
from billing_core.seeding import SeedSpec, seed_history, seed_subscriptions
from services.ops.seed import seed
from tests.integration.invariants.world import World
from tests.support.infra import Services
from tests.support.processes import ROOT, Proc, free_port, start

SUBSCRIPTIONS = 300


@dataclass
class Seeded:
    engine: AsyncEngine  # the test's own SQL
    pool: pg.Pool  # the checker's
    now: datetime
    bootstrap: str
    topic: str

    async def check(self, ledger: LedgerEvidence | None = None) -> Report:
        return await check_all(
            self.pool,
            now=self.now,
            ledger=ledger if ledger is not None else LedgerEvidence({}),
            topic=await read_topic(self.bootstrap, self.topic),
        )

    async def invoices(self, limit: int = 3) -> list[int]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                text("SELECT id FROM invoice WHERE status = 'PAID' ORDER BY id LIMIT :n"),
                {"n": limit},
            )
            return [int(r.id) for r in rows]

    async def sql(self, statement: str, **params: object) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(text(statement), params)


@pytest.fixture
async def seeded(
    engine: AsyncEngine,
    pool: pg.Pool,
    database_url: str,
    services: Services,
    kafka_topic: str,
) -> AsyncIterator[Seeded]:
    """What ``make demo`` seeds (``billing seed``), due in an hour; an empty events topic."""
    now = datetime.now(UTC).replace(microsecond=0)
    await seed(
        database_url,
        count=SUBSCRIPTIONS,
        due_from=now + timedelta(hours=1),
        due_window=timedelta(minutes=1),
        first_customer_id=1_000,
        random_seed=7,
        show_progress=False,
    )
    await World(now=now).publish(services.kafka_bootstrap, kafka_topic, [])
    yield Seeded(engine, pool, now, services.kafka_bootstrap, kafka_topic)


@pytest.fixture(scope="module")
def simulator() -> Iterator[Proc]:
    """A real gateway simulator: its ledger starts empty, as after ``make up``."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="gateway-sim-") as tmp:
        sim = start(
            "gateway-sim",
            "services.gateway_sim",
            {"BILLING_GATEWAY_SIM_PORT": str(port)},
            Path(tmp),
            ready_url=f"http://127.0.0.1:{port}/healthz",
        )
        try:
            yield sim
        finally:
            sim.terminate()


def violations(report: Report) -> list[str]:
    return [str(v) for c in report.checks for v in c.violations]


async def test_a_seeded_world_checks_clean_without_since(seeded: Seeded) -> None:
    report = await seeded.check()
    assert report.ok, violations(report)
    assert report.complete
    assert f"{SUBSCRIPTIONS} invoices paid by an imported payment (history)" in (
        report.check("charges").notes
    )
    assert any("no InvoicePaid expected" in n for n in report.check("events").notes)
    # The database alone (payment attempts as the charge evidence) agrees.
    alone = await check_all(seeded.pool, now=seeded.now, ledger=None, topic=None)
    assert alone.ok, violations(alone)


async def test_billing_check_on_a_seeded_world_exits_0_without_since(
    seeded: Seeded, simulator: Proc
) -> None:
    command = [
        sys.executable,
        "-m",
        "services.cli",
        "check",
        "--gateway-url",
        str(simulator.url),
        "--topic",
        seeded.topic,
        "--now",
        seeded.now.isoformat(),
    ]
    env = {**os.environ, "COLUMNS": "250", "BILLING_LOG_JSON": "false"}
    done = await asyncio.to_thread(
        subprocess.run, command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no violation" in done.stdout


async def test_older_seeded_subscriptions_get_every_past_period(
    engine: AsyncEngine, pool: pg.Pool, services: Services, kafka_topic: str
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    async with pool.acquire() as conn:
        spec = SeedSpec(
            count=200,
            due_from=now + timedelta(hours=1),
            due_window=timedelta(days=1),
            max_past_periods=11,
            credit_share=0.1,
            random_seed=3,
        )
        await seed_subscriptions(conn, spec)
        history = await seed_history(conn, first_customer_id=1)
        expected = await conn.fetchval("SELECT sum(period_index + 1) FROM subscription")
        assert expected > 200  # most subscriptions are some periods old
        assert history.invoices == expected
        assert history.credit_entries == await conn.fetchval(
            "SELECT count(*) FROM subscription WHERE credit_balance > 0"
        )
        # Idempotent: the history is only written for subscriptions that have none.
        again = await seed_history(conn, first_customer_id=1)
        assert (again.invoices, again.credit_entries) == (0, 0)
    await World(now=now).publish(services.kafka_bootstrap, kafka_topic, [])
    report = await Seeded(engine, pool, now, services.kafka_bootstrap, kafka_topic).check()
    assert report.ok, violations(report)
    assert report.check("periods").checked == 200


async def test_a_paid_invoice_without_a_charge_that_is_not_imported_is_caught(
    seeded: Seeded,
) -> None:
    gone, recorded = await seeded.invoices(2)
    # No evidence at all; and a success the collector recorded but the gateway never made.
    await seeded.sql("DELETE FROM payment_attempt WHERE invoice_id = :i", i=gone)
    await seeded.sql(
        "UPDATE payment_attempt SET source = 'COLLECTOR', idempotency_key = :k "
        "WHERE invoice_id = :i",
        k=f"inv-{recorded}-try-0",
        i=recorded,
    )
    report = await seeded.check()
    assert report.check("charges").kinds() == {"paid_without_charge": 2}
    assert report.check("charges").ids("paid_without_charge") == [gone, recorded]
    assert report.check("events").ids("missing_InvoicePaid") == [gone, recorded]
    alone = await check_all(seeded.pool, now=seeded.now, ledger=None, topic=None)
    assert alone.check("charges").ids("paid_without_charge") == [gone]


async def test_an_imported_payment_the_gateway_charged_again_is_a_double_charge(
    seeded: Seeded,
) -> None:
    once, twice, recorded = await seeded.invoices(3)
    await seeded.sql(
        "INSERT INTO payment_attempt (invoice_id, attempt_number, idempotency_key, source, "
        "outcome, amount, currency) SELECT id, 0, 'inv-' || id || '-try-0', 'COLLECTOR', "
        "'SUCCESS', amount, currency FROM invoice WHERE id = :i",
        i=recorded,
    )
    report = await seeded.check(LedgerEvidence({once: 1, twice: 2, recorded: 1}))
    charges = report.check("charges")
    assert charges.kinds() == {"double_charge": 3, "double_charge_recorded": 1}
    assert charges.ids("double_charge") == [once, twice, recorded]
    detail = next(v.detail for v in charges.violations if v.id == twice)
    assert detail == "imported as paid, and 2 successful charge(s) at the gateway"
    assert charges.ids("double_charge_recorded") == [recorded]


async def test_an_imported_payment_for_an_invoice_not_paid_is_caught(seeded: Seeded) -> None:
    (inv,) = await seeded.invoices(1)
    await seeded.sql(
        "UPDATE invoice SET status = 'OPEN', paid_at = NULL, closed_at = NULL, "
        "next_attempt_at = :t WHERE id = :i",
        t=seeded.now,
        i=inv,
    )
    charges = (await seeded.check()).check("charges")
    assert charges.kinds() == {"charged_not_paid": 1}
    assert "OPEN but paid by an imported payment" in str(charges.violations[0])
