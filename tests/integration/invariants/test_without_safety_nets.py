"""Faults the schema itself forbids, reported all the same.

The unique renewal index and the CHECK constraints on amounts and credit are safety nets; the
checker must not rely on them (a migration may drop one, a restore may skip it). These faults
are written in a scratch database of this test's own, migrated, with those nets removed — the
test database every other test shares keeps them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from billing_core.db import migrate, pg
from billing_core.invariants.checker import check_all
from billing_core.settings import CoreSettings
from tests.integration.invariants.world import World
from tests.support.db import recreate_database
from tests.support.infra import Services, checkout_database_name


async def drop_database(admin_url: str, name: str) -> None:
    admin = create_async_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as conn:
            await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        await admin.dispose()


@pytest.fixture
async def bare_engine(services: Services, settings: CoreSettings) -> AsyncIterator[AsyncEngine]:
    name = f"{checkout_database_name()}_nonets"
    await recreate_database(services.admin_database_url, name)
    url = services.database_url(name)
    await asyncio.to_thread(migrate.upgrade, url)
    engine = create_async_engine(url)
    async with engine.begin() as conn:
        await conn.execute(text("DROP INDEX uq_invoice_renewal_period"))
        await conn.execute(text("ALTER TABLE invoice DROP CONSTRAINT ck_invoice_amount"))
        await conn.execute(
            text("ALTER TABLE subscription DROP CONSTRAINT ck_subscription_credit_non_negative")
        )
    try:
        yield engine
    finally:
        await engine.dispose()
        await drop_database(services.admin_database_url, name)


@pytest.fixture
async def bare_pool(bare_engine: AsyncEngine, settings: CoreSettings) -> AsyncIterator[pg.Pool]:
    url = bare_engine.url.render_as_string(hide_password=False)
    created = await pg.create_pool(settings.model_copy(update={"database_url": url}), max_size=2)
    yield created
    await created.close()


async def test_faults_behind_the_schema_safety_nets(
    bare_engine: AsyncEngine, bare_pool: pg.Pool
) -> None:
    world = World(now=datetime.now(UTC).replace(microsecond=0))
    await world.build(bare_pool)
    clean = await check_all(bare_pool, now=world.now, ledger=world.ledger(), topic=None)
    assert clean.ok, [str(v) for c in clean.checks for v in c.violations]

    twice = world.invoices[("a", 1)]
    wrong = world.invoices[("b", 1)]
    sub_c = world.subs["c"]
    async with bare_engine.begin() as conn:
        # A second renewal for the same (subscription, period start): what the index prevents.
        copy = (
            await conn.execute(
                text(
                    "INSERT INTO invoice (subscription_id, customer_id, kind, period_index, "
                    "period_start, period_end, subtotal, amount, currency, status) "
                    "SELECT subscription_id, customer_id, kind, period_index, period_start, "
                    "period_end, subtotal, amount, currency, 'OPEN' FROM invoice WHERE id = :i "
                    "RETURNING id"
                ),
                {"i": twice},
            )
        ).scalar_one()
        await conn.execute(text("UPDATE invoice SET amount = 100 WHERE id = :i"), {"i": wrong})
        await conn.execute(
            text("UPDATE subscription SET credit_balance = -50 WHERE id = :s"), {"s": sub_c}
        )
        # ...its entries agree (1500 - 990 - 560): only the sign is at fault.
        await conn.execute(
            text(
                "INSERT INTO credit_entry (subscription_id, amount, reason) "
                "VALUES (:s, -560, 'ADJUSTMENT')"
            ),
            {"s": sub_c},
        )
    report = await check_all(bare_pool, now=world.now, ledger=world.ledger(), topic=None)
    periods = report.check("periods")
    assert periods.kinds() == {"duplicate_renewal": 1}
    assert periods.ids("duplicate_renewal") == [world.subs["a"]]
    assert f"2 renewal invoices for period 1: [{twice}, " in str(periods.violations[0])
    amounts = report.check("amounts")
    assert amounts.kinds() == {"wrong_amount": 1, "credit_mismatch": 1}
    assert amounts.ids("wrong_amount") == [wrong]
    assert amounts.ids("credit_mismatch") == [sub_c]
    assert "credit balance -50" in str(amounts.violations[-1])
    # The duplicate is OPEN and never scheduled: the stuck check sees it too.
    assert report.check("stuck").kinds() == {"unscheduled_invoice": 1}
    # The copied duplicate has no line; the edited amount is no longer its lines' sum.
    lines = report.check("lines")
    assert lines.kinds() == {"no_lines": 1, "lines_mismatch": 1}
    assert lines.ids("lines_mismatch") == [wrong]
    assert lines.ids("no_lines") == [copy]
    assert report.violation_count == 6
