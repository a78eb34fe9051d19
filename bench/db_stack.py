"""CPU per statement on each way the processes can reach PostgreSQL, against the bare driver.

The same statements, on one connection each, in one process: a read of a subscription with its
plan by id (what ``GET /subscriptions/{id}`` runs), an UPDATE of one row under a version check
(what every lifecycle change runs) and a locking read of 20 rows by id (what a result group
runs), each inside a transaction of its own. Four ways:

* ``asyncpg``: the driver, prepared and cached per connection (the floor);
* ``named``: the same SQL written with ``:name`` parameters, compiled once to the driver's
  ``$n`` form, parameters passed by name and rows read by column name (what a named-query
  module on the driver costs over the bare driver);
* ``sa-connection``: SQLAlchemy's ``AsyncConnection.execute(text(...))`` with named parameters
  and ``.mappings()`` (Core, no ORM session);
* ``sa-session``: the same through an ``AsyncSession``.

CPU is this process's time (``time.process_time``) over N transactions of each kind, the ways
interleaved in rounds so they see the same machine; medians of the rounds. Printed: µs of
client CPU per transaction and the ratio to the driver, with PASS/FAIL for the figure the
choice rests on (a named-query layer within 1.2x of the bare driver).

    python -m bench.db_stack [--transactions 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, create_async_engine

from billing_core.db.pg import Statement
from billing_core.seeding import seed_customers
from tests.support.db import migrated_database

SUBSCRIPTIONS = 2_000
NAMED_OVERHEAD_TARGET = 1.2

READ = """
SELECT s.id, s.customer_id, s.status, s.time_zone, s.billing_anchor, s.period_index,
    s.current_period_start, s.current_period_end, s.cancel_at_period_end, s.canceled_at,
    s.credit_balance, s.version, s.created_at, s.updated_at, p.id AS plan_id,
    p.code AS plan_code, p.price_amount AS plan_price_amount, p.currency AS plan_currency
FROM subscription s JOIN plan p ON p.id = s.plan_id
WHERE s.id = :id
"""
UPDATE = """
UPDATE subscription SET version = version + 1, updated_at = now()
WHERE id = :id AND version = :version
RETURNING version
"""
LOCK = """
SELECT id, version, status FROM subscription WHERE id = ANY(:ids) ORDER BY id FOR UPDATE
"""


def _dsn(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


async def prepare_database(base_url: str) -> str:
    url = await migrated_database(base_url, "bench_db_stack")
    conn = await asyncpg.connect(_dsn(url))
    try:
        await seed_customers(conn, first_id=1, count=SUBSCRIPTIONS)
        await conn.execute(
            "INSERT INTO subscription (customer_id, plan_id, status, billing_anchor, "
            "current_period_start, current_period_end) "
            "SELECT g, (SELECT min(id) FROM plan), 'ACTIVE', now(), now(), "
            "now() + interval '1 month' FROM generate_series(1, $1) g",
            SUBSCRIPTIONS,
        )
    finally:
        await conn.close()
    return url


Unit = Callable[[int], Awaitable[None]]


def driver_units(conn: Any) -> Unit:
    read, update, lock = (Statement(sql).sql for sql in (READ, UPDATE, LOCK))

    async def unit(i: int) -> None:
        sid = 1 + i % SUBSCRIPTIONS
        async with conn.transaction():
            row = await conn.fetchrow(read, sid)
            await conn.fetchrow(update, sid, row[11])
            await conn.fetch(lock, list(range(sid, sid + 20)))

    return unit


def named_units(conn: Any) -> Unit:
    read, update, lock = (Statement(sql) for sql in (READ, UPDATE, LOCK))

    def args(statement: Statement, params: dict[str, Any]) -> list[Any]:
        return [params[name] for name in statement.names]

    async def unit(i: int) -> None:
        sid = 1 + i % SUBSCRIPTIONS
        async with conn.transaction():
            row = await conn.fetchrow(read.sql, *args(read, {"id": sid}))
            version = row["version"]
            await conn.fetchrow(update.sql, *args(update, {"id": sid, "version": version}))
            await conn.fetch(lock.sql, *args(lock, {"ids": list(range(sid, sid + 20))}))

    return unit


def sa_units(db: AsyncConnection | AsyncSession) -> Unit:
    read, update, lock = text(READ), text(UPDATE), text(LOCK)

    async def unit(i: int) -> None:
        sid = 1 + i % SUBSCRIPTIONS
        async with db.begin():
            row = (await db.execute(read, {"id": sid})).mappings().one()
            await db.execute(update, {"id": sid, "version": row["version"]})
            (await db.execute(lock, {"ids": list(range(sid, sid + 20))})).mappings().all()

    return unit


async def cpu_per_unit(unit: Unit, n: int) -> float:
    start = time.process_time()
    for i in range(n):
        await unit(i)
    return (time.process_time() - start) / n


async def measure(url: str, transactions: int, rounds: int) -> dict[str, list[float]]:
    engine = create_async_engine(url, pool_size=2)
    driver = await asyncpg.connect(_dsn(url))
    named = await asyncpg.connect(_dsn(url))
    try:
        async with engine.connect() as sa_conn, AsyncSession(engine) as session:
            ways: dict[str, Unit] = {
                "asyncpg": driver_units(driver),
                "named": named_units(named),
                "sa-connection": sa_units(sa_conn),
                "sa-session": sa_units(session),
            }
            for unit in ways.values():  # warm up: prepare, compile, fill caches
                await cpu_per_unit(unit, 200)
            figures: dict[str, list[float]] = {name: [] for name in ways}
            for _ in range(rounds):
                for name, unit in ways.items():
                    figures[name].append(await cpu_per_unit(unit, transactions))
            return figures
    finally:
        await driver.close()
        await named.close()
        await engine.dispose()


def report(figures: dict[str, list[float]], transactions: int, rounds: int) -> bool:
    floor = statistics.median(figures["asyncpg"])
    print(
        f"{transactions} transactions (read by id, versioned update, lock of 20 rows) per way "
        f"and round, {rounds} rounds, medians; client CPU only"
    )
    print("| way | µs per transaction | spread | ratio to asyncpg |")
    print("|---|---:|---:|---:|")
    for name, values in figures.items():
        median = statistics.median(values)
        print(
            f"| {name} | {median * 1e6:.0f} | {min(values) * 1e6:.0f}-{max(values) * 1e6:.0f} "
            f"| {median / floor:.2f} |"
        )
    named = statistics.median(figures["named"]) / floor
    ok = named <= NAMED_OVERHEAD_TARGET
    print(
        f"  {'PASS' if ok else 'FAIL'}  named queries on the driver: {named:.2f}x the bare "
        f"driver (<= {NAMED_OVERHEAD_TARGET})"
    )
    return ok


async def main_async(args: argparse.Namespace) -> bool:
    url = await prepare_database(os.environ["BILLING_DATABASE_URL"])
    figures = await measure(url, args.transactions, args.rounds)
    return report(figures, args.transactions, args.rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    raise SystemExit(0 if asyncio.run(main_async(args)) else 1)


if __name__ == "__main__":
    main()
